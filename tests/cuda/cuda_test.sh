#!/usr/bin/env bash
# cuda_test.sh CPU_BUILD CUDA_BUILD: `make cuda-test` (docs/GPU.md).
# Runs every CUDA test: each program CUDA_BUILD/tests/cuda/test_* (each
# kernel against its CPU reference; v2's and Adafactor's among them), then
# tests/cuda/gpu_train.sh, every part (the whole model against the CPU
# build: dp, tp, pp, Adafactor, checkpoints, --gpu_path v2) and
# tests/cuda/gpu_grads.sh. The count of tests is the cmocka tests passed
# plus the scripts' "ok" checks.
#   all ran and passed: the stamp for CUDA_BUILD/train's build and this GPU
#     (CUDA_BUILD/tests/cuda/stamp_write, model/gpu_stamp.h), and the
#     line to append to tests/cuda/gpu_verified.txt (the project's
#     history); exit 0
#   some failed: no stamp (an earlier one is removed); exit 1
#   some skipped (no CUDA device), none failed: no stamp; exit 0
set -uo pipefail
cpu=${1:-build}
gpu=${2:-build-cuda}
here=$(cd "$(dirname "$0")" && pwd)
stamp="$gpu/gpu_verified.stamp"
log=$(mktemp /tmp/shardlab_cuda_test_XXXXXX)
trap 'rm -f "$log"' EXIT
passed=0 failed=0 skipped=0

# run_logged LABEL COMMAND...: its output shown and kept in $log; a
# failure or a skip counted
run_logged() {
    local label=$1 rc
    shift
    echo "== $label"
    "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { failed=$((failed + 1)); echo "!! $label: exit $rc"; }
    grep -qiE '^\[  SKIPPED \]|skipped' "$log" && skipped=$((skipped + 1))
    return 0
}

for t in "$gpu"/tests/cuda/test_*; do
    run_logged "$t" "$t"
    n=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test(s)\.$/\1/p' "$log" | tail -1)
    passed=$((passed + ${n:-0}))
done
for script in gpu_train gpu_grads; do
    # every part of gpu_train.sh: the stamp covers what ran
    run_logged "tests/cuda/$script.sh" env -u GPU_TRAIN_PARTS "$here/$script.sh" "$cpu" "$gpu"
    passed=$((passed + $(grep -c '^ok ' "$log")))
done

if [ "$failed" -ne 0 ]; then
    rm -f "$stamp"
    echo "cuda-test: $failed failed ($passed tests passed): no stamp; $gpu/train refuses to run on a GPU"
    exit 1
fi
if [ "$skipped" -ne 0 ] || [ "$passed" -eq 0 ]; then
    echo "cuda-test: $skipped program(s) skipped tests (no CUDA device?), $passed passed: no stamp; $gpu/train refuses to run on a GPU"
    exit 0
fi
line=$("$gpu/tests/cuda/stamp_write" "$gpu/train" "$passed") || { echo "cuda-test: the stamp was not written"; exit 1; }
echo "cuda-test: all $passed tests passed: $stamp now says $line"
commit=$(git describe --always --dirty 2>/dev/null || echo '(no git here)')
echo "cuda-test: the project's history: append to tests/cuda/gpu_verified.txt:"
echo "$commit ${line#gpu }"
