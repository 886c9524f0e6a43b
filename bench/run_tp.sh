#!/usr/bin/env bash
# Tensor-parallel scaling on configs/bench-small.conf: 1 rank (tp = 1)
# against tp = 2 ranks, 1 thread each, and 1 rank with 2 threads (the same
# two cores given to one process's BLAS instead). Strong scaling: tp splits
# the model, not the batch, so every run processes the same tokens per step
# (micro_batch 4 x seq_len 64); speedup = tokens/s / tokens/s(1 rank, 1
# thread). For tp 2 it prints the time the tp group's collectives (f and g,
# the cross-entropy's) were in flight per step on rank 0 and their share of
# the step, and the tp all-reduce bytes per step beside the theory.
# Usage: bench/run_tp.sh [steps]   (default 20; averages exclude the first 5
# steps). Prints the CPU model and the BLAS kernel from the run's JSON "run"
# record.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
warmup=5
if ! [[ "$steps" =~ ^[0-9]+$ && "$steps" -gt "$warmup" ]]; then
    echo "usage: bench/run_tp.sh [steps > $warmup]" >&2
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

run() { # ranks tp threads -> "ms tok/s tp_inflight_ms tp_exposed_ms tp_bytes tp_theory"
    "${mpi[@]}" -np "$1" build/train --config configs/bench-small.conf --steps "$steps" --threads "$3" \
        --tp "$2" --log_json "$tmp/log.jsonl" >"$tmp/out.txt"
    comm=$(sed -n 's/.*time in collectives: .* tp \([0-9.]*\) ms.*/\1/p' "$tmp/out.txt")
    exposed=$(sed -n 's/.*exposed (compute thread waiting): .* tp \([0-9.]*\) ms.*/\1/p' "$tmp/out.txt")
    bytes=$(awk '/^  \[tp\]/ { tp = 1; next } /^  \[/ { tp = 0 } tp && /^  all-reduce / { print $2 " " $4; exit }' \
        "$tmp/out.txt")
    echo "$(avg "$tmp/log.jsonl") ${comm:-0} ${exposed:-0} ${bytes:-0 0}"
}

read -r ms1 tps1 _ <<<"$(run 1 1 1)"
printf "bench-small, %d steps (first %d excluded), strong scaling (the same 256 tokens per step), %s cores\n" \
    "$steps" "$warmup" "$(nproc)"
printf "CPU %s (%s); %s %s, kernel %s (OPENBLAS_CORETYPE=%s)\n" "$(field cpu_model)" "$(field cpu_isa)" \
    "$(field blas_library)" "$(field blas_version)" "$(field blas_corename)" "${OPENBLAS_CORETYPE:-unset}"
printf "  tp 1, 1 rank x 1 thread:  %7.1f ms/step %7.0f tokens/s\n" "$ms1" "$tps1"
read -r ms tps _ <<<"$(run 1 1 2)"
printf "  tp 1, 1 rank x 2 threads: %7.1f ms/step %7.0f tokens/s  speedup %.2fx\n" "$ms" "$tps" \
    "$(awk -v a="$tps" -v b="$tps1" 'BEGIN { print a / b }')"
read -r ms tps comm exposed bytes theory <<<"$(run 2 2 1)"
printf "  tp 2, 2 ranks x 1 thread: %7.1f ms/step %7.0f tokens/s  speedup %.2fx  tp collectives %.1f ms/step in flight (%.1f%% of the step), %.1f exposed; tp all-reduce %s B/step (theory %s)\n" \
    "$ms" "$tps" "$(awk -v a="$tps" -v b="$tps1" 'BEGIN { print a / b }')" "$comm" \
    "$(awk -v c="$comm" -v m="$ms" 'BEGIN { print 100 * c / m }')" "$exposed" "$bytes" "$theory"
