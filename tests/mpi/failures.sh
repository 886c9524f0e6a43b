#!/usr/bin/env bash
# Failure behaviour of build/train under mpirun, as users meet it:
#  1. a world that cannot form the grid: every rank exits non-zero, one message;
#  2. data no rank can open: every rank exits non-zero, one message naming the file;
#  3. kill -9 of one rank mid-run: OpenMPI's mpirun notices the dead rank,
#     kills the others and exits non-zero. Nobody hangs (each run has a
#     timeout; a timeout is a failure);
#  4. a model whose buffers cannot be allocated: every rank exits non-zero,
#     one message naming the buffer and its bytes (no crash, no OOM kill);
#  5. a run that goes NaN (SGD at lr 10, no clipping) on 2 ranks under
#     ZeRO-1: every rank stops at the same step, one message naming it, and
#     the resume state written before that step still loads.
# Usage: tests/mpi/failures.sh BUILD_DIR (build or build-san)
set -u
build=${1:-build}
train="$build/train"
tmp=$(mktemp -d /tmp/shardlab_failures_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --oversubscribe --allow-run-as-root)
for v in ASAN_OPTIONS UBSAN_OPTIONS; do [ -n "${!v:-}" ] && mpi+=(-x "$v"); done
fails=0
check() { # name, condition result
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

"$build/prepare" --input data/kjv.txt --train "$tmp/train.bin" --val "$tmp/val.bin" >/dev/null || exit 1
common=(--config configs/tiny.conf --train_data "$tmp/train.bin" --val_data "$tmp/val.bin" --threads 1)

# 1. 4 ranks, tp 3
timeout 60 "${mpi[@]}" -np 4 "$train" "${common[@]}" --tp 3 >"$tmp/out1" 2>"$tmp/err1"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c 'cannot form a grid with tp 3' "$tmp/err1")" -eq 1 ]
check "4 ranks cannot form tp 3: non-zero exit, one message" $?

# 2. missing data on every rank
timeout 60 "${mpi[@]}" -np 2 "$train" "${common[@]}" --train_data "$tmp/none.bin" >"$tmp/out2" 2>"$tmp/err2"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c 'none.bin' "$tmp/err2")" -eq 1 ]
check "missing train_data: non-zero exit, one message naming the file" $?

# 3. kill -9 of rank 1 while training
timeout 90 "${mpi[@]}" -np 2 "$train" "${common[@]}" --steps 1000000 --val_every 0 >"$tmp/out3" 2>"$tmp/err3" &
job=$!
for _ in $(seq 1 200); do grep -q '^step' "$tmp/out3" 2>/dev/null && break; sleep 0.1; done
victim=""
for pid in $(pgrep -f "$train"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then victim=$pid; fi
done
[ -n "$victim" ] && kill -9 "$victim"
wait $job
rc=$?
[ -n "$victim" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && ! pgrep -f "$train" >/dev/null
check "kill -9 of rank 1: mpirun ends the job non-zero (rc $rc), no rank left running" $?

# 4. params of a 65536-wide layer in bf16 (103 GB) on each of 2 ranks. The
# sanitizer build must return NULL rather than abort on a huge request.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"
timeout 60 "${mpi[@]}" -x ASAN_OPTIONS -np 2 "$train" "${common[@]}" --n_layer 1 --d_model 65536 \
    >"$tmp/out4" 2>"$tmp/err4"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c "out of memory allocating 'params' (103118929920 bytes" "$tmp/err4")" -eq 1 ]
check "unallocatable params: non-zero exit (rc $rc), one message naming the buffer and its bytes" $?

# 5. NaN on 2 ranks, ZeRO-1 (the optimizer states sharded, so the ranks
# must agree to skip the update and the parameter all-gather together)
nan=(--optimizer sgd --lr 10 --grad_clip 0 --warmup_steps 10 --steps 20 --val_every 0 --zero 1
     --save_state "$tmp/nan.state" --save_state_every 1)
timeout 60 "${mpi[@]}" -np 2 "$train" "${common[@]}" "${nan[@]}" >"$tmp/out5" 2>"$tmp/err5"
rc=$?
step=$(grep -o '^error (rank 0,1): step [0-9]*: [^(]*(non-finite): its update was not applied' "$tmp/err5" |
       grep -o 'step [0-9]*' | grep -o '[0-9]*')
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ -n "$step" ] && [ "$(grep -c 'non-finite' "$tmp/err5")" -eq 1 ] &&
    timeout 60 "${mpi[@]}" -np 2 "$train" "${common[@]}" "${nan[@]}" --save_state "" --resume "$tmp/nan.state" \
        --steps $((step - 1)) >"$tmp/out5b" 2>"$tmp/err5b" &&
    grep -q "from step $((step - 1))" "$tmp/out5b"
check "NaN at step ${step:-?} on 2 ranks: both stop (rc $rc), one message; the state of step $((${step:-1} - 1)) loads" $?

[ $fails -eq 0 ] && echo "failure tests passed" || { echo "$fails failure test(s) failed"; exit 1; }
