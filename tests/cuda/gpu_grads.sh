#!/usr/bin/env bash
# One step's gradients on the GPU against the CPU build's, tensor by tensor
# (docs/GPU.md). With SGD (no momentum, no weight decay), lr 1 from the first
# step, no clipping and fp32 params, grads and activations, one update is
# w1 = w0 - g: each build's gradient of every parameter is its llm.c model
# file before the step minus the one after (the same init, the same batch).
# Bound, per tensor of the llm.c layout: max |g_gpu - g_cpu| <= 1e-4
# max |g_cpu| + 1e-8 (the GEMMs' and reductions' order differs; the floor
# is the rounding of w0 - w1 where a tensor's gradient is tiny beside its
# weights). configs/demo.conf, plain attention and flash (flash's GPU kernel
# rounds its operands to bf16: bound 2e-2 there, as in gpu_train.sh).
# GPU_DEVICE=cpu runs the CUDA build on the host instead (then the two must
# be equal bit for bit: a check of this script). Without a GPU it says
# "skipped: no CUDA device" and exits 0.
# Usage: tests/cuda/gpu_grads.sh CPU_BUILD CUDA_BUILD
set -u
cpu=${1:-build}
gpu=${2:-build-cuda}
device=${GPU_DEVICE:-cuda}
tmp=$(mktemp -d /tmp/shardlab_gpu_grads_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if [ "$device" = cuda ] &&
   "$gpu/train" --config configs/tiny.conf --device cuda --gpu_unverified 1 --steps 1 --val_every 0 --sample_tokens 0 2>&1 |
   grep -q "no CUDA device"; then
    echo "gpu_grads: skipped: no CUDA device"
    exit 0
fi
"$cpu/prepare" --input data/kjv.txt --train "$tmp/train.bin" --val "$tmp/val.bin" >/dev/null || exit 1
args=(--config configs/demo.conf --micro_batch 8 --val_every 0 --sample_tokens 0 --train_data "$tmp/train.bin"
      --param_dtype fp32 --grad_dtype fp32 --act_dtype fp32 --optimizer sgd --momentum 0 --weight_decay 0
      --lr 1 --lr_schedule constant --warmup_steps 0 --grad_clip 0)
fails=0
for attention in plain flash; do
    for b in cpu gpu; do
        prog="$cpu/train" && dev=()
        [ "$b" = gpu ] && prog="$gpu/train" && dev=(--device "$device" --gpu_unverified 1)
        for steps in 0 1; do
            timeout 300 "$prog" "${args[@]}" "${dev[@]}" --attention "$attention" --steps "$steps" \
                --save "$tmp/$b$steps.bin" >"$tmp/$b$steps.out" 2>&1 ||
                { echo "!! $b, $steps step(s), $attention: failed"; tail -5 "$tmp/$b$steps.out"; exit 1; }
        done
    done
    bound=1e-4
    [ "$attention" = flash ] && [ "$device" = cuda ] && bound=2e-2
    [ "$device" = cpu ] && bound=0
    python3 - "$tmp" "$bound" "$attention" <<'PY' || fails=$((fails + 1))
import struct, sys
tmp, bound, attention = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def params(name):
    raw = open(f"{tmp}/{name}.bin", "rb").read()
    h = struct.unpack("<256i", raw[:1024])
    assert h[1] == 3, "fp32 model files expected"
    return h, struct.unpack(f"<{(len(raw) - 1024) // 4}f", raw[1024:])
h, cpu0 = params("cpu0")
_, cpu1 = params("cpu1")
_, gpu0 = params("gpu0")
_, gpu1 = params("gpu1")
maxT, V, L, NH, C, Vp = h[2:8]
sizes = [("wte", Vp * C), ("wpe", maxT * C), ("ln1w", L * C), ("ln1b", L * C), ("qkvw", L * 3 * C * C),
         ("qkvb", L * 3 * C), ("attprojw", L * C * C), ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C),
         ("fcw", L * 4 * C * C), ("fcb", L * 4 * C), ("fcprojw", L * C * 4 * C), ("fcprojb", L * C), ("lnfw", C),
         ("lnfb", C)]
assert sum(n for _, n in sizes) == len(cpu0) == len(gpu1), "the llm.c layout"
assert cpu0 == gpu0, "the two builds start from different weights"
at, ok, worst = 0, True, 0.0
for name, n in sizes:
    gc = [a - b for a, b in zip(cpu0[at:at + n], cpu1[at:at + n])]
    gg = [a - b for a, b in zip(gpu0[at:at + n], gpu1[at:at + n])]
    scale = max(abs(x) for x in gc)
    diff = max(abs(x - y) for x, y in zip(gc, gg))
    rel = diff / scale if scale > 0 else diff
    worst = max(worst, rel)
    if diff > bound * scale + (1e-8 if bound > 0 else 0):
        ok = False
        print(f"!! {attention}: {name}: max |g_gpu - g_cpu| {diff:.3e} > {bound:.0e} x max |g_cpu| {scale:.3e}")
    at += n
print(f"{'ok' if ok else '!!'} one step's gradients, {attention} attention, GPU vs CPU build, {len(sizes)} tensors "
      f"({len(cpu0)} values): worst per-tensor max |diff| / max |g_cpu| {worst:.2e} (bound {bound:.0e})")
sys.exit(0 if ok else 1)
PY
done
[ "$fails" -eq 0 ] && echo "gpu_grads: all passed" || echo "gpu_grads: $fails failed"
exit $((fails > 0))
