#!/usr/bin/env bash
# shardlab beside the peer a user would pick instead, PyTorch eager on the
# CPU, at the same shape and threads, in paired rounds (each round runs
# every contender once, so a busy moment of the machine falls on all of
# them). Usage: bench/run_peers.sh [small|124m] [rounds] [threads]
#   small: bench-small (L4 C256 NH4 V50257) at B 4 T 64
#   124m:  GPT-2 124M (L12 C768 NH12 V50257) at B 4 T 256
# Contenders: shardlab with its default GEMMs (auto: bf16 through oneDNN
# where the CPU has bf16 instructions), shardlab with --gemm_dtype fp32,
# PyTorch with bf16 weights, PyTorch with fp32 weights and bf16 autocast,
# PyTorch all fp32 (bench/pytorch_peer.py; skipped, and said so, without PyTorch:
# pip install torch). Prints each round's tokens/s and each contender's
# best; record them in bench/RESULTS.md with the CPU printed here.
set -euo pipefail
cd "$(dirname "$0")/.."
shape=${1:-small}
rounds=${2:-3}
threads=${3:-2}
case $shape in
small) config=configs/bench-small.conf B=4 T=64 L=4 C=256 NH=4 steps=25 ;;
124m) config=configs/gpt2-124m.conf B=4 T=256 L=12 C=768 NH=12 steps=8 ;;
*) echo "usage: bench/run_peers.sh [small|124m] [rounds] [threads]" >&2; exit 2 ;;
esac
warmup=5 # bench/run.sh's
[ -x build/train ] || make all >/dev/null
have_torch=1
python3 -c "import torch" 2>/dev/null || have_torch=0
# PyTorch's bf16 rows on a CPU without bf16 instructions (AMX-BF16 or
# AVX512-BF16) emulate every bf16 product: about 30x slower than its fp32
# on an AVX2 Zen 3 (bench/RESULTS.md), minutes a run. They are skipped
# there, and said so, unless PEERS_BF16=1.
torch_bf16=$have_torch
if ! grep -q -w -E 'amx_bf16|avx512_bf16' /proc/cpuinfo && [ "${PEERS_BF16:-0}" != 1 ]; then torch_bf16=0; fi
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); $(nproc) cores; $threads threads"
shardlab() { # tokens/s of one bench/run.sh run
    CONFIG=$config bench/run.sh $((steps + warmup)) "$threads" --seq_len "$T" --micro_batch "$B" "$@" |
        tee -a "$log" | awk '/tokens\/s/ { print $2 }'
}
pytorch() {
    python3 bench/pytorch_peer.py --layers $L --d_model $C --heads $NH --vocab 50257 --batch $B --seq $T \
        --threads "$threads" --steps "$steps" --warmup $warmup --mode "$1" | tee -a "$log" |
        sed -n 's/.* \([0-9.]*\) tokens\/s.*/\1/p'
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
names=("shardlab (auto GEMMs)" "shardlab --gemm_dtype fp32" "pytorch bf16 weights" "pytorch fp32 + autocast" "pytorch fp32")
declare -A best
for r in $(seq "$rounds"); do
    line="round $r:"
    for i in 0 1 2 3 4; do
        case $i in
        0) v=$(shardlab) ;;
        1) v=$(shardlab --gemm_dtype fp32) ;;
        2) [ $torch_bf16 = 1 ] && v=$(pytorch bf16) || v=- ;;
        3) [ $torch_bf16 = 1 ] && v=$(pytorch autocast) || v=- ;;
        4) [ $have_torch = 1 ] && v=$(pytorch fp32) || v=- ;;
        esac
        line+=" $v |"
        if [ "$v" != - ] && awk -v a="$v" -v b="${best[$i]:-0}" 'BEGIN { exit !(a > b) }'; then best[$i]=$v; fi
    done
    echo "$line"
done
grep -m1 '^GEMMs' "$log" || true
[ $have_torch = 1 ] && grep -m1 '^pytorch' "$log" | sed 's/.*(\(torch [^,]*\).*/\1/' || echo "PyTorch not installed: its rows skipped"
[ $have_torch = 1 ] && [ $torch_bf16 = 0 ] && echo "PyTorch bf16 rows skipped: this CPU has no bf16 instructions (PEERS_BF16=1 runs them)"
echo "$shape at B $B T $T, $threads threads, best tokens/s of $rounds paired rounds:"
for i in 0 1 2 3 4; do printf "  %-28s %s\n" "${names[$i]}" "${best[$i]:--}"; done
