#!/usr/bin/env bash
# Hosts as network namespaces, for running shardlab across "hosts" on one
# machine and reading the bytes each host put on its wire. Source it for the
# functions (tests/multihost/test_multihost.sh does), or run it:
#   tests/multihost/run.sh BUILD_DIR HOSTS STEPS [trainer arguments...]
# trains with one rank per host and prints the wire bytes of every host
# beside the trainer's counters and ring formula.
#
# Topology: one namespace per host (<prefix>h0, h1, ...) and a switch
# namespace (<prefix>sw) holding a bridge; host i has eth0 = 10.213.0.(i+1)/24,
# the other end of its veth pair on the bridge. Nothing is added to the
# caller's namespace: every address and route lives in the new namespaces,
# so runs side by side (each prefix has the PID) never see each other.
#
# Launch: mpirun runs inside host 0 (10.213.0.1 is local to it) and reaches
# the other hosts through an rsh agent that runs `ip netns exec <host>`;
# OpenMPI's out-of-band and TCP byte-transfer layers are pinned to the
# 10.213.0.0/24 net, and shared memory is off, so rank traffic is on the veths.

MH_NET=10.213.0
MH_CIDR=$MH_NET.0/24
# Bytes of headers in every frame the veth counts: Ethernet 14 + IPv4 20 +
# TCP 20 + the timestamps option 12 (on by default in a new namespace). A
# data frame carries at most 1500 - 52 = 1448 B of payload; an ACK is
# headers only. (The wire's preamble, FCS and gap, 24 B more, are not in
# the counters.)
MH_FRAME_HEADER=66

# Whether this machine lets us create a namespace and a veth pair in it; on
# failure prints why (one line) and returns 1.
mh_probe() {
    local p="shlprobe$$" why
    if ! command -v ip >/dev/null 2>&1; then echo "iproute2's ip not found"; return 1; fi
    if ! why=$(ip netns add "$p" 2>&1); then echo "ip netns add: ${why:-failed}"; return 1; fi
    if ! why=$(ip -n "$p" link add name pa type veth peer name pb 2>&1); then
        ip netns del "$p" 2>/dev/null
        echo "veth in a namespace: ${why:-failed}"
        return 1
    fi
    ip netns del "$p"
}

# mh_up HOSTS: creates the namespaces, bridge and veths; sets MH_PREFIX,
# MH_HOSTS and MH_DIR (a temporary folder holding the rsh agent).
mh_up() {
    MH_HOSTS=$1
    MH_PREFIX="shl$$"
    MH_DIR=$(mktemp -d /tmp/shardlab_mh_XXXXXX)
    local sw="${MH_PREFIX}sw" i ns
    ip netns add "$sw" || return 1
    ip -n "$sw" link add br0 type bridge || return 1
    ip -n "$sw" link set br0 up || return 1
    for ((i = 0; i < MH_HOSTS; i++)); do
        ns="${MH_PREFIX}h$i"
        ip netns add "$ns" || return 1
        # the pair is made in the host namespace, its peer moved to the switch
        ip -n "$ns" link add eth0 type veth peer name "p$i" || return 1
        ip -n "$ns" link set "p$i" netns "$sw" || return 1
        ip -n "$sw" link set "p$i" master br0 up || return 1
        ip -n "$ns" addr add "$MH_NET.$((i + 1))/24" dev eth0 || return 1
        # One TCP segment per frame, as a real 1500-byte-MTU NIC puts on the
        # wire: without this a veth passes 64 KiB GSO packets whole, and its
        # counters would charge one set of headers per 44 segments.
        ip -n "$ns" link set eth0 gso_max_segs 1 || return 1
        ip -n "$ns" link set eth0 up || return 1
        ip -n "$ns" link set lo up || return 1
    done
    # The agent: OpenMPI calls it as `agent HOST COMMAND...`; HOST is an
    # address 10.213.0.(i+1), mapped back to namespace <prefix>h<i>.
    cat >"$MH_DIR/agent" <<AGENT
#!/bin/sh
host=\$1; shift
case "\$host" in
    $MH_NET.*) ns="${MH_PREFIX}h\$((\${host##*.} - 1))" ;;
    *) echo "shardlab rsh agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
AGENT
    chmod +x "$MH_DIR/agent"
}

# Removes what mh_up made (deleting a namespace deletes its veth ends).
mh_down() {
    [ -n "${MH_PREFIX:-}" ] || return 0
    local i
    for ((i = 0; i < ${MH_HOSTS:-0}; i++)); do ip netns del "${MH_PREFIX}h$i" 2>/dev/null; done
    ip netns del "${MH_PREFIX}sw" 2>/dev/null
    [ -n "${MH_DIR:-}" ] && rm -rf "$MH_DIR"
    MH_PREFIX=
}

# mh_tx I: "bytes frames" host I has sent on its interface so far.
mh_tx() {
    local s="/sys/class/net/eth0/statistics"
    ip netns exec "${MH_PREFIX}h$1" sh -c "echo \$(cat $s/tx_bytes) \$(cat $s/tx_packets)"
}

# mh_mpirun ARGS...: mpirun from host 0, one rank per host, killed after
# MH_TIMEOUT seconds (default 300).
mh_mpirun() {
    local hosts="" i
    for ((i = 0; i < MH_HOSTS; i++)); do hosts+="${hosts:+,}$MH_NET.$((i + 1))"; done
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        timeout "${MH_TIMEOUT:-300}" ip netns exec "${MH_PREFIX}h0" mpirun --allow-run-as-root -np "$MH_HOSTS" --host "$hosts" \
        --mca plm_rsh_agent "$MH_DIR/agent" --mca plm_rsh_no_tree_spawn 1 \
        --mca btl tcp,self --mca btl_tcp_if_include "$MH_CIDR" --mca oob_tcp_if_include "$MH_CIDR" \
        --wdir "$PWD" "$@"
}

# mh_train NAME STEPS TRAINER_ARGS...: trains STEPS steps across the hosts;
# the output goes to $MH_DIR/NAME.out, and "host bytes frames" sent during
# the run, one line per host, to $MH_DIR/NAME.tx.
mh_train() {
    local name=$1 steps=$2 i
    shift 2
    local -a before
    for ((i = 0; i < MH_HOSTS; i++)); do before[i]=$(mh_tx "$i"); done
    if ! mh_mpirun "$@" --steps "$steps" >"$MH_DIR/$name.out" 2>&1; then
        echo "multihost: the $steps-step run failed; its last lines:"
        tail -15 "$MH_DIR/$name.out"
        return 1
    fi
    : >"$MH_DIR/$name.tx"
    for ((i = 0; i < MH_HOSTS; i++)); do
        set -- ${before[i]} $(mh_tx "$i")
        echo "$i $(($3 - $1)) $(($4 - $2))" >>"$MH_DIR/$name.tx"
    done
}

# mh_comm_rows OUT: per rank, "rank reduce_scatter all_gather scalars model_total ring_theory", from the comm table
mh_comm_rows() {
    awk -v n="$MH_HOSTS" '
        /^communication per optimizer step/ { on = 1 }
        on && /^  reduce-scatter / { for (r = 0; r < n; r++) rs[r] = $(2 + r) }
        on && /^  all-gather /     { for (r = 0; r < n; r++) ag[r] = $(2 + r) }
        on && /^  scalars /        { for (r = 0; r < n; r++) sc[r] = $(2 + r) }
        on && /^  model total /    { for (r = 0; r < n; r++) mt[r] = $(3 + r); th = $(3 + n) }
        END { for (r = 0; r < n; r++) print r, rs[r], ag[r], sc[r], mt[r], th }' "$1"
}

# mh_compare SHORT_NAME SHORT_STEPS LONG_NAME LONG_STEPS: per optimizer step
# (the two runs' difference over the difference in steps, which cancels
# start-up: mpirun's wire-up, the model's first gathers, the end-of-run
# reports), each host's wire bytes beside the trainer's counters for its
# rank and the ring formula. Prints a table, and writes one line per host to
# $MH_DIR/compare: "host wire frames payload counters ring expected", where
# expected is what the algorithms send (below).
#
# Counters and ring: the trainer counts each collective at its ring volume,
# (N-1)/N of the buffer per rank. OpenMPI 4.1's all-gather sends exactly
# that from every rank, and ZeRO-2/3's reduce-scatter is the MPI table's own
# ring of point-to-point steps (parallel/comm/comm_mpi_ring.c), which sends
# N-1 chunks from every rank: the ring volume. So the payload a host sends
# per step is its counters. (OpenMPI's non-blocking reduce-scatter, used
# before, reduced to rank 0 and scattered: every other host sent N/(N-1)
# times the ring volume on that part.)
mh_compare() {
    local short=$1 s1=$2 long=$3 s2=$4
    mh_comm_rows "$MH_DIR/$short.out" >"$MH_DIR/$short.comm"
    mh_comm_rows "$MH_DIR/$long.out" >"$MH_DIR/$long.comm"
    local formula
    formula=$(sed -n "s/^  ZeRO's formula with Psi: \([0-9]*\) B.*/\1/p" "$MH_DIR/$long.out")
    awk -v n="$MH_HOSTS" -v s1="$s1" -v s2="$s2" -v net="$MH_NET" -v formula="${formula:-0}" -v hb="$MH_FRAME_HEADER" \
        -v out="$MH_DIR/compare" '
        FNR == 1 { file++ } # the four files in turn: short.tx, long.tx, short.comm, long.comm
        file == 1 { b1[$1] = $2; f1[$1] = $3 }
        file == 2 { b2[$1] = $2; f2[$1] = $3 }
        file == 3 { c1[$1] = ($4 + $5) * s1; th = $6 }
        file == 4 { c2[$1] = ($4 + $5) * s2 }
        END {
            d = s2 - s1
            printf "wire bytes per optimizer step, %d hosts (network namespaces on veth pairs, MTU 1500, one TCP segment per frame)\n", n
            printf "each host: (run of %d steps - run of %d steps) / %d, which cancels start-up and the end-of-run reports\n", s2, s1, d
            printf "  %-14s %10s %8s %9s %10s %10s %10s %10s %7s %8s %8s\n", "host", "wire", "frames", "headers", "payload", \
                "counters", "ring", "expected", "wire/", "wire/", "payload/"
            printf "  %-14s %10s %8s %9s %10s %10s %10s %10s %7s %8s %8s\n", "", "B/step", "/step", "B/step", "B/step", \
                "B/step", "B/step", "B/step", "ring", "expected", "expected"
            for (r = 0; r < n; r++) {
                wire = (b2[r] - b1[r]) / d; fr = (f2[r] - f1[r]) / d
                hdr = hb * fr; pay = wire - hdr
                cnt = (c2[r] - c1[r]) / d
                exp_ = cnt
                printf "  %-14s %10.0f %8.1f %9.0f %10.0f %10.0f %10.0f %10.0f %7.4f %8.4f %8.4f\n", r " " net "." (r + 1), \
                    wire, fr, hdr, pay, cnt, th, exp_, wire / th, wire / exp_, pay / exp_
                printf "%d %.1f %.2f %.1f %.1f %.1f %.1f\n", r, wire, fr, pay, cnt, th, exp_ > out
            }
            printf "  headers: %d B per frame (Ethernet 14, IPv4 20, TCP 20 + timestamps 12), ACKs included; payload = wire - headers\n", hb
            printf "  counters: the trainer'"'"'s model total + scalars for that rank (comm table); ring: its theory column, (N-1)/N per collective\n"
            printf "  ZeRO'"'"'s formula with Psi (unpadded): %s B per rank per step\n", formula
            printf "  expected: the counters, on every host (all-gathers and the reduce-scatter'"'"'s point-to-point ring send the ring volume)\n"
        }' "$MH_DIR/$short.tx" "$MH_DIR/$long.tx" "$MH_DIR/$short.comm" "$MH_DIR/$long.comm"
}

# The demo (make multihost-demo): BUILD_DIR HOSTS STEPS [trainer arguments].
mh_main() {
    if [ $# -lt 3 ]; then
        echo "usage: tests/multihost/run.sh BUILD_DIR HOSTS STEPS [trainer arguments...]" >&2
        return 2
    fi
    local build=$1 hosts=$2 steps=$3 why
    shift 3
    case "$hosts$steps" in *[!0-9]*) echo "multihost: HOSTS and STEPS must be numbers" >&2; return 2 ;; esac
    if [ "$hosts" -lt 2 ] || [ "$steps" -lt 2 ]; then
        echo "multihost: need at least 2 hosts and 2 steps (the per-step bytes are a difference with a 1-step run)" >&2
        return 2
    fi
    [ -x "$build/train" ] || { echo "multihost: $build/train not built" >&2; return 1; }
    if ! why=$(mh_probe); then
        echo "multihost: cannot create network namespaces ($why); run as root on Linux with iproute2" >&2
        return 1
    fi
    trap mh_down EXIT
    trap 'exit 130' INT TERM
    mh_up "$hosts" || { echo "multihost: setting up the namespaces failed" >&2; return 1; }
    local -a args=("$PWD/$build/train" "$@" --zero 3 --threads 1 --val_every 0 --sample_tokens 0)
    echo "multihost: $hosts hosts as network namespaces ${MH_PREFIX}h0..h$((hosts - 1)) on a bridge, $MH_CIDR;"
    echo "one rank per host, mpirun in host 0, the others started by an rsh agent (ip netns exec); OpenMPI over TCP"
    echo "== a 1-step run, then a $steps-step run: ${args[*]}"
    mh_train short 1 "${args[@]}" || return 1
    mh_train long "$steps" "${args[@]}" || return 1
    sed -n '/^communication per optimizer step/,$p' "$MH_DIR/long.out"
    echo
    mh_compare short 1 long "$steps"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -u
    mh_main "$@"
fi
