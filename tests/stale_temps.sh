#!/usr/bin/env bash
# Temp files orphaned by kill -9 during saves (issue 12, item 4): a loop of
# runs, each resuming the state the runs before it left and each killed with
# SIGKILL while it writes that state (its temp file exists), must leave the
# state loadable by the next run; then a new run removes every orphaned temp
# file of its targets at start-up, says so once per file, and leaves none.
# Usage: tests/stale_temps.sh BUILD_DIR (build or build-san)
set -u
build=${1:-build}
train="$build/train"
tmp=$(mktemp -d /tmp/shardlab_stale_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
host=$(hostname)
kills=15
fails=0
check() { # name, condition result
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

"$build/prepare" --input data/kjv.txt --train "$tmp/train.bin" --val "$tmp/val.bin" >/dev/null || exit 1
# a 45 MB state (4 x 256 model, bf16 params + fp32 master and Adam moments),
# written after every step, so a run spends much of its time saving
args=(--config configs/tiny.conf --train_data "$tmp/train.bin" --val_data "" --threads 1 --peak_flops 1e9
      --n_layer 4 --d_model 256 --micro_batch 1 --steps 1000000 --save_state "$tmp/run.state" --save_state_every 1)

hits=0
hit=() # hit[i] = 1 when run i was killed while its temp file existed
for i in $(seq 1 $kills); do
    resume=()
    [ -e "$tmp/run.state" ] && resume=(--resume "$tmp/run.state")
    "$train" "${args[@]}" "${resume[@]}" >"$tmp/out$i" 2>&1 &
    pid=$!
    # SIGKILL as soon as this run's temp file appears: in the middle of a save
    for _ in $(seq 1 2000); do
        [ -e "$tmp/run.state.shardlab-tmp.$host.$pid" ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.005
    done
    hit[i]=0
    [ -e "$tmp/run.state.shardlab-tmp.$host.$pid" ] && hit[i]=1 && hits=$((hits + 1))
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
done
left=$(find "$tmp" -name 'run.state.shardlab-tmp.*' | wc -l)
removed=$(cat "$tmp"/out* | grep -c 'removed stale temp file')
echo "     $kills runs killed, $hits of them while saving; $removed temp files removed by the next run, $left left"
# A kill can miss a save on a slow or loaded machine (the run died between
# two saves): that run leaves no orphan. Most must land mid-save for the
# test to mean anything.
[ "$hits" -ge $((kills - 3)) ]
check "at least $((kills - 3)) of $kills runs were killed with SIGKILL while their temp file was being written" $?
# run i > 1 removed the orphan of run i - 1 (when it left one): without the
# clean-up there would be $hits now (the issue saw 4 full-size ones after 15
# kills); only the last run's orphan, if any, is left
expect_removed=$((hits - hit[kills]))
! grep -l "^error" "$tmp"/out* >/dev/null && [ "$removed" -eq "$expect_removed" ] && [ "$left" -eq "${hit[kills]}" ]
check "each run resumed the state the killed ones left and removed its predecessor's orphan ($removed of $expect_removed)" $?

# Each of those runs removed its predecessor's temp file: put back 3 more
# orphans to show a later run finds several, and one of another host it must
# not touch.
for pid in 999991 999992 999993; do cp "$tmp/train.bin" "$tmp/run.state.shardlab-tmp.$host.$pid"; done
touch "$tmp/run.state.shardlab-tmp.elsewhere.42"
left=$(find "$tmp" -name "run.state.shardlab-tmp.$host.*" | wc -l)
timeout 120 "$train" "${args[@]}" --steps 1 >"$tmp/final" 2>&1
rc=$?
removed=$(grep -c "^removed stale temp file $tmp/run.state.shardlab-tmp.$host.[0-9]* (from a killed run, pid [0-9]*)$" "$tmp/final")
[ $rc -eq 0 ] && [ "$removed" -eq "$left" ] && [ "$(find "$tmp" -name "run.state.shardlab-tmp.$host.*" | wc -l)" -eq 0 ] &&
    [ -e "$tmp/run.state.shardlab-tmp.elsewhere.42" ]
check "the next start removes all $left stale temp files of this host and says so ($removed messages, rc $rc)" $?

[ $fails -eq 0 ] && echo "stale temp tests passed" || { echo "$fails stale temp test(s) failed"; exit 1; }
