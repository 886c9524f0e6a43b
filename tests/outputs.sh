#!/usr/bin/env bash
# Never overwrite what the user has: build/prepare and build/train refuse,
# before anything is opened, outputs that are not regular files (a device
# node, a FIFO: rename would replace them), outputs that name another output
# or an input of another kind, and inputs that are not regular files (open
# of a FIFO blocks for ever). Each case: non-zero exit, a message naming the
# key(s), the file on disk as it was. Every run has a timeout (a hang fails).
# Usage: tests/outputs.sh BUILD_DIR
set -u
build=${1:-build}
tmp=$(mktemp -d /tmp/shardlab_outputs_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { # name, condition result
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
refused() { # expected text, command...: non-zero (not a timeout), the text in stderr
    local text=$1
    shift
    timeout 30 "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF -- "$text" "$tmp/err" || { cat "$tmp/err"; return 1; }
}

head -c 200000 data/kjv.txt >"$tmp/corpus.txt"
cp "$tmp/corpus.txt" "$tmp/corpus.keep"
ln -s /dev/null "$tmp/null" # a device node reached by a path of ours (never /dev/null itself)
mkfifo "$tmp/fifo"

# ---- build/prepare ----
prep=("$build/prepare" --input "$tmp/corpus.txt")
refused "--train $tmp/null cannot be written: it exists and is a character device" \
    "${prep[@]}" --train "$tmp/null" --val "$tmp/v.bin" && [ -L "$tmp/null" ] && [ ! -e "$tmp/v.bin" ]
check "prepare --train on a symlink to /dev/null: refused, the link kept, nothing written" $?
refused "--val $tmp/fifo cannot be written: it exists and is a FIFO" \
    "${prep[@]}" --train "$tmp/t.bin" --val "$tmp/fifo" && [ -p "$tmp/fifo" ] && [ ! -e "$tmp/t.bin" ]
check "prepare --val on a FIFO: refused, the FIFO kept, nothing written" $?
refused "--train $tmp/corpus.txt is --input $tmp/corpus.txt" \
    "${prep[@]}" --train "$tmp/corpus.txt" --val "$tmp/v.bin" && cmp -s "$tmp/corpus.txt" "$tmp/corpus.keep"
check "prepare --train over --input: refused, the corpus kept" $?
refused "--train $tmp/x.bin and --val $tmp/./x.bin are one file" \
    "${prep[@]}" --train "$tmp/x.bin" --val "$tmp/./x.bin" && [ ! -e "$tmp/x.bin" ]
check "prepare --train and --val one file (not yet there): refused" $?
refused "--input $tmp/fifo is a FIFO, not a regular file" \
    "$build/prepare" --input "$tmp/fifo" --train "$tmp/t.bin" --val "$tmp/v.bin"
check "prepare --input a FIFO: refused, no hang" $?

# ---- build/train ----
train=("$build/train" --config configs/tiny.conf --train_data data/kjv_train.bin --val_data data/kjv_val.bin
       --threads 1 --peak_flops 1e9 --val_every 0 --steps 1)
timeout 60 "${train[@]}" --save "$tmp/model.bin" --save_state "$tmp/state.bin" >/dev/null 2>&1
check "train: a model file and a state to feed back" $?
cp "$tmp/model.bin" "$tmp/model.keep"
cp "$tmp/state.bin" "$tmp/state.keep"
kept() { cmp -s "$tmp/model.bin" "$tmp/model.keep" && cmp -s "$tmp/state.bin" "$tmp/state.keep"; }
refused "--save $tmp/out.bin and --save_state $tmp/out.bin are one file"     "${train[@]}" --save "$tmp/out.bin" --save_state "$tmp/out.bin" && [ ! -e "$tmp/out.bin" ]
check "train --save and --save_state one file: refused" $?
cp data/kjv_val.bin "$tmp/shard.bin"
refused "--save_state $tmp/shard.bin is --train_data $tmp/shard.bin (token shard)"     "${train[@]}" --train_data "$tmp/shard.bin" --save_state "$tmp/shard.bin" &&
    cmp -s "$tmp/shard.bin" data/kjv_val.bin
check "train --save_state over the training shard: refused, the shard kept" $?
refused "--save_state $tmp/shard.bin is --train_data $tmp/sh*.bin"     "${train[@]}" --train_data "$tmp/sh*.bin" --save_state "$tmp/shard.bin"
check "train --save_state over a shard of the train_data glob: refused" $?
refused "--save $tmp/state.bin is --resume $tmp/state.bin (resume state)"     "${train[@]}" --steps 2 --resume "$tmp/state.bin" --save "$tmp/state.bin" && kept
check "train --save over --resume: refused, the state kept" $?
refused "--save_state $tmp/model.bin is --init_from $tmp/model.bin (model file)"     "${train[@]}" --init_from "$tmp/model.bin" --save_state "$tmp/model.bin" && kept
check "train --save_state over --init_from: refused, the model kept" $?
refused "--save_state $tmp/state.bin and --log_json $tmp/state.bin are one file"     "${train[@]}" --log_json "$tmp/state.bin" --save_state "$tmp/state.bin" && kept
check "train --log_json over --save_state: refused, the state kept" $?
refused "--save $tmp/model.bin and --trace $tmp/./model.bin are one file"     "${train[@]}" --trace "$tmp/./model.bin" --save "$tmp/model.bin" && kept
check "train --trace over --save: refused, the model kept" $?
refused "--log_json $tmp/model.bin is --init_from $tmp/model.bin (model file)"     "${train[@]}" --init_from "$tmp/model.bin" --log_json "$tmp/model.bin" && kept
check "train --log_json over --init_from: refused, the model kept" $?
timeout 60 "${train[@]}" --steps 2 --resume "$tmp/state.bin" --save_state "$tmp/state.bin" >/dev/null 2>&1 &&
    timeout 60 "${train[@]}" --steps 2 --init_from "$tmp/model.bin" --save "$tmp/model.bin" >/dev/null 2>&1
check "train continuing in place (--save_state over --resume, --save over --init_from): accepted" $?
refused "--save $tmp/null cannot be written: it exists and is a character device"     "${train[@]}" --save "$tmp/null" && [ -L "$tmp/null" ]
check "train --save on a symlink to /dev/null: refused, the link kept" $?
refused "--trace $tmp/fifo cannot be written: it exists and is a FIFO"     "${train[@]}" --trace "$tmp/fifo" && [ -p "$tmp/fifo" ]
check "train --trace on a FIFO: refused, the FIFO kept" $?
for key in config init_from resume; do
    refused "$tmp/fifo is a FIFO, not a regular file" "${train[@]}" --"$key" "$tmp/fifo"
    check "train --$key a FIFO: refused, no hang" $?
done

# symlinked save targets are written through: the link stays a link, its
# target (reached through a relative chain of links) gets the file
mkdir "$tmp/sub"
echo "the user's old file" >"$tmp/target.bin"
ln -s ../target.bin "$tmp/sub/hop" && ln -s sub/hop "$tmp/link.bin"
timeout 60 "${train[@]}" --save "$tmp/link.bin" >/dev/null 2>&1 && [ -L "$tmp/link.bin" ] && [ -L "$tmp/sub/hop" ] &&
    [ -f "$tmp/target.bin" ] && [ ! -L "$tmp/target.bin" ] && [ "$(stat -c %s "$tmp/target.bin")" = 70400 ] &&
    [ -z "$(ls "$tmp" "$tmp/sub" | grep shardlab-tmp)" ]
check "train --save on a chain of symlinks: the target written, the links kept" $?
timeout 60 "${train[@]}" --save_state "$tmp/link.bin" >/dev/null 2>&1 && [ -L "$tmp/link.bin" ] &&
    timeout 60 "${train[@]}" --steps 2 --resume "$tmp/link.bin" >/dev/null 2>&1
check "train --save_state on a symlink: written through, and it resumes" $?

# stdout that cannot be written: an error naming it, exit 1 (it exited 0)
timeout 60 "${train[@]}" >/dev/full 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -qF "error: writing the run's output to stdout failed: No space left on device" "$tmp/err"
check "train > /dev/full: exit 1, the reason named" $?

# more validation batches than the split holds: a warning with the passes;
# the end line names validation's time beside the steps'
timeout 120 "${train[@]}" --val_every 1 --val_batches 800 >"$tmp/out" 2>"$tmp/err" &&
    grep -qF "warning: val_batches 800 x 1 ranks x micro_batch 4 = 3200 samples per validation, but val_data has 2972: each validation reads it 1.1 times over (lower val_batches to at most 743)" "$tmp/err" &&
    grep -qE "^trained 1 steps in [0-9.]+ s, and validated in [0-9.]+ s$" "$tmp/out"
check "train --val_batches past the validation split: warned with the passes; validation's time in the end line" $?

[ $fails -eq 0 ] && echo "output tests passed" || { echo "$fails output test(s) failed"; exit 1; }
