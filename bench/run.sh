#!/usr/bin/env bash
# Speed benchmark for configs/bench-small.conf (bf16 params, 2 threads).
# Prints ms/step, tokens/s and the GEMM share, averaged over the steps after
# warm-up. Usage: bench/run.sh [steps] [threads]; results go in bench/RESULTS.md
# by hand, with the command and the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-30}
threads=${2:-2}
warmup=5
[ -f data/kjv_train.bin ] || make data >/dev/null
log=$(mktemp)
trap 'rm -f "$log"' EXIT
build/train --config configs/bench-small.conf --steps "$steps" --threads "$threads" \
    --val_every 0 --log_json "$log" >/dev/null
awk -v w="$warmup" -F'[:,]' '
    /"type":"step"/ {
        for (i = 1; i < NF; i++) {
            if ($i ~ /"step"$/) s = $(i + 1)
            if ($i ~ /"ms"$/) ms = $(i + 1)
            if ($i ~ /"gemm_ms"$/) g = $(i + 1)
            if ($i ~ /"tokens_per_s"$/) tps = $(i + 1)
        }
        if (s > w) { n++; tms += ms; tg += g; tok += tps * ms / 1000 }
    }
    END {
        printf "bench-small, %d steps after %d warm-up, OPENBLAS_CORETYPE=%s, threads %s\n", n, w, ENVIRON["OPENBLAS_CORETYPE"], threads
        printf "  ms/step    %.1f\n  tokens/s   %.0f\n  GEMM share %.1f%%\n", tms / n, 1000 * tok / tms, 100 * tg / tms
    }' threads="$threads" "$log"
