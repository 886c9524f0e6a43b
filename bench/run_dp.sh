#!/usr/bin/env bash
# Data-parallel scaling on configs/bench-small.conf: 1 rank x 1 thread
# against N ranks x 1 thread, for each ZeRO stage. Weak scaling: each rank
# keeps micro_batch 4, so N ranks process N times the tokens per step;
# efficiency = tokens/s(N ranks) / (N x tokens/s(1 rank)). Each stage runs
# with the blocking path (--overlap 0) and with collectives behind compute
# (--overlap 1), printing the time collectives were in flight and the part
# exposed (the compute thread waiting in them), per step on rank 0.
# Usage: bench/run_dp.sh [ranks] [steps]   (ranks: default every core, nproc;
# steps: default 20; averages exclude the first 5 steps). Prints the CPU
# model and the BLAS kernel from the run's JSON "run" record.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-$(nproc)}
steps=${2:-20}
warmup=5
if ! [[ "$ranks" =~ ^[0-9]+$ && "$ranks" -ge 2 && "$steps" =~ ^[0-9]+$ && "$steps" -gt "$warmup" ]]; then
    echo "usage: bench/run_dp.sh [ranks >= 2] [steps > $warmup]" >&2
    exit 1
fi
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

# a string field of the run record: field NAME
field() { sed -n "s/.*\"type\":\"run\".*\"$1\":\"\([^\"]*\)\".*/\1/p" "$tmp/log.jsonl" | head -1; }

run() { # ranks stage overlap -> "ms tok/s inflight_ms exposed_ms"
    "${mpi[@]}" -np "$1" build/train --config configs/bench-small.conf --steps "$steps" --threads 1 \
        --zero "$2" --overlap "$3" --log_json "$tmp/log.jsonl" >"$tmp/out.txt"
    comm=$(sed -n 's/.*time in collectives: \([0-9.]*\) ms per step.*/\1/p' "$tmp/out.txt")
    exposed=$(sed -n 's/.*exposed (compute thread waiting): \([0-9.]*\) ms per step.*/\1/p' "$tmp/out.txt")
    echo "$(avg "$tmp/log.jsonl") ${comm:-0} ${exposed:-0}"
}

read -r ms1 tps1 _ <<<"$(run 1 0 1)"
printf "bench-small, %d steps (first %d excluded), 1 thread per rank, %s ranks on %s cores\n" "$steps" "$warmup" \
    "$ranks" "$(nproc)"
printf "CPU %s (%s); %s %s, kernel %s (OPENBLAS_CORETYPE=%s)\n" "$(field cpu_model)" "$(field cpu_isa)" \
    "$(field blas_library)" "$(field blas_version)" "$(field blas_corename)" "${OPENBLAS_CORETYPE:-unset}"
printf "  1 rank:            %7.1f ms/step %7.0f tokens/s\n" "$ms1" "$tps1"
for z in 0 1 2 3; do
    for o in 0 1; do
        read -r ms tps comm exposed <<<"$(run "$ranks" "$z" "$o")"
        eff=$(awk -v a="$tps" -v b="$tps1" -v n="$ranks" 'BEGIN { printf "%.1f", 100 * a / (n * b) }')
        share=$(awk -v c="$exposed" -v m="$ms" 'BEGIN { printf "%.1f", 100 * c / m }')
        printf "  %d ranks, ZeRO-%d, overlap %d: %7.1f ms/step %7.0f tokens/s  efficiency %5s%%  collectives %7.1f ms/step in flight, %6.1f exposed (%s%% of the step)\n" \
            "$ranks" "$z" "$o" "$ms" "$tps" "$eff" "$comm" "$exposed" "$share"
    done
done
