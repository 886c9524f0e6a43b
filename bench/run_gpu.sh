#!/usr/bin/env bash
# GPU speed (issue: the GPU build; docs/GPU.md): the CUDA build's trainer on
# one GPU at GPT-2 124M's shape (configs/gpt2-124m.conf: L12 C768 NH12,
# V 50257 padded, T 1024, bf16 params/grads/activations, AdamW, random
# init) and at the 350M shape (L24 C1024 NH16), with bf16 GEMMs and flash
# attention (the fast settings) and, for 124M, fp32 GEMMs and the plain
# attention beside them, printing tokens/s and MFU
# (the trainer's: model FLOPs 6N + 12LTC per token over the GPU's data-sheet
# dense bf16 peak, printed in the banner with the measured cuBLAS peaks),
# medians over the steps after the first 3, and the share of the step in
# the GEMMs and the optimizer (the trainer's own timers), and for the first
# run the trainer's kernel table (time per kernel kind: CUDA events around
# each call's kernels, model/kernel_timing.h). With nsys on the PATH it
# also writes nsys's per-kernel summary of a few 124M steps.
# Usage: bench/run_gpu.sh [CUDA_BUILD] [STEPS]   (default build-cuda 15)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda}
steps=${2:-15}
warmup=3
[ -f data/kjv_train.bin ] || make data >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
summary() { # label, json
python3 - "$1" "$2" "$warmup" <<'PY'
import json, sys
label, path, warm = sys.argv[1], sys.argv[2], int(sys.argv[3])
recs = [json.loads(l) for l in open(path)]
run = next(r for r in recs if r["type"] == "run")
st = [r for r in recs if r["type"] == "step" and r["step"] > warm]
med = lambda k: sorted(r[k] for r in st)[len(st) // 2]
print(f"{label}: {med('tokens_per_s'):,.0f} tok/s, MFU {100 * med('mfu'):.2f}% of {run['peak_flops'] / 1e12:.1f} TFLOP/s "
      f"({run.get('gpu', '?')}), {med('ms'):.1f} ms/step: GEMMs {med('gemm_ms'):.1f} ms, optimizer {med('optimizer_ms'):.1f} ms "
      f"(median of {len(st)} steps after {warm}; loss {st[-1]['loss']:.3f})")
PY
}
bench() { # label, args...
    local label=$1
    shift
    "$build/train" --config configs/gpt2-124m.conf --device cuda --gpu_unverified 1 --steps "$steps" --log_json "$tmp/run.json" "$@" \
        >"$tmp/out.txt" 2>&1 || { echo "$label: failed"; tail -15 "$tmp/out.txt"; return 1; }
    summary "$label" "$tmp/run.json"
}
"$build/train" --help >/dev/null
fast=(--gemm_dtype bf16 --attention flash)
bench "124M  B 32 T 1024, bf16 GEMMs, flash attention" --micro_batch 32 "${fast[@]}"
grep -E "^gpu:|device (tracked|used)|device untracked" "$tmp/out.txt" || true
sed -n '/^Kernel time/,/the rest/p' "$tmp/out.txt" # the trainer's per-kernel profile
bench "124M  B 16 T 1024, fp32 GEMMs, plain attention" --micro_batch 16
bench "124M  B 16 T 1024, bf16 GEMMs, plain attention" --micro_batch 16 --gemm_dtype bf16
bench "350M  B 16 T 1024, bf16 GEMMs, flash attention" --n_layer 24 --d_model 1024 --n_head 16 --micro_batch 16 \
    --lr 3e-4 "${fast[@]}"
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1 || true)
if [ -n "$nsys" ]; then
    "$nsys" profile -o "$tmp/prof" --force-overwrite true "$build/train" --config configs/gpt2-124m.conf --device cuda --gpu_unverified 1 \
        --steps 4 --micro_batch 32 "${fast[@]}" >/dev/null 2>&1 &&
        "$nsys" stats --report cuda_gpu_kern_sum --format csv "$tmp/prof.nsys-rep" 2>/dev/null |
        python3 -c '
import csv, sys
rows = [r for r in csv.reader(sys.stdin) if len(r) > 8]
body = rows[1:]
print("per-kernel GPU time (nsys, 4 steps of 124M B 32 incl. start-up), top 15:")
for r in body[:15]: print(f"  {float(r[0]):5.1f}%  {float(r[1]) / 1e6:9.1f} ms  {r[2]:>6} calls  {r[-1][:90]}")' ||
        echo "nsys profile failed"
else
    echo "no nsys here: no per-kernel profile (the step's split above is the trainer's own timers)"
fi
