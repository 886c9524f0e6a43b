#!/usr/bin/env bash
# Everything a lent GPU machine must do, in ONE device call under the
# tool's 10 minutes (docs/GPU.md, "What a device call verifies"):
#   1. build: the CPU build, the CUDA build (CUDA_ARCHS from the GPU), the data
#   2. make cuda-test: every CUDA unit test (build-cuda/tests/cuda/test_*: each
#      kernel against its CPU reference) and tests/cuda/gpu_train.sh and
#      gpu_grads.sh (the whole model against the CPU build, 2 ranks on one
#      GPU, checkpoints, --gpu_path v2); when all pass, the stamp that lets
#      build-cuda/train run on this GPU (model/gpu_stamp.h)
#   3. --gpu_path v2 against v1 and against the CPU build over 50 steps of
#      configs/demo.conf, with gpu_train.sh's bounds (fp32: 1e-4 on the loss
#      at every step, 1e-5 on the first gradient norm; bf16: 2e-2 and 1e-2).
#      v2 is the bf16 data path and refuses fp32 at start-up
#      (train/config/config_model.c: config_check_gpu_path), so v2 runs bf16,
#      with flash attention (its FlashAttention-2 kernels; the plain
#      attention's v2 form widens into v1's kernels, checked by
#      test_v2_flow_cuda); v1 runs fp32 against the CPU too
#   4. GPT-2 124M (B 32, T 1024, bf16 GEMMs, flash attention), 50 steps on
#      each path: v2 against v1 (bf16 bounds), the speed table (median tok/s,
#      MFU, ms, GEMM and optimizer ms), each path's kernel table, and the
#      energy figures (NVML joules per step, per token, TFLOP per joule,
#      beside the planner's E = t x P at the GPU's power limit); then the
#      350M shape (L24 C1024 NH16, B 16) on v1 for the speed table
#   5. when every step passed: the line for tests/cuda/gpu_verified.txt (the
#      project's history), as make cuda-test printed it
# Results go, as they come, to one file: $OUT/gpu_verify.txt under the
# device tool (which brings $OUT back), else build-cuda/gpu_verify.txt, or
# the path given. Each step runs under a timeout cut to what is left of
# GPU_VERIFY_SECONDS (default 560): a step that does not finish fails, and
# then no history line is printed. The runs of steps 3 and 4 pass
# --gpu_unverified 1, so they measure even where cuda-test failed; their
# banners say whether the stamp covers them.
#
# On this machine first: bench/gpu_machine.sh fetch (the CPU build's
# packages into .gpu-debs/). The device call, carrying .gpu-debs:
#   bench/gpu_verify.sh
# A second call on the still-warm machine may repeat only some steps:
#   GPU_VERIFY_STEPS="compare speed" bench/gpu_verify.sh
# Without a GPU it says "skipped: no CUDA device" and exits 0.
set -uo pipefail
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/.." || exit 1
tmp=${GPU_VERIFY_TMP:-}
# run NAME PROGRAM ARGS...: one training run, its log and JSON in $tmp
run() {
    local name=$1
    shift
    "$@" --log_json "$tmp/$name.json" >"$tmp/$name.out" 2>&1 || { echo "!! $name failed:"; tail -20 "$tmp/$name.out"; return 1; }
}
# compare A B LOSS_BOUND NORM_BOUND LABEL: gpu_train.sh's comparison
compare() {
python3 - "$tmp/$1.json" "$tmp/$2.json" "$3" "$4" "$5" <<'PY'
import json, sys
steps = lambda p: [r for r in map(json.loads, open(p)) if r.get("type") == "step"]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
bound, gbound, label = float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
if not a or len(a) != len(b):
    print(f"!! {label}: {len(a)} vs {len(b)} steps"); sys.exit(1)
worst = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
g = abs(a[0]["grad_norm"] - b[0]["grad_norm"]) / a[0]["grad_norm"]
ok = worst <= bound and g <= gbound and a[-1]["loss"] < a[0]["loss"] - 0.5
print(f"{'ok' if ok else '!!'} {label}, {len(a)} steps: loss {a[0]['loss']:.6f} -> {a[-1]['loss']:.6f} / "
      f"{b[-1]['loss']:.6f}, max |loss diff| {worst:.2e} (bound {bound:.0e}), step-1 grad norm rel diff {g:.2e} "
      f"(bound {gbound:.0e})")
sys.exit(0 if ok else 1)
PY
}
gpu_run=(build-cuda/train --device cuda --gpu_unverified 1)
demo=(--config configs/demo.conf --steps 50 --micro_batch 8 --val_every 0 --sample_tokens 0)
fp32=(--param_dtype fp32 --grad_dtype fp32 --act_dtype fp32)

# 3. v2 against v1 and the CPU build, demo, 50 steps
compare_paths() {
    local rc=0 threads
    threads=$(nproc)
    local flash=(--attention flash)
    run cpu32 build/train "${demo[@]}" "${fp32[@]}" --threads "$threads" || return 1
    run cpu16 build/train "${demo[@]}" "${flash[@]}" --threads "$threads" || return 1
    run v1_32 "${gpu_run[@]}" --gpu_path v1 "${demo[@]}" "${fp32[@]}" || rc=1
    for p in v1 v2; do
        run "${p}_16" "${gpu_run[@]}" --gpu_path $p "${demo[@]}" "${flash[@]}" || rc=1
    done
    [ $rc -eq 0 ] || return 1
    compare cpu32 v1_32 1e-4 1e-5 "demo, fp32: v1 vs the CPU build" || rc=1
    compare cpu16 v2_16 2e-2 1e-2 "demo, bf16 params/grads/activations, flash: v2 vs the CPU build" || rc=1
    compare v1_16 v2_16 2e-2 1e-2 "demo, bf16, flash: v2 vs v1" || rc=1
    # the option reached the device: each banner names its path
    grep -h "^gpu:" "$tmp/v1_16.out" "$tmp/v2_16.out"
    if ! grep -q "gpu_path v1" "$tmp/v1_16.out" || ! grep -q "gpu_path v2" "$tmp/v2_16.out"; then
        echo "!! the runs' banners do not name --gpu_path v1 and v2"
        rc=1
    fi
    return $rc
}
# 4. 124M on each path: comparison, speed, kernels, energy; 350M speed
summary() { # label, json: the speed table's row and the energy figures
python3 - "$1" "$2" <<'PY'
import json, sys
label, path, warm = sys.argv[1], sys.argv[2], 3
recs = [json.loads(l) for l in open(path)]
run = next(r for r in recs if r["type"] == "run")
st = [r for r in recs if r["type"] == "step" and r["step"] > warm]
med = lambda k: sorted(r[k] for r in st)[len(st) // 2]
print(f"{label}: {med('tokens_per_s'):,.0f} tok/s, MFU {100 * med('mfu'):.2f}% of {run['peak_flops'] / 1e12:.1f} TFLOP/s "
      f"({run.get('gpu', '?')}), {med('ms'):.1f} ms/step: GEMMs {med('gemm_ms'):.1f} ms, optimizer "
      f"{med('optimizer_ms'):.1f} ms (median of {len(st)} steps after {warm}; loss {st[-1]['loss']:.3f})")
e = next((r for r in recs if r["type"] == "energy"), None)
j = [r["joules"] for r in st if r.get("joules") is not None]
if e and e["joules_per_step"] is not None:
    print(f"{label}: energy {e['joules_per_step']:.1f} J/step (step median {sorted(j)[len(j) // 2] if j else float('nan'):.1f}), "
          f"{e['joules_per_token'] * 1e3:.3f} mJ/token, {e['tflop_per_joule']:.3f} model TFLOP/J ({e['source']}); "
          f"planner E = t x P: " + (f"{e['planned_joules_per_step']:.1f} J/step at {e['watts']:.0f} W"
                                    if e["planned_joules_per_step"] is not None else "no P"))
else:
    print(f"{label}: energy not available here ({e['why_not'] if e else 'no energy record'})")
PY
}
speed() {
    local rc=0 p
    local m124=(--config configs/gpt2-124m.conf --micro_batch 32 --gemm_dtype bf16 --attention flash --steps 50
                --val_every 0 --sample_tokens 0)
    for p in v1 v2; do
        run "m124_$p" "${gpu_run[@]}" --gpu_path $p "${m124[@]}" || { rc=1; continue; }
        summary "124M B 32 T 1024, bf16 GEMMs, flash, --gpu_path $p" "$tmp/m124_$p.json" || rc=1
        echo "kernel table, --gpu_path $p:"
        sed -n '/^Kernel time/,/the rest/p' "$tmp/m124_$p.out"
    done
    [ $rc -eq 0 ] && { compare m124_v1 m124_v2 2e-2 1e-2 "124M, 50 steps: v2 vs v1" || rc=1; }
    run m350 "${gpu_run[@]}" --config configs/gpt2-124m.conf --n_layer 24 --d_model 1024 --n_head 16 --micro_batch 16 \
        --lr 3e-4 --gemm_dtype bf16 --attention flash --steps 20 --val_every 0 --sample_tokens 0 &&
        summary "350M B 16 T 1024, bf16 GEMMs, flash, --gpu_path v1" "$tmp/m350.json" || rc=1
    return $rc
}
# A stage runs in a process of its own (this script with --stage), so
# timeout can end it and everything it started.
if [ "${1:-}" = --stage ]; then
    shift
    "$@"
    exit $?
fi

total=${GPU_VERIFY_SECONDS:-560}
deadline=$((SECONDS + total))
out=${1:-${OUT:+$OUT/gpu_verify.txt}}
out=${out:-build-cuda/gpu_verify.txt}
mkdir -p "$(dirname "$out")"
: >"$out"
tmp=$(mktemp -d /tmp/shardlab_gpu_verify_XXXXXX)
export GPU_VERIFY_TMP=$tmp
trap 'rm -rf "$tmp"' EXIT
steps=" ${GPU_VERIFY_STEPS:-build tests compare speed} "
want() { [[ "$steps" == *" $1 "* ]]; }
say() { echo "$*" | tee -a "$out"; }
fails=0
ran=()
# stage NAME SECONDS COMMAND...: under a timeout of at most SECONDS and of
# what is left; its output into the results file; a failure counted.
stage() {
    local name=$1 limit=$2 left=$((deadline - SECONDS)) rc=0 t0=$SECONDS
    shift 2
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$limit" -le 5 ]; then
        say "!! $name: not run, out of time ($total s in all)"
        fails=$((fails + 1))
        return 1
    fi
    say "== $name (at most $limit s)"
    timeout --kill-after=10 "$limit" "$self" --stage "$@" >"$tmp/$name.log" 2>&1 || rc=$?
    cat "$tmp/$name.log" >>"$out"
    ran+=("$name")
    if [ $rc -eq 0 ]; then say "ok $name in $((SECONDS - t0)) s"; return 0; fi
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then say "!! $name: timed out after $limit s"
    else tail -15 "$tmp/$name.log"; say "!! $name: exit $rc"; fi
    fails=$((fails + 1))
    return 1
}

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    say "gpu_verify: skipped: no CUDA device"
    exit 0
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | head -1)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
say "gpu_verify: $gpu (sm_$cc), $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '(no git here)')"
if [ -d .gpu-debs ]; then eval "$(bench/gpu_machine.sh env)" || { say "!! bench/gpu_machine.sh env failed"; exit 1; }; fi
export CUDA_ARCHS=${CUDA_ARCHS:-sm_$cc}

# 1. build
if want build; then
    stage build 240 make -j"$(nproc)" all cuda data || { say "gpu_verify: the build failed: nothing else runs"; exit 1; }
fi

# 2. every CUDA test, and the stamp
want tests && stage cuda-test 380 make cuda-test

want compare && stage compare-demo 75 compare_paths

want speed && stage speed-energy 150 speed

# 5. the history line, only when everything ran and passed
if [ $fails -ne 0 ]; then
    say "gpu_verify: $fails step(s) failed (${ran[*]:-none ran}): no history line"
    exit 1
fi
if [ "$steps" != " build tests compare speed " ]; then
    say "gpu_verify: passed the steps asked for ($steps): the history line needs every step in one tree"
    exit 0
fi
say "gpu_verify: all passed. Append this line to tests/cuda/gpu_verified.txt (the project's history):"
sed -n '/the project.s history: append/{n;p}' "$tmp/cuda-test.log" | tee -a "$out"
