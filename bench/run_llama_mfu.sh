#!/usr/bin/env bash
# Issue 38's speed target: on a CPU with bf16 instructions, a LLaMA of about
# 124M parameters at B 4, T 256 runs at no lower MFU against the bf16 peak
# than GPT-2 124M does. Runs both, one process, the default precision
# (bf16 params, grads and activations; --gemm_dtype auto: oneDNN's bf16
# GEMMs where the CPU has them), plain attention, and prints each run's
# steady MFU (the steps after the first two, as the trainer prints them)
# with the CPU named. Paired: GPT-2, LLaMA, GPT-2, LLaMA.
#   LLaMA: L 12, C 768, 12 query heads sharing 4 key/value heads, F 2048,
#   V 32000 (LLaMA 2's vocabulary), untied: 124.4M parameters.
# Usage: bench/run_llama_mfu.sh [STEPS] [THREADS]   (build first: make all)
set -eu
steps=${1:-8}
threads=${2:-2}
tmp=$(mktemp -d /tmp/shardlab_llama_mfu_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
build/prepare --input data/kjv.txt --train "$tmp/train.bin" --val "$tmp/val.bin" >/dev/null
common=(--micro_batch 4 --seq_len 256 --steps "$steps" --threads "$threads" --val_every 0 --sample_tokens 0
        --train_data "$tmp/train.bin" --warmup_steps 1)
gpt2=(--config configs/gpt2-124m.conf)
llama=(--config configs/gpt2-124m.conf --arch llama --n_kv_head 4 --ffn_dim 2048 --vocab_size 32000
       --rope_theta 10000)
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores; flags:" \
     "$(grep -m1 -o -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
mfu() { # name args...: the banner's parameters and the mean MFU of steps 3..N
    local name=$1; shift
    build/train "${common[@]}" "$@" >"$tmp/$name.out" 2>&1 || { echo "$name failed"; tail -5 "$tmp/$name.out"; exit 1; }
    python3 - "$tmp/$name.out" "$name" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
params = re.search(r"^shardlab train: .*?, (\d+) parameters", out, re.M).group(1)
gemms = re.search(r"^GEMMs: (.*)$", out, re.M).group(1)
peak = re.search(r"^peak: (.*)$", out, re.M).group(1)
mfus = [float(x) for x in re.findall(r"^step .*\| MFU ([0-9.]+)%", out, re.M)][2:]
ms = [float(x) for x in re.findall(r"^step .*\| ([0-9.]+) ms", out, re.M)][2:]
print(f"{sys.argv[2]:6s} {int(params)/1e6:6.1f}M params | MFU {sum(mfus)/len(mfus):5.1f}% (steps 3..{len(mfus)+2}, "
      f"min {min(mfus):.1f}, max {max(mfus):.1f}) | {sum(ms)/len(ms):7.1f} ms/step | GEMMs: {gemms}")
print(f"       peak: {peak}")
PY
}
for round in 1 2; do
    mfu gpt2 "${gpt2[@]}"
    mfu llama "${llama[@]}"
done
