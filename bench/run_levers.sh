#!/usr/bin/env bash
# The two memory levers on configs/bench-small.conf (one process, 2 threads):
# activation checkpointing (ms/step for none/selective/full against the
# extra FLOPs each recomputes) and the optimizers (time of the optimizer
# step: adamw, adamw8bit, sgd, sgd8bit, lion, lion8bit, adafactor).
# Averages exclude the first 5 steps.
# Usage: bench/run_levers.sh [steps] [threads]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
threads=${2:-2}
warmup=5
[ -f data/kjv_train.bin ] || make data >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# prints "ms/step optimizer_ms flops/step" averaged over steps after warm-up
avg() {
    awk -v w="$warmup" -F'[:,}]' '/"type":"step"/ {
        for (i = 1; i < NF; i++) { if ($i ~ /"step"$/) s = $(i+1); if ($i ~ /"ms"$/) ms = $(i+1);
                                   if ($i ~ /"optimizer_ms"$/) o = $(i+1); if ($i ~ /"flops"$/) f = $(i+1) }
        if (s > w) { n++; tms += ms; to += o; tf += f } }
        END { printf "%.1f %.1f %.4e", tms / n, to / n, tf / n }' "$1"
}

run() { # extra args...
    build/train --config configs/bench-small.conf --steps "$steps" --threads "$threads" --log_json "$tmp/log.jsonl" \
        "$@" >"$tmp/out.txt"
    sed -n 's/^  activations *\([0-9]*\) .*/\1/p' "$tmp/out.txt" | tail -1 >"$tmp/act"
    avg "$tmp/log.jsonl"
}

printf "bench-small, %d steps (first %d excluded), %d threads, OPENBLAS_CORETYPE=%s\n" "$steps" "$warmup" "$threads" \
    "${OPENBLAS_CORETYPE:-default}"
read -r base_ms base_opt base_f <<<"$(run --recompute none)"
printf "  %-22s %8s %12s %10s %14s %12s\n" "run" "ms/step" "activations" "+time" "FLOPs/step" "+FLOPs"
printf "  %-22s %8.1f %12s %10s %14.4e %12s\n" "recompute none" "$base_ms" "$(cat "$tmp/act")" "-" "$base_f" "-"
for r in selective full; do
    read -r ms _ f <<<"$(run --recompute "$r")"
    printf "  %-22s %8.1f %12s %9.1f%% %14.4e %11.1f%%\n" "recompute $r" "$ms" "$(cat "$tmp/act")" \
        "$(awk -v a="$ms" -v b="$base_ms" 'BEGIN { print 100 * (a - b) / b }')" "$f" \
        "$(awk -v a="$f" -v b="$base_f" 'BEGIN { print 100 * (a - b) / b }')"
done
printf "  %-22s %8s %14s\n" "optimizer" "ms/step" "optimizer ms"
printf "  %-22s %8.1f %14.1f\n" "adamw" "$base_ms" "$base_opt"
for o in adamw8bit sgd sgd8bit lion lion8bit adafactor; do
    read -r ms opt _ <<<"$(run --optimizer "$o")"
    printf "  %-22s %8.1f %14.1f\n" "$o" "$ms" "$opt"
done
