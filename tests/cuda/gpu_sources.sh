#!/usr/bin/env bash
# gpu_sources.sh [--record | --accept | --check-default] [--path v1|v2] [ROOT]:
# whether a GPU path's sources are the ones that last passed on a GPU.
#
# The paths (--gpu_path, docs/GPU.md): v1 is every file under model/,
# optim/ and parallel/'s cuda/ folders except their v2/ subfolders, plus
# the host files that choose the kernels (the dispatch files and
# include/backend.h); v2 is v1's files and the cuda/v2/ folders' (v2 runs
# over v1's kernels where it has none of its own).
#
# tests/cuda/gpu_verified.txt holds, per path, lines "PATH STATUS sha256  file":
#   verified  the set that last passed `make cuda-test` and
#             tests/cuda/gpu_train.sh on a GPU (which GPU and when in the
#             comments above them); only these make a path "verified"
#   compiled  the set a session without a GPU left as that path's state:
#             compiled and linked, not run. It lets the CPU test below pass
#             while the default path waits for a GPU, and makes every
#             further change to the default path's sources fail that test
#             until the record is brought up to date on purpose
#
# Modes (all exit 0 unless said; 2 on a missing record):
#   (none)           "verified", or "unverified:" and the files that differ
#                    from the path's verified set (changed, new or gone).
#                    The Makefile builds this into the CUDA build
#                    (model/device.c): an unverified path runs on a GPU only
#                    with --gpu_unverified 1, and its banner says UNVERIFIED
#   --record         the path's current set as "verified" lines (for a GPU
#                    session whose runs passed on this tree)
#   --accept         the same as "compiled" lines (for a session without a
#                    GPU that changed the default path: say so in its report)
#   --check-default  the CPU test: the default path (gpu_path's default in
#                    train/config/config_keys.c) must be exactly its verified
#                    or its compiled set; prints "default v1: verified" or
#                    "default v1: compiled, not verified", else
#                    "default v1: not recorded:" and the files, exit 1
set -euo pipefail
mode=verdict
path=v1
while [ $# -gt 0 ]; do
    case "$1" in
        --record) mode=record ;;
        --accept) mode=accept ;;
        --check-default) mode=check ;;
        --path) path=${2:-}; shift ;;
        -*) echo "gpu_sources: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
    shift
done
root=${1:-.}
cd "$root"
record=tests/cuda/gpu_verified.txt

# The default path, as the config key table gives it.
if [ "$mode" = check ]; then
    path=$(sed -n 's/^ *{"gpu_path", *KEY_CHOICE, *F(gpu_path), *"\([^"]*\)".*/\1/p' train/config/config_keys.c)
    [ -n "$path" ] || { echo "gpu_sources: no gpu_path key in train/config/config_keys.c" >&2; exit 2; }
fi
case "$path" in v1|v2) ;; *) echo "gpu_sources: --path v1 or v2, not '$path'" >&2; exit 2 ;; esac

# "sha256  file" of the path's current sources, sorted by file.
current() {
    { find model optim parallel -path "*/cuda/*" -type f 2>/dev/null |
          if [ "$path" = v1 ]; then grep -v '/cuda/v2/' || true; else cat; fi
      for f in model/layers_dispatch.c model/bufops_dispatch.c optim/optim_dispatch.c include/backend.h; do
          if [ -f "$f" ]; then echo "$f"; fi; done; } | sort | xargs -r sha256sum
}
# The record's "sha256  file" lines of this path and status.
recorded() { [ -f "$record" ] && awk -v p="$path" -v s="$1" '$1 == p && $2 == s { print $3 "  " $4 }' "$record" | sort -k2 || true; }
# The files in which two sets differ, on one line.
differ() { diff <(echo "$1") <(echo "$2") | sed -n 's/^[<>] [0-9a-f]*  //p' | sort -u | tr '\n' ' ' | sed 's/ $//' || true; }

now=$(current)
case "$mode" in
    record) echo "$now" | sed "s/^/$path verified /"; exit 0 ;;
    accept) echo "$now" | sed "s/^/$path compiled /"; exit 0 ;;
esac
[ -f "$record" ] || { echo "gpu_sources: no record $root/$record" >&2; exit 2; }
verified=$(recorded verified)
diffs=$(differ "$verified" "$now")
if [ "$mode" = verdict ]; then
    if [ -z "$verified" ]; then echo "unverified: $path has never passed on a GPU"
    elif [ -z "$diffs" ]; then echo verified
    else echo "unverified: $diffs"; fi
    exit 0
fi
if [ -n "$verified" ] && [ -z "$diffs" ]; then echo "default $path: verified"; exit 0; fi
compiled=$(recorded compiled)
cdiffs=$(differ "$compiled" "$now")
if [ -n "$compiled" ] && [ -z "$cdiffs" ]; then echo "default $path: compiled, not verified"; exit 0; fi
# named against the nearer of the two sets
if [ -n "$compiled" ] && { [ -z "$verified" ] || [ "$(wc -w <<< "$cdiffs")" -lt "$(wc -w <<< "$diffs")" ]; }; then
    diffs=$cdiffs
fi
echo "default $path: not recorded: $diffs"
exit 1
