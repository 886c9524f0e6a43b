#!/usr/bin/env bash
# Failure behaviour of build/train under mpirun, as users meet it:
#  1. a world that cannot form the grid: every rank exits non-zero, one message;
#  2. data no rank can open: every rank exits non-zero, one message naming the file;
#  3. kill -9 of one rank mid-run: OpenMPI's mpirun notices the dead rank,
#     kills the others and exits non-zero. Nobody hangs (each run has a
#     timeout; a timeout is a failure);
#  4. a model whose buffers cannot be allocated (--force 1 past the memory
#     check): every rank exits non-zero, one message naming the buffer and
#     its bytes (no crash, no OOM kill);
#  5. a model too big for this host (4.8e9 parameters): refused before
#     allocating, with the breakdown and the levers, on every rank;
#  6. log_json: a device, a FIFO, a missing folder refused up front; a
#     failed start-up leaves the old log; a resumed run refuses a log cut
#     mid-record; a full disk stops the run at the failed step with its state;
#  7. the banner's tokens per step past 2^31 (it printed -2147483648), and
#     a directory as --config or as train_data: one clear error each;
#  8. a run that goes NaN (SGD at lr 10, no clipping) on 2 ranks under
#     ZeRO-1: every rank stops at the same step, one message naming it, and
#     the resume state written before that step still loads;
#  9. pipeline layouts that cannot run: a bad pp_layers, gpipe past its slots, adamw8bit's tied copies under ZeRO
#     over dp; interleaved: m not a multiple of p, virtual_stages with another schedule, one chunk, a chunk
#     with no layer, pp_layers not of pp x v counts: every rank exits non-zero, one message naming the keys;
# 10. ranks started with different configurations (mpirun's "A : B"): every rank exits non-zero, the keys named;
# 11. a state resumed on another global batch: every rank refuses, naming it;
# 12. a link made mid-run at --save_state is checked when the state is written;
# 13. the ranks' data and --init_from files compared by contents (mpirun -wdir).
# Usage: tests/mpi/failures.sh BUILD_DIR (build or build-san)
set -u
build=${1:-build}
train="$build/train"
tmp=$(mktemp -d /tmp/shardlab_failures_XXXXXX)
trap 'umount "$tmp/fs6" 2>/dev/null; rm -rf "$tmp"' EXIT
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
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c 'cannot form a grid with cp 1 x tp 3' "$tmp/err1")" -eq 1 ]
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
for pid in $(pgrep -f "$tmp/train.bin"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then victim=$pid; fi
done
[ -n "$victim" ] && kill -9 "$victim"
wait $job
rc=$?
[ -n "$victim" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && ! pgrep -f "$tmp/train.bin" >/dev/null
check "kill -9 of rank 1: mpirun ends the job non-zero (rc $rc), no rank left running" $?

# 4. params of a 65536-wide layer in bf16 (103 GB) on each of 2 ranks. The
# sanitizer build must return NULL rather than abort on a huge request.
# --force 1 takes it past the memory check to the allocator.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"
timeout 60 "${mpi[@]}" -x ASAN_OPTIONS -np 2 "$train" "${common[@]}" --n_layer 1 --d_model 65536 --force 1 \
    >"$tmp/out4" 2>"$tmp/err4"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c "out of memory allocating 'params' (103118929920 bytes" "$tmp/err4")" -eq 1 ]
check "unallocatable params: non-zero exit (rc $rc), one message naming the buffer and its bytes" $?

# 5. 48 layers of width 2880 (4.8e9 parameters, 73 GiB of states and
# buffers per rank at ZeRO-0): refused in a second, nothing allocated (ZeRO-3 38.30 GiB:
# its two buckets hold the ring's receive slice, parallel/comm/comm_mpi_ring.c).
# The figures are the fp32 GEMM path's (the bf16 data path keeps bf16
# activations: 72.59 GiB), so the run pins it.
start=$SECONDS
timeout 60 "${mpi[@]}" -np 2 "$train" "${common[@]}" --n_layer 48 --d_model 2880 --n_head 16 --gemm_dtype fp32 \
    >"$tmp/out5" 2>"$tmp/err5"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $((SECONDS - start)) -lt 30 ] &&
    grep -q "not enough memory: this rank needs 72.98 GiB at start-up" "$tmp/err5" &&
    grep -q "params 8.90 GiB, master 17.81 GiB, grads 8.90 GiB, optimizer 35.62 GiB" "$tmp/err5" &&
    grep -q "shared by 2 ranks on this host" "$tmp/err5" &&
    grep -q -- "--zero 3 over dp 2: 38.30 GiB" "$tmp/err5" && grep -q -- "--force 1 allocates anyway" "$tmp/err5" &&
    ! grep -q '^step' "$tmp/out5"
check "4.8e9 parameters: refused before allocating (rc $rc), the breakdown and the levers" $?

# 6. log_json, an output like the others (issue 39), on 2 ranks: a device
# or a FIFO refused up front (a FIFO used to block open() for ever); a
# missing folder refused before the weights; a run that fails at start-up
# leaves the old log as it was (it was truncated to 0 bytes); a resumed run
# refuses a log whose last record was cut (it appended to the cut line); a
# full file system stops the run at the step whose record failed, with its
# state, the log cut back to whole records (all 400 steps used to run)
np2=(timeout 60 "${mpi[@]}" -np 2 "$train" "${common[@]}" --val_every 0 --peak_flops 1e9)
"${np2[@]}" --steps 2 --log_json /dev/full >"$tmp/out6" 2>"$tmp/err6"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c -- '--log_json /dev/full cannot be written: it exists and is a character device' "$tmp/err6")" -eq 1 ]
check "log_json /dev/full: refused up front (rc $rc), one message naming the log" $?
mkfifo "$tmp/log.fifo"
"${np2[@]}" --steps 2 --log_json "$tmp/log.fifo" >"$tmp/out6" 2>"$tmp/err6"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q -- "--log_json $tmp/log.fifo cannot be written: it exists and is a FIFO" "$tmp/err6" &&
    [ -p "$tmp/log.fifo" ]
check "log_json on a FIFO: refused, no hang (rc $rc), the FIFO kept" $?
timeout 60 "$train" "${common[@]}" --steps 2 --log_json "$tmp/no_such_dir/log.json" >"$tmp/out6" 2>"$tmp/err6"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q -- "--log_json $tmp/no_such_dir/log.json cannot be written: .*No such file" "$tmp/err6" &&
    ! grep -q "initialising weights" "$tmp/out6"
check "log_json in a missing folder: refused before the weights (rc $rc), naming the reason" $?
"${np2[@]}" --steps 2 --save "$tmp/m6.bin" --save_state "$tmp/s6.state" --log_json "$tmp/log6.json" >/dev/null 2>&1
cp "$tmp/log6.json" "$tmp/log6.keep"
cp "$tmp/m6.bin" "$tmp/nan6.bin" # a NaN weight: refused when the weights are loaded, after the checks
printf '\xff\xff\xff\xff' | dd of="$tmp/nan6.bin" bs=1 seek=4096 conv=notrunc 2>/dev/null
"${np2[@]}" --steps 2 --init_from "$tmp/nan6.bin" --log_json "$tmp/log6.json" >"$tmp/out6" 2>"$tmp/err6"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "nan" "$tmp/err6" && cmp -s "$tmp/log6.json" "$tmp/log6.keep"
check "a run that fails at start-up (a NaN weight): rc $rc, the old log as it was" $?
printf '{"type":"step","st' >>"$tmp/log6.json"
cp "$tmp/log6.json" "$tmp/log6.keep"
"${np2[@]}" --steps 4 --resume "$tmp/s6.state" --log_json "$tmp/log6.json" >"$tmp/out6" 2>"$tmp/err6"
rc=$?
whole=$(($(stat -c %s "$tmp/log6.keep") - 18))
[ $rc -ne 0 ] && [ $rc -ne 124 ] &&
    grep -q -- "--log_json $tmp/log6.json does not end in a newline: its last record was cut after byte $whole of" "$tmp/err6" &&
    cmp -s "$tmp/log6.json" "$tmp/log6.keep"
check "a resumed run on a log cut mid-record: refused (rc $rc), the log as it was" $?
mkdir "$tmp/fs6"
if mount -t tmpfs -o size=16k tmpfs "$tmp/fs6" 2>/dev/null; then
    "${np2[@]}" --steps 400 --log_json "$tmp/fs6/log.json" --save_state "$tmp/full6.state" >"$tmp/out6" 2>"$tmp/err6"
    rc=$?
    k=$(sed -nE 's/^stopped by a failed write to log_json after step ([0-9]+) of 400.*/\1/p' "$tmp/out6")
    last=$(tail -n 1 "$tmp/fs6/log.json" | sed -nE 's/.*"type":"step","step":([0-9]+),.*/\1/p')
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ -n "$k" ] && [ "$k" -lt 400 ] &&
        [ "$(grep -c "writing log_json $tmp/fs6/log.json failed at step $k's record (it keeps the records before it): No space left on device" "$tmp/err6")" -eq 1 ] &&
        [ "$last" = $((k - 1)) ] && [ "$(tail -c 1 "$tmp/fs6/log.json" | od -An -c | tr -d ' ')" = '\n' ] &&
        "${np2[@]}" --steps $((k + 1)) --resume "$tmp/full6.state" >/dev/null 2>&1
    check "log_json on a full file system, 2 ranks: stopped at step ${k:-?} of 400 (rc $rc), the log whole to step ${last:-?}, the state resumes" $?
    umount "$tmp/fs6"
else
    echo "skip log_json on a full file system (cannot mount a tmpfs here: not root, or no CAP_SYS_ADMIN)"
fi

# 7. 4 x 2^20 x 1024 tokens per step (steps 0: the banner only); directories
timeout 60 "$train" "${common[@]}" --steps 0 --grad_accum 1048576 --seq_len 1024 --val_every 0 --peak_flops 1e9 \
    >"$tmp/out7" 2>"$tmp/err7"
rc=$?
[ $rc -eq 0 ] && grep -q "= 4194304 sequences = 4294967296 tokens per step" "$tmp/out7"
check "banner: 4294967296 tokens per step, not an int overflow" $?
timeout 60 "$train" --config "$tmp" >"$tmp/out7" 2>"$tmp/err7"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "config $tmp is a directory" "$tmp/err7"
check "a directory as --config: non-zero exit (rc $rc), named" $?
timeout 60 "$train" "${common[@]}" --train_data "$tmp" >"$tmp/out7" 2>"$tmp/err7"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "$tmp is a directory, not a token shard" "$tmp/err7"
check "a directory as train_data: non-zero exit (rc $rc), named" $?

# 8. NaN on 2 ranks, ZeRO-1 (the optimizer states sharded, so the ranks
# must agree to skip the update and the parameter all-gather together)
nan=(--optimizer sgd --lr 10 --grad_clip 0 --warmup_steps 10 --steps 20 --val_every 0 --zero 1
     --save_state "$tmp/nan.state" --save_state_every 1)
timeout 60 "${mpi[@]}" -np 2 "$train" "${common[@]}" "${nan[@]}" >"$tmp/out8" 2>"$tmp/err8"
rc=$?
step=$(grep -o '^error (rank 0,1): step [0-9]*: [^(]*(non-finite): its update was not applied' "$tmp/err8" |
       grep -o 'step [0-9]*' | grep -o '[0-9]*')
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ -n "$step" ] && [ "$(grep -c 'non-finite' "$tmp/err8")" -eq 1 ] &&
    timeout 60 "${mpi[@]}" -np 2 "$train" "${common[@]}" "${nan[@]}" --save_state "" --resume "$tmp/nan.state" \
        --steps $((step - 1)) >"$tmp/out8b" 2>"$tmp/err8b" &&
    grep -q "from step $((step - 1))" "$tmp/out8b"
check "NaN at step ${step:-?} on 2 ranks: both stop (rc $rc), one message; the state of step $((${step:-1} - 1)) loads" $?

# 9. pipeline layouts the trainer refuses (tiny has 2 layers)
pp_case() { # name, expected text, ranks, args...
    local name=$1 text=$2 n=$3
    shift 3
    timeout 60 "${mpi[@]}" -np "$n" "$train" "${common[@]}" --steps 1 "$@" >"$tmp/out9" 2>"$tmp/err9"
    local rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c "$text" "$tmp/err9")" -eq 1 ]
    check "$name: non-zero exit (rc $rc), one message" $?
}
pp_case "pp_layers 2,1 for 2 layers" "must sum to n_layer = 2" 2 --pp 2 --pp_layers 2,1
pp_case "gpipe with grad_accum 65" "grad_accum = 65 is more than the 64" 2 --pp 2 --schedule gpipe --grad_accum 65
pp_case "adamw8bit, pp 2, ZeRO-1 over dp 2" "quantized in different blocks" 4 --pp 2 --zero 1 --optimizer adamw8bit
inter=(--pp 2 --n_layer 4 --schedule interleaved --virtual_stages 2)
pp_case "interleaved, m 3 not a multiple of p 2" "(m = 3) must be a multiple of pp (p = 2)" 2 "${inter[@]}" --grad_accum 3
pp_case "virtual_stages 2 with 1f1b" "virtual_stages = 2 needs --schedule interleaved" 2 --pp 2 --n_layer 4 \
    --schedule 1f1b --virtual_stages 2
pp_case "interleaved with virtual_stages 1" "needs pp >= 2 and virtual_stages >= 2" 2 --pp 2 --schedule interleaved \
    --grad_accum 2
pp_case "interleaved, 3 layers over 4 chunks" "model chunk 3 of pp x virtual_stages = 4 has no layer" 2 "${inter[@]}" \
    --n_layer 3 --grad_accum 2
pp_case "interleaved, pp_layers of pp counts" "must sum to n_layer = 4" 2 "${inter[@]}" --grad_accum 2 --pp_layers 2,2

# 10. two configurations in one world (mpirun's "A : B" form): every rank names the keys that differ
timeout 60 "${mpi[@]}" -np 1 "$train" "${common[@]}" --steps 3 : -np 1 "$train" "${common[@]}" --steps 4 \
    >"$tmp/out10" 2>"$tmp/err10"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] &&
    [ "$(grep -c 'error (rank 0,1): the ranks were started with different configurations: steps differs' "$tmp/err10")" -eq 1 ] &&
    ! grep -q '^step' "$tmp/out10"
check "A : B with steps 3 and 4: every rank exits non-zero (rc $rc), naming steps" $?
timeout 60 "${mpi[@]}" -np 1 "$train" "${common[@]}" --seed 1 --lr 0.01 : -np 1 "$train" "${common[@]}" --seed 2 \
    >"$tmp/out10" 2>"$tmp/err10"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q 'configurations: lr, seed differ' "$tmp/err10"
check "A : B with lr and seed: both named (rc $rc)" $?
timeout 60 "${mpi[@]}" -np 1 "$train" "${common[@]}" --steps x : -np 1 "$train" "${common[@]}" \
    >"$tmp/out10" 2>"$tmp/err10"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "bad value 'x' for steps" "$tmp/err10"
check "A : B with a bad value on one rank: every rank exits non-zero (rc $rc), no hang" $?

# 11. a state saved on 1 rank resumed on 3 (the global batch triples): every rank refuses, naming the key;
timeout 60 "$train" "${common[@]}" --steps 1 --val_every 0 --save_state "$tmp/one.state" >/dev/null 2>&1
timeout 60 "${mpi[@]}" -np 3 "$train" "${common[@]}" --steps 2 --resume "$tmp/one.state" >"$tmp/out11" 2>"$tmp/err11"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c 'error (rank 0,1,2): .*one.state was saved with a different dtype, optimizer or global batch; the global batch (micro_batch x grad_accum x data-parallel ranks): saved 4, this run 4 x 1 x 3 = 12;' "$tmp/err11")" -eq 1 ]
check "a 1-rank state resumed on 3 ranks: every rank refuses (rc $rc), naming the global batch" $?

# 12. outputs checked again as they are written (issue 39), on 2 ranks: a
# link made mid-run at --save_state, pointing at the run's own training
# shard, is refused when the stop state is to be written (it used to
# replace the shard); every rank exits 1, the shard kept
cp "$tmp/train.bin" "$tmp/shard12.bin"
cp "$tmp/shard12.bin" "$tmp/shard12.keep"
timeout 120 "${mpi[@]}" -np 2 "$train" "${common[@]}" --train_data "$tmp/shard12.bin" --val_every 0 --peak_flops 1e9 \
    --steps 1000000 --save_state "$tmp/s12.state" >"$tmp/out12" 2>"$tmp/err12" &
job=$!
for _ in $(seq 1 300); do grep -q '^step' "$tmp/out12" 2>/dev/null && break; sleep 0.1; done
ln -s shard12.bin "$tmp/s12.state"
kill -USR1 "$(pgrep -P $job | head -n 1)"
wait $job
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] &&
    grep -q -- "--save_state $tmp/s12.state is --train_data $tmp/shard12.bin (token shard): writing the resume state would destroy it; nothing was written (found as --save_state was to be written)" "$tmp/err12" &&
    cmp -s "$tmp/shard12.bin" "$tmp/shard12.keep" && [ -L "$tmp/s12.state" ]
check "a link to the training shard made mid-run at --save_state: refused at the write (rc $rc), the shard kept" $?

# 13. the ranks compare the contents they read, not the paths' spelling
# (issue 39): each rank in its own folder (mpirun -wdir), x.bin of the same
# size but other tokens on rank 1: refused naming rank 1 and the file (it
# trained on both, rc 0); --init_from files of other weights, and of
# another max_seq_len (it crashed in step 1: MPI_ERR_TRUNCATE)
mkdir -p "$tmp/r0" "$tmp/r1"
cp "$tmp/val.bin" "$tmp/r0/x.bin"
cp "$tmp/val.bin" "$tmp/r1/x.bin"
printf '\x07' | dd of="$tmp/r1/x.bin" bs=1 seek=2000 conv=notrunc 2>/dev/null
abs=("$(realpath "$train")" --config "$PWD/configs/tiny.conf" --threads 1 --val_every 0 --peak_flops 1e9 --steps 2)
two_dirs() { # arguments for both ranks, each run in its own folder
    timeout 60 "${mpi[@]}" -np 1 -wdir "$tmp/r0" "${abs[@]}" "$@" : -np 1 -wdir "$tmp/r1" "${abs[@]}" "$@"
}
two_dirs --train_data x.bin --val_data "" >"$tmp/out13" 2>"$tmp/err13"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] &&
    [ "$(grep -c "rank 1's train_data x.bin has other contents than rank 0's (data digest" "$tmp/err13")" -eq 1 ]
check "train_data of other contents on rank 1 (same path, same size): refused (rc $rc), naming rank 1 and the file" $?
cp "$tmp/val.bin" "$tmp/r1/x.bin"
timeout 60 "$train" "${common[@]}" --steps 1 --val_every 0 --peak_flops 1e9 --save "$tmp/r0/m.bin" >/dev/null 2>&1
timeout 60 "$train" "${common[@]}" --steps 1 --val_every 0 --peak_flops 1e9 --seed 7 --save "$tmp/r1/m.bin" >/dev/null 2>&1
two_dirs --train_data x.bin --val_data "" --init_from m.bin >"$tmp/out13" 2>"$tmp/err13"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] &&
    [ "$(grep -c "rank 1's --init_from m.bin has other contents than rank 0's (CRC32C" "$tmp/err13")" -eq 1 ]
check "--init_from of other weights on rank 1: refused (rc $rc), naming rank 1 and the file" $?
timeout 60 "$train" "${common[@]}" --steps 1 --val_every 0 --peak_flops 1e9 --max_seq_len 128 --save "$tmp/r1/m.bin" \
    >/dev/null 2>&1
two_dirs --train_data x.bin --val_data "" --init_from m.bin >"$tmp/out13" 2>"$tmp/err13"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] &&
    [ "$(grep -c "the ranks' --init_from files are of different models: max_seq_len differs" "$tmp/err13")" -eq 1 ]
check "--init_from of another max_seq_len on rank 1: refused (rc $rc), naming max_seq_len" $?
cp "$tmp/r0/m.bin" "$tmp/r1/m.bin"
two_dirs --train_data x.bin --val_data "" --init_from m.bin >"$tmp/out13" 2>"$tmp/err13"
check "the same contents in each rank's folder: trains (rc $?)" $?
timeout 60 "${mpi[@]}" -np 1 -wdir "$tmp/r0" "${abs[@]}" --train_data x.bin --val_data "" : \
    -np 1 -wdir "$tmp/r0" "${abs[@]}" --train_data ./x.bin --val_data "" >"$tmp/out13" 2>"$tmp/err13"
check "one file spelled x.bin on rank 0 and ./x.bin on rank 1: trains (rc $?; it was refused as different)" $?

[ $fails -eq 0 ] && echo "failure tests passed" || { echo "$fails failure test(s) failed"; exit 1; }
