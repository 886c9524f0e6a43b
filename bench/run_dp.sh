#!/usr/bin/env bash
# Data-parallel scaling on configs/bench-small.conf: 1 rank x 1 thread
# against 2 ranks x 1 thread, for each ZeRO stage. Weak scaling: each rank
# keeps micro_batch 4, so 2 ranks process twice the tokens per step;
# efficiency = tokens/s(2 ranks) / (2 x tokens/s(1 rank)). Each stage runs
# with the blocking path (--overlap 0) and with collectives behind compute
# (--overlap 1), printing the time collectives were in flight and the part
# exposed (the compute thread waiting in them), per step on rank 0.
# Usage: bench/run_dp.sh [steps]   (averages exclude the first 5 steps)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
warmup=5
[ -f data/kjv_train.bin ] || make data >/dev/null
mpi=(mpirun --oversubscribe --allow-run-as-root)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# prints "ms/step tokens/s" averaged over steps after warm-up
avg() {
    awk -v w="$warmup" -F'[:,]' '/"type":"step"/ {
        for (i = 1; i < NF; i++) { if ($i ~ /"step"$/) s = $(i+1); if ($i ~ /"ms"$/) ms = $(i+1); if ($i ~ /"tokens_per_s"$/) t = $(i+1) }
        if (s > w) { n++; tms += ms; tok += t * ms / 1000 } }
        END { printf "%.1f %.0f", tms / n, 1000 * tok / tms }' "$1"
}

run() { # ranks stage overlap -> "ms tok/s inflight_ms exposed_ms"
    "${mpi[@]}" -np "$1" build/train --config configs/bench-small.conf --steps "$steps" --threads 1 \
        --zero "$2" --overlap "$3" --log_json "$tmp/log.jsonl" >"$tmp/out.txt"
    comm=$(sed -n 's/.*time in collectives: \([0-9.]*\) ms per step.*/\1/p' "$tmp/out.txt")
    exposed=$(sed -n 's/.*exposed (compute thread waiting): \([0-9.]*\) ms per step.*/\1/p' "$tmp/out.txt")
    echo "$(avg "$tmp/log.jsonl") ${comm:-0} ${exposed:-0}"
}

# the BLAS kernel OpenBLAS picked (OPENBLAS_CORETYPE overrides it)
blas_dir=/usr/lib/$(gcc -print-multiarch)/openblas-openmp
core=$(python3 -c "import ctypes; l = ctypes.CDLL('$blas_dir/libopenblas.so.0'); \
l.openblas_get_corename.restype = ctypes.c_char_p; print(l.openblas_get_corename().decode())" 2>/dev/null || echo unknown)
cpu=$(lscpu | sed -n 's/^Model name: *//p')

read -r ms1 tps1 _ <<<"$(run 1 0 1)"
printf "bench-small, %d steps (first %d excluded), CPU %s, OpenBLAS core %s, 1 thread per rank\n" "$steps" "$warmup" \
    "$cpu" "$core"
printf "  1 rank:                       %7.1f ms/step %7.0f tokens/s\n" "$ms1" "$tps1"
for z in 0 1 2 3; do
    for o in 0 1; do
        read -r ms tps comm exposed <<<"$(run 2 "$z" "$o")"
        eff=$(awk -v a="$tps" -v b="$tps1" 'BEGIN { printf "%.1f", 100 * a / (2 * b) }')
        share=$(awk -v c="$exposed" -v m="$ms" 'BEGIN { printf "%.1f", 100 * c / m }')
        printf "  2 ranks, ZeRO-%d, overlap %d:   %7.1f ms/step %7.0f tokens/s  efficiency %5s%%  collectives %7.1f ms/step in flight, %6.1f exposed (%s%% of the step)\n" \
            "$z" "$o" "$ms" "$tps" "$eff" "$comm" "$exposed" "$share"
    done
done
