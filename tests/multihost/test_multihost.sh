#!/usr/bin/env bash
# Across hosts, for real: two hosts as network namespaces joined through a
# bridge by veth pairs (tests/multihost/run.sh), one rank each, OpenMPI over
# TCP, ZeRO-3 on the tiny model. Each host's bytes per optimizer step are
# read from its interface counters (a 11-step run minus a 1-step run, over
# 10) and checked against the trainer's own collective counters:
#   payload = wire - 66 B x frames (each frame's Ethernet + IPv4 + TCP
#   headers) is within [1, 1.02] x expected, where expected is the rank's
#   counters (ring volumes) on both hosts: the reduce-scatter is the MPI
#   table's point-to-point ring (parallel/comm/comm_mpi_ring.c; OpenMPI's
#   own, used before, made host 1 send 1.33x). The 2% is MPI's own headers
#   and control messages, measured 0.2-0.8% here.
#   wire is within [1514/1448, 1.15] x expected: at least one 66-B header
#   per 1448-B segment, at most that plus an ACK per segment received (the
#   peer sends as much) and the 2%. Measured 1.07-1.09.
# Skips (exit 0, with the reason) where namespaces cannot be created.
# Usage: tests/multihost/test_multihost.sh BUILD_DIR
set -u
build=${1:-build}
here=$(dirname "$0")
. "$here/run.sh"
if ! why=$(mh_probe); then
    echo "multihost: skipped: cannot create network namespaces ($why)"
    exit 0
fi
[ -x "$build/train" ] || { echo "multihost: $build/train not built"; exit 1; }
tmp=$(mktemp -d /tmp/shardlab_mh_test_XXXXXX)
trap 'mh_down; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
mh_up 2 || { echo "FAIL multihost: setting up the namespaces failed"; exit 1; }
"$build/prepare" --input data/kjv.txt --train "$tmp/train.bin" --val "$tmp/val.bin" >/dev/null || exit 1
args=("$PWD/$build/train" --config configs/tiny.conf --train_data "$tmp/train.bin" --zero 3 --threads 1
      --val_every 0 --sample_tokens 0)
mh_train short 1 "${args[@]}" || exit 1
mh_train long 11 "${args[@]}" || exit 1
mh_compare short 1 long 11
awk '
    BEGIN { lo_wire = 1514 / 1448; hi_wire = 1.15; lo_pay = 1.0; hi_pay = 1.02 }
    {
        host = $1; wire = $2; pay = $4; cnt = $5; expect = $7; n++
        ok = cnt > 0 && expect > 0 && pay >= lo_pay * expect && pay <= hi_pay * expect && \
             wire >= lo_wire * expect && wire <= hi_wire * expect
        printf "%s host %d: payload / expected %.4f in [%.2f, %.2f], wire / expected %.4f in [%.4f, %.2f]\n", \
            ok ? "ok  " : "FAIL", host, pay / expect, lo_pay, hi_pay, wire / expect, lo_wire, hi_wire
        bad += !ok
    }
    END { exit (n == 2 && bad == 0) ? 0 : 1 }' "$MH_DIR/compare" || { echo "FAIL multihost"; exit 1; }
echo "multihost tests passed"
