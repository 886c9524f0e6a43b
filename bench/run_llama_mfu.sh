#!/usr/bin/env bash
# Issue 38's speed target: on a CPU with bf16 instructions, a LLaMA of about
# 124M parameters at B 4, T 256 runs at no lower MFU against the bf16 peak
# than GPT-2 124M does. Runs both, one process, the default precision
# (bf16 params, grads and activations; --gemm_dtype auto: oneDNN's bf16
# GEMMs where the CPU has them), plain attention, and prints each run's
# steady model FLOP/s (the trainer's PaLM count per step over the mean
# step time, steps 3..N) and MFU against one peak for all runs (the best
# bf16 GEMM peak any run measured: each run's own measurement moves with
# the machine's load), with the CPU named. Paired: GPT-2, LLaMA, twice.
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
mfu() { # name args...: parameters, ms per step, model GFLOP/s of steps 3..N (the trainer's own count)
    local name=$1; shift
    build/train "${common[@]}" "$@" >"$tmp/$name.out" 2>&1 || { echo "$name failed"; tail -5 "$tmp/$name.out"; exit 1; }
    python3 - "$tmp/$name.out" "$name" "$tmp/rates" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
params = int(re.search(r"^shardlab train: .*?, (\d+) parameters", out, re.M).group(1))
model = float(re.search(r"^  model +([0-9.e+]+)  PaLM", out, re.M).group(1))  # model FLOPs per step, theory
ms = [float(x) for x in re.findall(r"^step .*\| ([0-9.]+) ms", out, re.M)][2:]
rate = model / (sum(ms) / len(ms) / 1e3) / 1e9
peak = float(re.search(r"^peak: ([0-9.]+) GFLOP/s", out, re.M).group(1))
open(sys.argv[3], "a").write(f"{sys.argv[2]} {rate} {peak}\n")
print(f"{sys.argv[2]:6s} {params/1e6:6.1f}M params | {sum(ms)/len(ms):7.1f} ms/step (steps 3..{len(ms)+2}, min "
      f"{min(ms):.0f}, max {max(ms):.0f}) | {rate:6.1f} GFLOP/s model | the run's measured peak {peak:.0f}")
PY
}
for round in 1 2; do
    mfu gpt2 "${gpt2[@]}"
    mfu llama "${llama[@]}"
done
# MFU against one bf16 peak for all four runs: the best any run measured
python3 - "$tmp/rates" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
peak = max(float(r[2]) for r in rows)
for name in ("gpt2", "llama"):
    mfus = [100 * float(r[1]) / peak for r in rows if r[0] == name]
    print(f"{name:6s} MFU {', '.join(f'{m:.1f}%' for m in mfus)} against {peak:.0f} GFLOP/s (the best measured bf16 peak)")
PY
