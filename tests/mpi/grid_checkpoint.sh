#!/usr/bin/env bash
# llm.c model files and resume states of build/train across grids, as users
# run them (--steps 0: no step runs on the grid; the trainer inits, loads or
# resumes, and saves):
#  1. --save at pp 2 (tiny's 2 layers), pp 2 over 3 layers (2 + 1), pp 4
#     over 3 layers (the last stage holds only the head), dp 2 x pp 2 at
#     ZeRO 0 and 3, tp 2, tp 2 x pp 2 in bf16, and the interleaved schedule
#     (pp 2, 2 chunks a stage; and over dp 2 at ZeRO 3): each byte-equal
#     (cmp) to the file one process writes from the same seed; interleaved
#     resume states: 2 steps + 2 resumed byte-equal to 4 in one go, and
#     loaded by one process;
#  2. a trained model file --init_from at pp 2, then --save: byte-equal;
#  3. bad input at pp 2: a model file of another shape, a truncated one, a
#     resume state of another model: every rank exits 1 (no hang), one message.
# (Resume states across grids, the head's wte copy and 8-bit states:
# tests/mpi/test_grid_checkpoint.c.)
# Usage: tests/mpi/grid_checkpoint.sh BUILD_DIR
set -u
build=${1:-build}
train="$build/train"
tmp=$(mktemp -d /tmp/shardlab_gridckpt_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --oversubscribe --allow-run-as-root)
for v in ASAN_OPTIONS UBSAN_OPTIONS; do [ -n "${!v:-}" ] && mpi+=(-x "$v"); done
fails=0
check() { # name, condition result
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
"$build/prepare" --input data/kjv.txt --train "$tmp/train.bin" --val "$tmp/val.bin" >/dev/null || exit 1
common=(--config configs/tiny.conf --train_data "$tmp/train.bin" --val_every 0 --threads 1 --steps 0)

# 1. one process, then each grid
one() { # out, args
    local out=$1
    shift
    timeout 60 "$train" "${common[@]}" "$@" --save "$out" >"$out.log" 2>&1
}
grid() { # ranks, out, args
    local n=$1 out=$2
    shift 2
    timeout 120 "${mpi[@]}" -np "$n" "$train" "${common[@]}" "$@" --save "$out" >"$out.log" 2>&1
}
one "$tmp/l2.bin" && one "$tmp/l3.bin" --n_layer 3 && one "$tmp/l2bf16.bin" --param_dtype bf16
check "one process writes the reference files" $?
same() { # name, reference, ranks, out, args
    local name=$1 ref=$2
    shift 2
    grid "$@" && cmp "$ref" "$2"
    check "$name: byte-equal to one process" $?
}
same "pp 2" "$tmp/l2.bin" 2 "$tmp/pp2.bin" --pp 2
same "pp 2, 3 layers (2 + 1)" "$tmp/l3.bin" 2 "$tmp/pp2l3.bin" --pp 2 --n_layer 3
same "pp 4, 3 layers (head alone on the last stage)" "$tmp/l3.bin" 4 "$tmp/pp4l3.bin" --pp 4 --n_layer 3
same "dp 2 x pp 2, ZeRO 0" "$tmp/l2.bin" 4 "$tmp/dp2pp2z0.bin" --pp 2 --zero 0
same "dp 2 x pp 2, ZeRO 3" "$tmp/l2.bin" 4 "$tmp/dp2pp2z3.bin" --pp 2 --zero 3
same "tp 2" "$tmp/l2.bin" 2 "$tmp/tp2.bin" --tp 2
same "tp 2 x pp 2, bf16, ZeRO 3" "$tmp/l2bf16.bin" 4 "$tmp/tp2pp2bf16.bin" --tp 2 --pp 2 --param_dtype bf16 --zero 3
# interleaved: rank 0 holds layers 0 and 2, rank 1 layers 1 and 3 (and the head)
inter=(--n_layer 4 --grad_accum 2 --pp 2 --schedule interleaved --virtual_stages 2)
one "$tmp/l4.bin" --n_layer 4 --grad_accum 2
same "pp 2 interleaved, 2 chunks a stage (layers 0, 2 | 1, 3)" "$tmp/l4.bin" 2 "$tmp/inter.bin" "${inter[@]}"
same "dp 2 x pp 2 interleaved, ZeRO 3" "$tmp/l4.bin" 4 "$tmp/inter_z3.bin" "${inter[@]}" --zero 3
# resume states at pp 2 interleaved: 2 steps, saved, resumed for 2 more:
# byte-equal to 4 steps in one go; the state also loads on one process
igrid() { # out, args
    local out=$1
    shift
    timeout 120 "${mpi[@]}" -np 2 "$train" "${common[@]}" "${inter[@]}" "$@" >"$out.log" 2>&1
}
igrid "$tmp/i2" --steps 2 --save_state "$tmp/i2.state" &&
    igrid "$tmp/i4r" --steps 4 --resume "$tmp/i2.state" --save_state "$tmp/i4r.state" &&
    igrid "$tmp/i4" --steps 4 --save_state "$tmp/i4.state" && cmp "$tmp/i4.state" "$tmp/i4r.state" &&
    timeout 60 "$train" "${common[@]}" --n_layer 4 --grad_accum 2 --steps 3 --resume "$tmp/i2.state" \
        >"$tmp/i2one.log" 2>&1
check "resume state at pp 2 interleaved: 2 + 2 steps byte-equal to 4, and it loads on one process" $?

# 2. a trained model (3 steps on one process), loaded at pp 2 and saved again
timeout 60 "$train" "${common[@]}" --steps 3 --save "$tmp/trained.bin" >/dev/null 2>&1 &&
    ! cmp -s "$tmp/trained.bin" "$tmp/l2.bin" &&
    grid 2 "$tmp/reloaded.bin" --pp 2 --init_from "$tmp/trained.bin" && cmp "$tmp/trained.bin" "$tmp/reloaded.bin"
check "trained model --init_from at pp 2, --save: byte-equal" $?

# 3. bad input at pp 2: every rank exits 1, one message
bad() { # name, pattern, args
    local name=$1 pattern=$2
    shift 2
    timeout 60 "${mpi[@]}" -np 2 "$train" "${common[@]}" --pp 2 "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
    local rc=$?
    [ $rc -eq 1 ] && [ "$(grep -c -- "$pattern" "$tmp/bad.err")" -eq 1 ]
    check "pp 2, $name: exit 1 (rc $rc), one message" $?
}
bad "model file of 3 layers into n_layer 2" "n_layer: config 2, file 3" --init_from "$tmp/l3.bin" --n_layer 2
head -c 20000 "$tmp/l2.bin" >"$tmp/short.bin"
bad "truncated model file" "short.bin" --init_from "$tmp/short.bin"
timeout 60 "$train" "${common[@]}" --steps 1 --save_state "$tmp/l3.state" --n_layer 3 >/dev/null 2>&1
bad "resume state of another model" "was saved with a different model" --resume "$tmp/l3.state" --steps 1
[ $fails -eq 0 ] && echo "grid checkpoint tests passed" || exit 1
