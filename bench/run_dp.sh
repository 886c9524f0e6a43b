#!/usr/bin/env bash
# Data-parallel scaling on configs/bench-small.conf: 1 rank x 1 thread
# against 2 ranks x 1 thread, for each ZeRO stage. Weak scaling: each rank
# keeps micro_batch 4, so 2 ranks process twice the tokens per step;
# efficiency = tokens/s(2 ranks) / (2 x tokens/s(1 rank)).
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

run() { # ranks stage -> "ms tok/s comm_ms"
    "${mpi[@]}" -np "$1" build/train --config configs/bench-small.conf --steps "$steps" --threads 1 \
        --zero "$2" --log_json "$tmp/log.jsonl" >"$tmp/out.txt"
    comm=$(sed -n 's/.*time in collectives: \([0-9.]*\) ms per step.*/\1/p' "$tmp/out.txt")
    echo "$(avg "$tmp/log.jsonl") ${comm:-0}"
}

read -r ms1 tps1 _ <<<"$(run 1 0)"
printf "bench-small, %d steps (first %d excluded), OPENBLAS_CORETYPE=%s, 1 thread per rank\n" "$steps" "$warmup" \
    "${OPENBLAS_CORETYPE:-default}"
printf "  1 rank:            %7.1f ms/step %7.0f tokens/s\n" "$ms1" "$tps1"
for z in 0 1 2 3; do
    read -r ms tps comm <<<"$(run 2 "$z")"
    eff=$(awk -v a="$tps" -v b="$tps1" 'BEGIN { printf "%.1f", 100 * a / (2 * b) }')
    share=$(awk -v c="$comm" -v m="$ms" 'BEGIN { printf "%.1f", 100 * c / m }')
    printf "  2 ranks, ZeRO-%d:   %7.1f ms/step %7.0f tokens/s  efficiency %5s%%  collectives %6.1f ms/step (%s%%)\n" \
        "$z" "$ms" "$tps" "$eff" "$comm" "$share"
done
