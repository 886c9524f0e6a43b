#!/usr/bin/env bash
# Speed benchmark for configs/bench-small.conf (bf16 params, 2 threads), or
# the config in $CONFIG (e.g. CONFIG=configs/gpt2-124m.conf).
# Prints ms/step, tokens/s and the GEMM share, averaged over the steps after
# warm-up. Usage: bench/run.sh [steps] [threads] [trainer flags...] (e.g.
# --gemm_dtype bf16); results go in bench/RESULTS.md
# by hand, with the command and the machine (printed: the CPU model and the
# BLAS kernel, from the run's JSON "run" record).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-30}
threads=${2:-2}
shift $(( $# < 2 ? $# : 2 ))
warmup=5
[ -f data/kjv_train.bin ] || make data >/dev/null
log=$(mktemp)
trap 'rm -f "$log"' EXIT
config=${CONFIG:-configs/bench-small.conf}
build/train --config "$config" --steps "$steps" --threads "$threads" \
    --val_every 0 --log_json "$log" "$@" >/dev/null
awk -v w="$warmup" -F'[:,]' '
    function str(name,   r) { # a string field of this record
        if (!match($0, "\"" name "\":\"[^\"]*\"")) return "?"
        r = substr($0, RSTART, RLENGTH); sub(/^"[^"]*":"/, "", r); sub(/"$/, "", r); return r
    }
    function num(name,   r) { # a number field of this record
        if (!match($0, "\"" name "\":[-+.0-9eE]+")) return 0
        r = substr($0, RSTART, RLENGTH); sub(/^"[^"]*":/, "", r); return r + 0
    }
    /"type":"run"/ { peak = num("peak_flops"); spread = num("peak_spread"); cpu = str("cpu_model"); isa = str("cpu_isa"); lib = str("blas_library"); ver = str("blas_version"); core = str("blas_corename"); gdt = str("gemm_dtype"); glib = str("gemm_library"); gver = str("gemm_version"); gker = str("gemm_kernel") }
    /"type":"step"/ {
        for (i = 1; i < NF; i++) {
            if ($i ~ /"step"$/) s = $(i + 1)
            if ($i ~ /"ms"$/) ms = $(i + 1)
            if ($i ~ /"gemm_ms"$/) g = $(i + 1)
            if ($i ~ /"tokens_per_s"$/) tps = $(i + 1)
            if ($i ~ /"model_flops"$/) mf = $(i + 1)
        }
        if (s > w) { n++; tms += ms; tg += g; tok += tps * ms / 1000; tmf += mf }
    }
    END {
        printf "%s, %d steps after %d warm-up, threads %s\n", config, n, w, threads
        printf "CPU %s (%s); %s %s, kernel %s (OPENBLAS_CORETYPE=%s)\n", cpu, isa, lib, ver, core, ENVIRON["OPENBLAS_CORETYPE"] == "" ? "unset" : ENVIRON["OPENBLAS_CORETYPE"]
        printf "GEMMs %s: %s %s, kernel %s\n", gdt, glib, gver, gker
        printf "  ms/step    %.1f\n  tokens/s   %.0f\n  GEMM share %.1f%%\n", tms / n, 1000 * tok / tms, 100 * tg / tms
        printf "  peak       %.1f GFLOP/s (spread %.1f%%)\n  MFU        %.1f%%\n", peak / 1e9, 100 * spread, (peak > 0 ? 100 * tmf / (tms / 1000) / peak : 0)
    }' threads="$threads" config="$config" "$log"
