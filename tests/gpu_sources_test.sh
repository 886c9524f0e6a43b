#!/usr/bin/env bash
# tests/cuda/gpu_sources.sh on a tree of its own, then on this repository.
# The fake tree: the recorded set is "verified"; a changed, a new and a
# removed GPU-path file each make it "unverified" naming that file; a host
# file outside the GPU path does not; a v2 file changes v2's verdict and
# not v1's. --check-default (the CPU test): the default path passes when it
# is exactly its verified or its compiled ("accepted") set and fails naming
# the file otherwise, and a default of v2, which has never passed, fails.
# Then the repository itself: its default path must be recorded, so an
# unrun kernel never becomes the default without the record saying so.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
script=$here/cuda/gpu_sources.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/model/cuda/v2" "$tmp/optim/cuda" "$tmp/model/cpu" "$tmp/tests/cuda" "$tmp/train/config"
echo 'kernel a' > "$tmp/model/cuda/a.cu"
echo 'kernel b' > "$tmp/optim/cuda/b.cu"
echo 'dispatch' > "$tmp/model/layers_dispatch.c"
echo 'host' > "$tmp/model/cpu/c.c"
echo 'kernel a, v2' > "$tmp/model/cuda/v2/a2.cu"
default_is() { echo "    {\"gpu_path\", KEY_CHOICE, F(gpu_path), \"$1\", \"the GPU's kernels\", .choices = {\"v1\", \"v2\"}}," \
                   > "$tmp/train/config/config_keys.c"; }
default_is v1
{ echo "# a test record"; "$script" --record --path v1 "$tmp"; } > "$tmp/tests/cuda/gpu_verified.txt"
fails=0 cases=0
expect() {   # expect WHAT VERDICT [gpu_sources.sh's options]
    local what=$1 want=$2 got; shift 2
    got=$("$script" "$@" "$tmp" || true)
    cases=$((cases + 1))
    if [ "$got" = "$want" ]; then echo "ok   $what: $got"; else echo "FAIL $what: '$got', expected '$want'"; fails=$((fails + 1)); fi
}
expect_rc() {   # expect_rc WHAT RC [options]: the exit status
    local what=$1 want=$2 rc=0; shift 2
    "$script" "$@" "$tmp" > /dev/null || rc=$?
    cases=$((cases + 1))
    if [ "$rc" = "$want" ]; then echo "ok   $what: exit $rc"; else echo "FAIL $what: exit $rc, expected $want"; fails=$((fails + 1)); fi
}
expect "the recorded tree" "verified"
expect "v1 by name" "verified" --path v1
expect "v2, never recorded" "unverified: v2 has never passed on a GPU" --path v2
expect "the default, verified" "default v1: verified" --check-default
echo 'host, changed' > "$tmp/model/cpu/c.c"
expect "a CPU file changed" "verified"
echo 'kernel a2, changed' > "$tmp/model/cuda/v2/a2.cu"
expect "a v2 kernel changed: v1" "verified"
expect_rc "a v2 kernel changed: the default v1" 0 --check-default
"$script" --record --path v2 "$tmp" >> "$tmp/tests/cuda/gpu_verified.txt"
expect "v2 recorded" "verified" --path v2
echo 'kernel a, changed' > "$tmp/model/cuda/a.cu"
expect "a kernel changed" "unverified: model/cuda/a.cu"
expect "a kernel changed: v2 runs it too" "unverified: model/cuda/a.cu" --path v2
expect "a kernel changed: the default" "default v1: not recorded: model/cuda/a.cu" --check-default
expect_rc "a kernel changed: the default's exit" 1 --check-default
"$script" --accept --path v1 "$tmp" >> "$tmp/tests/cuda/gpu_verified.txt"
expect "accepted: still unverified on a GPU" "unverified: model/cuda/a.cu"
expect "accepted: the default" "default v1: compiled, not verified" --check-default
echo 'kernel a, changed again' > "$tmp/model/cuda/a.cu"
expect "changed after the acceptance" "default v1: not recorded: model/cuda/a.cu" --check-default
echo 'kernel a' > "$tmp/model/cuda/a.cu"
echo 'new' > "$tmp/model/cuda/new.cu"
expect "a kernel added" "unverified: model/cuda/new.cu"
expect "a kernel added: the default" "default v1: not recorded: model/cuda/new.cu" --check-default
rm "$tmp/model/cuda/new.cu" "$tmp/model/layers_dispatch.c"
expect "the dispatch removed" "unverified: model/layers_dispatch.c"
echo 'dispatch' > "$tmp/model/layers_dispatch.c"
default_is v2
expect "v2 as the default, verified" "default v2: verified" --check-default
echo 'kernel a2, changed again' > "$tmp/model/cuda/v2/a2.cu"
expect "v2 as the default, its kernel unrun" "default v2: not recorded: model/cuda/v2/a2.cu" --check-default
[ "$fails" = 0 ] || exit 1
echo "gpu_sources: $cases passed, 0 failed"
# This repository: the default path is recorded (verified, or its compiled
# state accepted in the record); the CUDA build still refuses an
# unverified path without --gpu_unverified 1.
"$script" --check-default "$here/.."
