#!/usr/bin/env bash
# Speed that survives a busy core: bench-small on N threads (bench/run.sh)
# with the machine quiet, then with one other process spinning on one core
# (started and stopped here, bounded by `timeout`), side by side: the
# default (the team follows the free cores, docs/THREADS.md), a fixed team
# under the wait policies a user can pick (OpenMP's default, a bounded
# spin, passive), and one thread fewer; PyTorch eager beside it where it is installed
# (bench/pytorch_peer.py, bf16 weights). Usage: bench/run_busy.sh [steps]
# [threads]. Record the table in bench/RESULTS.md with the CPU printed.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
threads=${2:-2}
[ -x build/train ] || make all >/dev/null
busy_core=$(( $(nproc) - 1 )) # the last core: a thread of ours shares it
spin_seconds=600               # the spinner's bound, should this script die
spinner=
# wait returns the spinner's 143 (SIGTERM): not a failure of this script
stop_spinner() {
    if [ -n "$spinner" ]; then
        kill "$spinner" 2>/dev/null || true
        wait "$spinner" 2>/dev/null || true
    fi
    spinner=
}
trap stop_spinner EXIT
start_spinner() {
    timeout "$spin_seconds" taskset -c "$busy_core" sh -c 'while :; do :; done' &
    spinner=$!
    sleep 0.2
}
ms() { # ms/step of one run: threads, "VAR=value ..." (or ""), then trainer flags
    local t=$1 vars=$2
    shift 2
    env $vars bench/run.sh "$steps" "$t" "$@" 2>/dev/null | awk '/ms\/step/ { print $2 }'
}
torch_ms() {
    python3 bench/pytorch_peer.py --threads "$threads" --steps "$steps" --mode bf16 | sed -n 's/.*: \([0-9.]*\) ms\/step.*/\1/p'
}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); $(nproc) cores; the spinner on core $busy_core"
printf "%-52s %10s %10s %9s\n" "bench-small, $threads threads (ms/step)" quiet busy slowdown
row() { # label, threads, "VAR=value ..." (or ""), trainer flags...
    local label=$1 t=$2 vars=$3
    shift 3
    local q b
    q=$(ms "$t" "$vars" "$@")
    start_spinner
    b=$(ms "$t" "$vars" "$@")
    stop_spinner
    printf "%-52s %10s %10s %8.2fx\n" "$label" "$q" "$b" "$(awk -v q="$q" -v b="$b" 'BEGIN { print b / q }')"
}
row "shardlab, default (the team follows the free cores)" "$threads" ""
row "shardlab, fixed team (--threads_adapt 0)" "$threads" "" --threads_adapt 0
row "shardlab, fixed team, OMP_WAIT_POLICY=passive" "$threads" "OMP_WAIT_POLICY=passive" --threads_adapt 0
row "shardlab, fixed team, GOMP_SPINCOUNT=10000" "$threads" "GOMP_SPINCOUNT=10000" --threads_adapt 0
row "shardlab, $((threads - 1)) thread(s)" "$((threads - 1))" ""
if python3 -c "import torch" 2>/dev/null; then
    q=$(torch_ms)
    start_spinner
    b=$(torch_ms)
    stop_spinner
    printf "%-52s %10s %10s %8.2fx\n" "PyTorch eager, bf16 weights" "$q" "$b" "$(awk -v q="$q" -v b="$b" 'BEGIN { print b / q }')"
else
    echo "PyTorch not installed (pip install torch): its row skipped"
fi
