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
trap 'umount "$tmp/fs" "$tmp/rule/B" 2>/dev/null; rm -rf "$tmp"' EXIT
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
# the train shard is renamed into place only once the val shard is complete too
cp data/kjv_val.bin "$tmp/old_t.bin"
refused "cannot create $tmp/missing/v.bin.shardlab-tmp." \
    "${prep[@]}" --train "$tmp/old_t.bin" --val "$tmp/missing/v.bin" && cmp -s "$tmp/old_t.bin" data/kjv_val.bin &&
    [ -z "$(ls "$tmp" | grep shardlab-tmp)" ]
check "prepare --val in a missing folder: refused, the existing train shard untouched (it was replaced)" $?
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

# one rule for paths (issue 39): every input and output resolved as the
# write resolves it (links followed, the folder by device and inode, the
# last name), the --config files and the files a glob would match included
cp configs/tiny.conf "$tmp/c.conf"
for key in save log_json trace; do
    refused "--$key $tmp/c.conf is --config $tmp/c.conf (config)" \
        "${train[@]}" --config "$tmp/c.conf" --$key "$tmp/c.conf" && cmp -s "$tmp/c.conf" configs/tiny.conf
    check "train --$key over the --config file: refused, the config kept" $?
done
mkdir "$tmp/rule"
ln -s target.bin "$tmp/rule/L"
refused "--save $tmp/rule/L and --save_state $tmp/rule/target.bin are one file" \
    "${train[@]}" --save "$tmp/rule/L" --save_state "$tmp/rule/target.bin" && [ ! -e "$tmp/rule/target.bin" ]
check "train --save on a dangling link to --save_state: refused, nothing written" $?
ln -s v.bin "$tmp/rule/L2"
refused "--train $tmp/rule/L2 and --val $tmp/rule/v.bin are one file" \
    "${prep[@]}" --train "$tmp/rule/L2" --val "$tmp/rule/v.bin" && [ ! -e "$tmp/rule/v.bin" ]
check "prepare --train on a dangling link to --val: refused, nothing written" $?
mkdir "$tmp/rule/A" "$tmp/rule/B" "$tmp/rule/g"
if mount --bind "$tmp/rule/A" "$tmp/rule/B" 2>/dev/null; then
    refused "--save $tmp/rule/A/x.bin and --save_state $tmp/rule/B/x.bin are one file" \
        "${train[@]}" --save "$tmp/rule/A/x.bin" --save_state "$tmp/rule/B/x.bin" && [ -z "$(ls "$tmp/rule/A")" ]
    check "train --save and --save_state one file through a bind mount: refused, nothing written" $?
    umount "$tmp/rule/B"
else
    echo "skip train outputs through a bind mount (cannot mount here: not root, or no CAP_SYS_ADMIN)"
fi
cp data/kjv_val.bin "$tmp/rule/g/a.bin"
refused "--save_state $tmp/rule/g/run.state is --train_data $tmp/rule/g/* (token shard a match of its pattern once written)" \
    "${train[@]}" --train_data "$tmp/rule/g/*" --save_state "$tmp/rule/g/run.state" && [ "$(ls "$tmp/rule/g")" = a.bin ]
check "train --save_state inside the --train_data glob: refused, nothing written" $?

# stdout is an output like any other: a pipe whose reader is gone is a stop
# request (SIGPIPE ignored), the resume state written, the stop said on
# stderr, exit 3 (it was killed by SIGPIPE: 141, no state)
stopped_step() { # stderr file -> K of "after step K of"
    sed -nE 's/.*after step ([0-9]+) of .*/\1/p' "$1" | head -n 1
}
resumes() { # state, step it holds: it loads and trains one more step
    timeout 60 "${train[@]}" --steps $(($2 + 1)) --resume "$1" >/dev/null 2>&1
}
rm -f "$tmp/pipe.state"
timeout 120 "${train[@]}" --steps 1000000 --save_state "$tmp/pipe.state" 2>"$tmp/err" | head -c 100 >/dev/null
rc=${PIPESTATUS[0]}
k=$(stopped_step "$tmp/err")
[ $rc -eq 3 ] && grep -qF "stdout is a broken pipe (EPIPE: its reader is gone)" "$tmp/err" &&
    grep -qF "stopped by a broken stdout (EPIPE: its reader is gone) after step" "$tmp/err" &&
    [ -n "$k" ] && resumes "$tmp/pipe.state" "$k"
check "train | head -c 100: exit 3 (rc $rc), said on stderr, the state at step ${k:-?} resumes" $?
# a session hung up (a closed terminal): train and the tee it writes to both
# get SIGHUP; tee dies, train stops with its state whichever comes first
rm -f "$tmp/hup.state" "$tmp/hup.rc"
# (in a subshell whose stderr is dropped: bash reports the shell's death by SIGHUP there)
(setsid sh -c '{ trap : HUP; "$@" 2>"$0.err"; echo $? >"$0.rc"; } | tee "$0.log" >/dev/null' "$tmp/hup" \
    "${train[@]}" --steps 1000000 --save_state "$tmp/hup.state" & echo $! >"$tmp/hup.pid"; wait) 2>/dev/null &
for _ in $(seq 1 100); do [ -s "$tmp/hup.pid" ] && break; sleep 0.1; done
session=$(cat "$tmp/hup.pid")
for _ in $(seq 1 600); do grep -q '^step' "$tmp/hup.log" 2>/dev/null && break; sleep 0.1; done
kill -HUP -- -$session
wait # the shell dies of the SIGHUP; train's group writes hup.rc when train has ended
for _ in $(seq 1 600); do [ -s "$tmp/hup.rc" ] && break; sleep 0.1; done
rc=$(cat "$tmp/hup.rc" 2>/dev/null)
k=$(cat "$tmp/hup.err" "$tmp/hup.log" | stopped_step /dev/stdin)
[ "$rc" = 3 ] && [ -n "$k" ] && resumes "$tmp/hup.state" "$k"
check "setsid sh -c 'train | tee log', SIGHUP to the session: exit 3 (rc ${rc:-none}), the state resumes" $?

# more validation batches than the split holds: a warning with the passes;
# the end line names validation's time beside the steps'
timeout 120 "${train[@]}" --val_every 1 --val_batches 800 >"$tmp/out" 2>"$tmp/err" &&
    grep -qF "warning: val_batches 800 x 1 ranks x micro_batch 4 = 3200 samples per validation, but val_data has 2972: each validation reads it 1.1 times over (lower val_batches to at most 743)" "$tmp/err" &&
    grep -qE "^trained 1 steps in [0-9.]+ s, and validated in [0-9.]+ s$" "$tmp/out"
check "train --val_batches past the validation split: warned with the passes; validation's time in the end line" $?

# ---- the widened attack: docs/RELIABILITY.md's catalogue, one line each ----
attack() { # name, expected text in stderr, command...: refused (non-zero, no timeout), the text shown
    local name=$1
    shift
    refused "$@"
    check "attack: $name" $?
}
one=("${train[@]}" --steps 1)
: >"$tmp/empty.bin"
head -c 1024 data/kjv_train.bin >"$tmp/header_only.bin"
python3 - "$tmp" <<'PY'
import struct, sys
d = sys.argv[1]
small = bytearray(open("data/kjv_train.bin", "rb").read(1024 + 2 * 38))
small[8:12] = struct.pack("<i", 38)                       # 38 tokens: one sample of 33, a batch needs 4
open(d + "/small.bin", "wb").write(small)
model = bytearray(open(d + "/model.bin", "rb").read())
model[8:12] = struct.pack("<i", 1 << 30)                  # llm.c header: magic, version, max_seq_len
open(d + "/huge_positions.bin", "wb").write(model)
open(d + "/state_half.bin", "wb").write(open(d + "/state.bin", "rb").read()[:5000])
open(d + "/nul.conf", "wb").write(b"steps = 2\0\n")
PY
: >"$tmp/state_empty.bin"
attack "an empty shard" "empty.bin is truncated: wanted 1024 more bytes, got 0" "${one[@]}" --train_data "$tmp/empty.bin"
attack "a shard of a header alone" "header_only.bin: file is 1024 bytes but the header declares" \
    "${one[@]}" --train_data "$tmp/header_only.bin"
attack "a shard smaller than one batch" "1 samples of 32+1 tokens in 1 shard(s), but one global micro-batch needs 4" \
    "${one[@]}" --train_data "$tmp/small.bin"
attack "a glob matching nothing" "no file matches this path or pattern" "${one[@]}" --train_data "$tmp/none_*.bin"
attack "--config /dev/null" "config /dev/null is a character device, not a regular file" "${one[@]}" --config /dev/null
attack "a config with a NUL byte" "nul.conf:1: NUL byte in the line (a config is text)" "${one[@]}" --config "$tmp/nul.conf"
attack "a resume state as --config" "state.bin:1: NUL byte in the line" "${one[@]}" --config "$tmp/state.bin"
attack "--steps 1e3" "bad value '1e3' for steps: expected an integer in [0, 2147483647]" "${one[@]}" --steps 1e3
attack "--lr nan" "bad value 'nan' for lr: expected a number in (0, 10]" "${one[@]}" --lr nan
attack "a truncated resume state" "state_half.bin is truncated: section 'params' needs" \
    "${one[@]}" --steps 3 --resume "$tmp/state_half.bin"
# the run_keys section is the state's last: its 16 bytes end the file
cp "$tmp/state.bin" "$tmp/state_keys.bin"
printf '\x01' | dd of="$tmp/state_keys.bin" bs=1 seek=$(($(stat -c %s "$tmp/state.bin") - 13)) conv=notrunc 2>/dev/null
attack "a flipped bit in the state's run_keys section (it was accepted)" "state_keys.bin: section 'run_keys' is corrupt" \
    "${one[@]}" --steps 3 --resume "$tmp/state_keys.bin"
attack "an empty resume state" "state_empty.bin is truncated: 0 bytes" "${one[@]}" --steps 3 --resume "$tmp/state_empty.bin"
attack "a model file as --resume" "model.bin: not a resume state (magic" "${one[@]}" --steps 3 --resume "$tmp/model.bin"
attack "a resume state as --init_from" "state.bin: not an llm.c model file" "${one[@]}" --init_from "$tmp/state.bin"
attack "a token shard as --init_from" "not an llm.c model file (magic 20240520, expected 20240326 for GPT-2 or 20240803 for LLaMA 3)" \
    "${one[@]}" --init_from data/kjv_val.bin
attack "a model header claiming 2^30 positions" "huge_positions.bin is truncated: 70400 bytes, expected" \
    "${one[@]}" --init_from "$tmp/huge_positions.bin"
attack "a state past --steps" "state.bin is at step 2, beyond steps = 1" "${one[@]}" --resume "$tmp/state.bin" # continued in place above
attack "a state at --steps with a new --save_state (it exited 0 writing nothing)" \
    "state.bin is at step 2 = steps: no step runs, so no resume state would be written to save_state $tmp/new.state" \
    "${one[@]}" --steps 2 --resume "$tmp/state.bin" --save_state "$tmp/new.state"
[ ! -e "$tmp/new.state" ]
check "attack: ... and nothing written" $?
attack "a state of another model" "was saved with a different model: n_layer 2" \
    "${one[@]}" --steps 3 --n_layer 3 --resume "$tmp/state.bin"
attack "a state of another optimizer" "; optimizer: saved adamw, this run sgd;" \
    "${one[@]}" --steps 3 --optimizer sgd --resume "$tmp/state.bin"
attack "--save into a missing folder" "cannot create $tmp/missing/m.bin.shardlab-tmp." "${one[@]}" --save "$tmp/missing/m.bin"
attack "--save naming a folder" "--save $tmp cannot be written: it exists and is a directory" "${one[@]}" --save "$tmp"
# the data a state continues on, by contents: a copy elsewhere resumes, a flipped bit does not
cp data/kjv_train.bin "$tmp/copy.bin"
timeout 60 "${one[@]}" --steps 2 --train_data "$tmp/copy.bin" --resume "$tmp/state.bin" >/dev/null 2>&1
check "attack: resume on an identical copy of the shard at another path: accepted" $?
python3 -c "import sys; f = open(sys.argv[1], 'r+b'); f.seek(4000); b = f.read(1); f.seek(4000); f.write(bytes([b[0] ^ 1]))" \
    "$tmp/copy.bin"
attack "resume on the shard with one bit flipped (same path and size)" "other contents: data digest 0x" \
    "${one[@]}" --steps 2 --train_data "$tmp/copy.bin" --resume "$tmp/state.bin"
# a small file system (tmpfs, where this may mount one): full, then read-only
fs="$tmp/fs"
mkdir "$fs"
if mount -t tmpfs -o size=300k tmpfs "$fs" 2>/dev/null; then
    timeout 60 "${train[@]}" --steps 4 --save_state "$fs/x.state" --save "$fs/x.model" >/dev/null 2>"$tmp/err"
    rc=$?
    [ $rc -eq 1 ] && grep -qF "x.state was not written: step 4: saving resume state: write to $fs/x.state.shardlab-tmp." "$tmp/err" &&
        grep -qF "No space left on device (any earlier file there is untouched); --save $fs/x.model was written" "$tmp/err" &&
        [ "$(stat -c %s "$fs/x.model")" = 70400 ] && [ "$(ls "$fs")" = x.model ]
    check "attack: a 300 KB file system: the state fails (ENOSPC), the model is written, no temp file left" $?
    rm -f "$fs"/*
    # the same when a stop signal's state fails: the model is written (it was skipped)
    # (no timeout wrapper: it would pass the signal on to train's whole group, twice to train)
    "${train[@]}" --steps 1000000 --save_state "$fs/x.state" --save "$fs/x.model" >"$tmp/out" 2>"$tmp/err" &
    job=$!
    for _ in $(seq 1 600); do grep -q '^step' "$tmp/out" 2>/dev/null && break; sleep 0.1; done
    kill -TERM $job
    wait $job
    rc=$?
    [ $rc -eq 1 ] && grep -qF -- "--save_state $fs/x.state was not written: " "$tmp/err" &&
        grep -qF "No space left on device (any earlier file there is untouched); --save $fs/x.model was written" "$tmp/err" &&
        [ "$(stat -c %s "$fs/x.model")" = 70400 ] && [ "$(ls "$fs")" = x.model ]
    check "attack: SIGTERM on a 300 KB file system: the stop state fails (ENOSPC), the model is written (rc $rc)" $?
    rm -f "$fs"/*
    attack "prepare onto a full file system" "t.bin.shardlab-tmp." "$build/prepare" --input data/kjv.txt --train "$fs/t.bin" --val "$fs/v.bin"
    [ -z "$(ls "$fs")" ]
    check "attack: ... and it leaves nothing there" $?
    cp data/kjv_val.bin "$tmp/old_t.bin" # an existing train shard; the val split cannot fit
    attack "prepare with --val on a full file system" "v.bin.shardlab-tmp." \
        "$build/prepare" --input data/kjv.txt --val-fraction 0.5 --train "$tmp/old_t.bin" --val "$fs/v.bin"
    cmp -s "$tmp/old_t.bin" data/kjv_val.bin && [ -z "$(ls "$fs")" ] && [ -z "$(ls "$tmp" | grep shardlab-tmp)" ]
    check "attack: ... the existing train shard untouched (it was replaced), no temp file left" $?
    dd if=/dev/zero of="$fs/fill" bs=1k count=295 2>/dev/null
    attack "--trace on a full file system" "flushing $fs/t.json.shardlab-tmp." "${train[@]}" --steps 2 --trace "$fs/t.json"
    rm -f "$fs"/*
    mount -o remount,ro "$fs"
    attack "--save_state on a read-only file system (refused before training)" \
        "--save_state $fs/s.state cannot be written: cannot create $fs/s.state.shardlab-tmp." \
        "${one[@]}" --save_state "$fs/s.state"
    grep -qF "Read-only file system" "$tmp/err"
    check "attack: ... naming the reason" $?
    umount "$fs"
else
    echo "skip attack: small and read-only file systems (cannot mount a tmpfs here: not root, or no CAP_SYS_ADMIN)"
fi

[ $fails -eq 0 ] && echo "output tests passed" || { echo "$fails output test(s) failed"; exit 1; }
