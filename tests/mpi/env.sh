# Sourced by the MPI test scripts after `set -u`, with their arguments:
# build (BUILD_DIR, $1, default build), a temporary directory tmp named for
# the script and removed on exit, the mpirun command as the array mpi (the
# sanitizers' options passed to every rank), and the bundled corpus prepared
# into $tmp/train.bin and $tmp/val.bin (the script exits if that fails).
build=${1:-build}
tmp=$(mktemp -d "/tmp/shardlab_$(basename "$0" .sh)_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --oversubscribe --allow-run-as-root)
for v in ASAN_OPTIONS UBSAN_OPTIONS; do [ -n "${!v:-}" ] && mpi+=(-x "$v"); done
"$build/prepare" --input data/kjv.txt --train "$tmp/train.bin" --val "$tmp/val.bin" >/dev/null || exit 1
