#!/usr/bin/env bash
# Stopping build/train by signal, as a scheduler or a user does it:
#  1. SIGTERM to a 1-rank run: it finishes the step, writes the resume state
#     to the default path (<save>.state), exits 3;
#  2. SIGTERM to every rank of a 2-rank ZeRO-3 run, as a batch scheduler
#     delivers it (SLURM's scancel signals every task): the ranks agree the
#     stop at a step boundary, write the state together and exit 3, which
#     mpirun passes on. (SIGTERM to mpirun itself is not a way to stop a
#     run here: Open MPI 4.1.4's mpirun tears the job down and the ranks
#     exit 1 without ever receiving the signal, measured with strace; the
#     README says to send SIGUSR1 to mpirun, case 3, or SIGTERM to the ranks.)
#  3. SIGUSR1 to mpirun is forwarded at once and mpirun exits with the
#     ranks' 3;
#  4. an unwritable --save fails every rank before step 1.
# A state resumed to step K gives the straight run's JSON step records
# (loss, grad_norm) and its final model file, byte for byte.
# Usage: tests/mpi/stop_signal.sh BUILD_DIR (build or build-san)
set -u
build=${1:-build}
train="$build/train"
tmp=$(mktemp -d /tmp/shardlab_stop_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --oversubscribe --allow-run-as-root)
for v in ASAN_OPTIONS UBSAN_OPTIONS; do [ -n "${!v:-}" ] && mpi+=(-x "$v"); done
fails=0
check() { # name, condition result
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

"$build/prepare" --input data/kjv.txt --train "$tmp/train.bin" --val "$tmp/val.bin" >/dev/null || exit 1
# a constant LR after warmup, so a run's steps = K and steps = 10^6 train alike
common=(--config configs/tiny.conf --train_data "$tmp/train.bin" --val_data "$tmp/val.bin" --threads 1
    --val_every 0 --lr_schedule constant)

wait_first_step() { # stdout file
    for _ in $(seq 1 300); do grep -q '^step' "$1" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}
launched() { # the process `timeout` started (mpirun): signals go to it, not to timeout
    pgrep -P "$1" | head -n 1
}
step_records() { # json log -> "step loss grad_norm" lines
    grep '"type":"step"' "$1" | sed -E 's/.*"step":([0-9]+),"loss":([^,]*),.*"grad_norm":([^,]*),.*/\1 \2 \3/'
}
# name, launcher words...: the stopped run's files are $tmp/name.{json,bin.state}; resume it
# to K = its step + 5 and compare with a straight run to K
resume_matches() {
    local name=$1
    shift
    local k K
    k=$(step_records "$tmp/$name.json" | wc -l)
    K=$((k + 5))
    timeout 120 "$@" "$train" "${common[@]}" --steps $K --resume "$tmp/$name.bin.state" \
        --log_json "$tmp/$name.json" --save "$tmp/$name.bin" >"$tmp/$name.out2" 2>&1 || return 1
    timeout 120 "$@" "$train" "${common[@]}" --steps $K --log_json "$tmp/$name.ref.json" \
        --save "$tmp/$name.ref.bin" >"$tmp/$name.ref.out" 2>&1 || return 1
    step_records "$tmp/$name.json" >"$tmp/$name.a"
    step_records "$tmp/$name.ref.json" >"$tmp/$name.b"
    echo "     $name: stopped after step $k, resumed to $K"
    [ "$k" -ge 1 ] && [ "$(wc -l <"$tmp/$name.a")" -eq $K ] && cmp -s "$tmp/$name.a" "$tmp/$name.b" &&
        cmp -s "$tmp/$name.bin" "$tmp/$name.ref.bin"
}

# 1. one rank, SIGTERM to the process
"$train" "${common[@]}" --steps 1000000 --save "$tmp/one.bin" --log_json "$tmp/one.json" \
    >"$tmp/one.out" 2>"$tmp/one.err" &
job=$!
wait_first_step "$tmp/one.out"
kill -TERM $job
wait $job
rc=$?
[ $rc -eq 3 ] && grep -q "stopped by SIGTERM after step" "$tmp/one.out" && [ -f "$tmp/one.bin.state" ] &&
    [ ! -f "$tmp/one.bin" ] && grep -q "write a resume state to $tmp/one.bin.state and exit 3" "$tmp/one.out"
check "1 rank, SIGTERM: exit 3 (rc $rc), state at the path printed at start-up" $?
resume_matches one
check "1 rank: the state resumes bit-exactly (step records and model file)" $?

# 2. two ranks at ZeRO-3, SIGTERM to every rank (what a scheduler does)
timeout 120 "${mpi[@]}" -np 2 "$train" "${common[@]}" --zero 3 --steps 1000000 --save "$tmp/two.bin" \
    --log_json "$tmp/two.json" >"$tmp/two.out" 2>"$tmp/two.err" &
job=$!
wait_first_step "$tmp/two.out"
ranks=$(pgrep -f "$tmp/two.bin" | while read -r p; do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -q '^OMPI_COMM_WORLD_RANK=' && echo "$p"; done)
[ -n "$ranks" ] && kill -TERM $ranks
wait $job
rc=$?
[ "$(echo "$ranks" | wc -w)" -eq 2 ] && [ $rc -eq 3 ] && grep -q "stopped by SIGTERM after step" "$tmp/two.out" &&
    [ -f "$tmp/two.bin.state" ]
check "2 ranks, SIGTERM to every rank: mpirun exits 3 (rc $rc), the state is written" $?
resume_matches two "${mpi[@]}" -np 2
check "2 ranks: the state resumes bit-exactly (step records and model file)" $?

# 3. SIGUSR1 to mpirun: forwarded at once, the ranks' exit code comes through
timeout 120 "${mpi[@]}" -np 2 "$train" "${common[@]}" --steps 1000000 --save_state "$tmp/usr1.state" \
    >"$tmp/usr1.out" 2>"$tmp/usr1.err" &
job=$!
wait_first_step "$tmp/usr1.out"
kill -USR1 "$(launched $job)"
wait $job
rc=$?
[ $rc -eq 3 ] && grep -q "stopped by SIGUSR1 after step" "$tmp/usr1.out" && [ -f "$tmp/usr1.state" ]
check "2 ranks, SIGUSR1 to mpirun: mpirun exits 3 (rc $rc), state written" $?

# 4. --save into a directory that does not exist: every rank fails before step 1
timeout 60 "${mpi[@]}" -np 2 "$train" "${common[@]}" --steps 5 --save "$tmp/missing/model.bin" \
    >"$tmp/bad.out" 2>"$tmp/bad.err"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && ! grep -q '^step' "$tmp/bad.out" &&
    [ "$(grep -c "\-\-save $tmp/missing/model.bin cannot be written" "$tmp/bad.err")" -eq 1 ]
check "unwritable --save: non-zero exit (rc $rc) before step 1, one message naming the path" $?

[ $fails -eq 0 ] && echo "stop-signal tests passed" || { echo "$fails stop-signal test(s) failed"; exit 1; }
