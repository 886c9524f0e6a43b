#!/usr/bin/env bash
# The update rules beside AdamW (sgd8bit, lion, lion8bit, adafactor) on the
# tp and pp grids, end to end: build/train on
#   tp 2 (2 ranks), pp 2 (2 ranks, 1F1B), dp 2 x tp 2 at ZeRO-1 and
#   dp 2 x pp 2 at ZeRO-1 (4 ranks; the 8-bit rules refuse this one, as
#   the unit tests check: their blocks would cut the tied wte's copies
#   differently), and for Adafactor dp 2 x tp 2 with sequence parallelism
#   at ZeRO-3 (tests/mpi/test_pipeline.c has its tied copies bitwise equal)
# logs the loss of one process reading the same micro-batches at each of
# 10 steps (fp32 params, grads, activations) within the bounds of
# tests/mpi/test_zero.c: 1e-2 for the 8-bit rules and Lion (quantization
# noise, and Lion's sign, which flips where the interpolation is ~0 and
# moves that element by a whole lr), 1e-4 for Adafactor; and every rank's
# memory table says its optimizer state (the rule's own buffers, named in
# the log) equals its own theory to the byte, with no table row saying NO
# (the comm table's included: Adafactor's tp and dp sums).
# Usage: tests/mpi/optim_grid.sh BUILD_DIR
set -u
. "$(dirname "$0")/env.sh" # build, tmp, mpi, $tmp/train.bin and val.bin
# min_8bit_size 1024: the test model's matrices quantize (its vectors stay fp32);
# adafactor_eps 1e-12: see tests/mpi/test_zero.c's check_adafactor
args=(--config configs/tiny.conf --threads 1 --steps 10 --n_layer 4 --param_dtype fp32 --grad_dtype fp32
      --act_dtype fp32 --val_every 0 --weight_decay 0.1 --train_data "$tmp/train.bin" --val_data "$tmp/val.bin")
fails=0
rule_args() { # the rule's own keys and an lr it moves with in 10 steps
    case $1 in
    sgd8bit) echo "--optimizer sgd8bit --lr 0.3 --min_8bit_size 1024" ;;
    lion) echo "--optimizer lion --lr 1e-3" ;;
    lion8bit) echo "--optimizer lion8bit --lr 1e-3 --min_8bit_size 1024" ;;
    adafactor) echo "--optimizer adafactor --lr 3e-3 --adafactor_eps 1e-12" ;;
    esac
}
rule_tol() { case $1 in adafactor) echo 1e-4 ;; *) echo 1e-2 ;; esac; }
# the optimizer state's buffer each rule allocates (the memory log's names)
rule_buffer() {
    case $1 in
    sgd8bit) echo "sgd momentum (8-bit codes" ;;
    lion) echo "lion m (fp32" ;;
    lion8bit) echo "lion m (8-bit codes" ;;
    adafactor) echo "adafactor R, C" ;;
    esac
}
check() { # rule, layout name, ranks, grad_accum of the reference, args...
    local rule=$1 name=$2 n=$3 ref_accum=$4
    shift 4
    local ra
    read -r -a ra <<<"$(rule_args "$rule")"
    if ! timeout 300 "$build/train" "${args[@]}" "${ra[@]}" --grad_accum "$ref_accum" --log_json "$tmp/ref.json" \
        >"$tmp/ref.out" 2>&1; then
        echo "!! $rule: reference run failed"; tail -5 "$tmp/ref.out"; fails=$((fails + 1)); return
    fi
    if ! timeout 300 "${mpi[@]}" -np "$n" "$build/train" "${args[@]}" "${ra[@]}" "$@" --log_json "$tmp/run.json" \
        >"$tmp/run.out" 2>&1; then
        echo "!! $rule on $name failed:"; tail -5 "$tmp/run.out"; fails=$((fails + 1)); return
    fi
    python3 - "$tmp/ref.json" "$tmp/run.json" "$rule on $name" "$(rule_tol "$rule")" <<'PY' || fails=$((fails + 1))
import json, sys
def losses(p):
    return [json.loads(l)["loss"] for l in open(p) if '"type":"step"' in l]
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[4])
worst = max(abs(x - y) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
ok = len(a) == 10 and worst <= tol and a[-1] < a[0] - 0.1
print(f"{sys.argv[3]}: loss {a[0]:.6f} -> {a[-1]:.6f}, max |loss diff| vs 1 process {worst:.2e} "
      f"(allowed {tol:g}): " + ("ok" if ok else "FAILED"))
sys.exit(0 if ok else 1)
PY
    if grep -qE "\bNO\b" "$tmp/run.out" || ! grep -q "^  model states .*measured == theory to the byte: yes" "$tmp/run.out" ||
       ! grep -q "^  optimizer    $(rule_buffer "$rule")" "$tmp/run.out"; then
        echo "!! $rule on $name: the optimizer state or a table differs from its theory:"
        grep -E "\bNO\b|^  optimizer |model states" "$tmp/run.out"; fails=$((fails + 1))
    fi
}
for rule in sgd8bit lion lion8bit adafactor; do
    check "$rule" "tp 2" 2 1 --tp 2
    check "$rule" "pp 2" 2 3 --pp 2 --grad_accum 3
    check "$rule" "dp 2 x tp 2, ZeRO-1" 4 2 --tp 2 --zero 1
    case $rule in *8bit) continue ;; esac
    check "$rule" "dp 2 x pp 2, ZeRO-1" 4 6 --pp 2 --grad_accum 3 --zero 1
done
# Adafactor's sums over tp with sequence parallelism and ZeRO-3's shards
check adafactor "dp 2 x tp 2 + sequence parallel, ZeRO-3" 4 2 --tp 2 --sequence_parallel 1 --zero 3
[ "$fails" -eq 0 ] && echo "optimizers on tp and pp: passed" || { echo "optimizers on tp and pp: $fails failed"; exit 1; }
