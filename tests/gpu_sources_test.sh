#!/usr/bin/env bash
# tests/cuda/gpu_sources.sh on a tree of its own: the recorded set is
# "verified"; a changed, a new and a removed GPU-path file each make it
# "unverified" naming that file; a host file outside the GPU path does not.
set -euo pipefail
script=$(cd "$(dirname "$0")" && pwd)/cuda/gpu_sources.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/model/cuda" "$tmp/optim/cuda" "$tmp/model/cpu" "$tmp/tests/cuda"
echo 'kernel a' > "$tmp/model/cuda/a.cu"
echo 'kernel b' > "$tmp/optim/cuda/b.cu"
echo 'dispatch' > "$tmp/model/layers_dispatch.c"
echo 'host' > "$tmp/model/cpu/c.c"
{ echo "# a test record"; "$script" --record "$tmp"; } > "$tmp/tests/cuda/gpu_verified.txt"
fails=0
expect() {   # expect WHAT VERDICT
    local got; got=$("$script" "$tmp")
    if [ "$got" = "$2" ]; then echo "ok   $1: $got"; else echo "FAIL $1: '$got', expected '$2'"; fails=$((fails + 1)); fi
}
expect "the recorded tree" "verified"
echo 'host, changed' > "$tmp/model/cpu/c.c"
expect "a CPU file changed" "verified"
echo 'kernel a, changed' > "$tmp/model/cuda/a.cu"
expect "a kernel changed" "unverified: model/cuda/a.cu"
echo 'kernel a' > "$tmp/model/cuda/a.cu"
echo 'new' > "$tmp/model/cuda/new.cu"
expect "a kernel added" "unverified: model/cuda/new.cu"
rm "$tmp/model/cuda/new.cu" "$tmp/model/layers_dispatch.c"
expect "the dispatch removed" "unverified: model/layers_dispatch.c"
[ "$fails" = 0 ] || exit 1
echo "gpu_sources: 5 passed, 0 failed"
