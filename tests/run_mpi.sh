#!/usr/bin/env bash
# Runs each multi-rank test binary under mpirun on 2, 3 and 4 ranks.
#   tests/run_mpi.sh build/tests/mpi/test_collectives [...]
# More ranks than cores is expected here (--oversubscribe); root is allowed
# so containers and CI runners work. A run that hangs fails after 120 s
# ($MPI_TEST_SECONDS: the sanitizer build, several times slower, sets more)
# instead of blocking CI. Exits non-zero if any run failed.
set -u
[ $# -gt 0 ] || { echo "usage: $0 TEST_BINARY..." >&2; exit 2; }
# Environment the ranks need from the caller (the sanitizer build sets it).
forward=()
for v in ASAN_OPTIONS UBSAN_OPTIONS; do
    [ -n "${!v:-}" ] && forward+=(-x "$v")
done
failed=()
for t in "$@"; do
    for n in 2 3 4; do
        echo "== mpirun -np $n $t"
        if ! timeout "${MPI_TEST_SECONDS:-120}" mpirun --oversubscribe --allow-run-as-root "${forward[@]}" -np "$n" "$t"; then
            echo "!! FAILED: mpirun -np $n $t"
            failed+=("$t on $n ranks")
        fi
    done
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "MPI tests failed:"
    printf '  %s\n' "${failed[@]}"
    exit 1
fi
echo "MPI tests passed"
