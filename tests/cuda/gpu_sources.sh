#!/usr/bin/env bash
# gpu_sources.sh [ROOT]: whether the GPU path's sources are the ones that
# last passed on a GPU. The GPU path is every file under model/, optim/ and
# parallel/'s cuda/ folders plus the host files that choose it (the
# dispatch files and include/backend.h). tests/cuda/gpu_verified.txt holds
# "sha256  path" for each file of the last set that passed `make cuda-test`
# and tests/cuda/gpu_train.sh on a GPU (which GPU and when in its comments).
# Prints "verified", or "unverified:" and the files that differ (changed,
# new or gone); exits 0 either way (2 on a missing record). With --record,
# prints the current set in the record's form instead (for a GPU session
# whose runs passed on this tree). The Makefile
# builds the verdict into the CUDA build (model/device.c): an unverified
# path runs on a GPU only with --gpu_unverified 1, and its banner says so.
set -euo pipefail
record_mode=0
if [ "${1:-}" = --record ]; then record_mode=1; shift; fi
root=${1:-.}
record="$root/tests/cuda/gpu_verified.txt"
[ -f "$record" ] || [ "$record_mode" = 1 ] || { echo "gpu_sources: no record $record" >&2; exit 2; }
cd "$root"
current=$({ find model optim parallel -path "*/cuda/*" -type f 2>/dev/null
            for f in model/layers_dispatch.c model/bufops_dispatch.c optim/optim_dispatch.c include/backend.h; do
                if [ -f "$f" ]; then echo "$f"; fi; done; } | sort | xargs -r sha256sum)
if [ $record_mode = 1 ]; then echo "$current"; exit 0; fi
recorded=$(grep -v '^#' "$record" | sed '/^$/d' | sort -k2)
diffs=$(diff <(echo "$recorded" | sort -k2) <(echo "$current" | sort -k2) | sed -n 's/^[<>] [0-9a-f]*  //p' | sort -u || true)
if [ -z "$diffs" ]; then echo verified; else echo "unverified: $(echo $diffs)"; fi
