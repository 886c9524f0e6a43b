#!/usr/bin/env bash
# The trainer's two GEMM paths, end to end, on whatever CPU runs the tests:
#   fp32: OpenBLAS's sgemm on fp32 params, grads and activations;
#   bf16: bf16 operands with fp32 accumulation on the bf16 data path (bf16
#         params, grads and saved activations), on oneDNN where it can run
#         bf16 products, else on the project's reference bf16 GEMM
#         (--gemm_kernel reference: an AVX2 CPU, or DNNL_MAX_CPU_ISA=AVX2).
# For each path, on tiny.conf for 10 steps:
#  1. dp 2 at ZeRO-0, 1, 2 and 3 log the same losses bit for bit (the stage
#     moves where states live, not what is summed), and within TOL of one
#     process reading the same micro-batches (grad_accum 2);
#  2. tp 2, pp 2 (1F1B) and cp 2 (flash attention) log one process's losses
#     within TOL at every step;
#  3. every one of those runs' tables says each rank's memory, FLOPs and
#     traffic equal its own theory (no row says NO);
#  4. save and resume at dp 2 x ZeRO-3: 2 steps, then 2 resumed, save the
#     same model file byte for byte as 4 in one go (tiny's warmup spans the
#     4 steps, so --steps 2 and 4 give them the same learning rates).
# TOL: fp32 1e-5 (sums in another order); bf16 2e-3: its gradients and
# saved activations are rounded to 8 bits of mantissa at points whose sums
# run in another order on another layout (measured on tiny.conf, AMD Zen 4
# with oneDNN: at most 1.3e-4 over 10 steps, while the loss falls by 0.65).
# Writes the one line naming the paths and kernels it ran to
# BUILD_DIR/tests/gemm_paths.txt, which `make test` prints last.
# Usage: tests/mpi/gemm_paths.sh BUILD_DIR
set -u
. "$(dirname "$0")/env.sh" # build, tmp, mpi, $tmp/train.bin and val.bin
base=(--config configs/tiny.conf --threads 1 --steps 10 --val_every 0 --train_data "$tmp/train.bin")
fails=0
check() { # name, condition result
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

# The bf16 path's kernel: oneDNN where this CPU (and DNNL_MAX_CPU_ISA) lets
# it run bf16 products, else the reference; the trainer's refusal says which.
"$build/train" "${base[@]}" --steps 0 --gemm_kernel onednn >"$tmp/probe.out" 2>&1
if grep -q "oneDNN cannot run its bf16 GEMMs here" "$tmp/probe.out"; then bf16_kernel=reference; else bf16_kernel=onednn; fi
fp32_args=(--param_dtype fp32 --grad_dtype fp32 --act_dtype fp32 --gemm_dtype fp32)
bf16_args=(--param_dtype bf16 --grad_dtype bf16 --act_dtype bf16 --gemm_dtype bf16 --gemm_kernel "$bf16_kernel")

# run NAME RANKS ARGS...: one run of the path's args, its log in $tmp/NAME.json
run() {
    local name=$1 ranks=$2
    shift 2
    local cmd=("$build/train")
    [ "$ranks" -gt 1 ] && cmd=("${mpi[@]}" -np "$ranks" "$build/train")
    if ! timeout 300 "${cmd[@]}" "${base[@]}" "${path_args[@]}" "$@" --log_json "$tmp/$name.json" \
            >"$tmp/$name.out" 2>&1; then
        echo "!! $path: run $name failed:"; tail -5 "$tmp/$name.out"
        fails=$((fails + 1))
        return 1
    fi
}

# losses A B TOL [exact]: every step's loss of B within TOL of A's (exact:
# the same values), and the run learned
losses() {
    python3 - "$tmp/$1.json" "$tmp/$2.json" "$3" "${4:-}" <<'PY'
import json, sys
def losses(p):
    return [json.loads(l)["loss"] for l in open(p) if '"type":"step"' in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
tol, exact = float(sys.argv[3]), sys.argv[4] == "exact"
worst = max(abs(x - y) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print(f"    {len(b)} steps: loss {b[0]:.5f} -> {b[-1]:.5f}, max |diff| {worst:.2e}")
ok = len(a) == 10 and (a == b if exact else worst <= tol) and a[-1] < a[0] - 0.3
sys.exit(0 if ok else 1)
PY
}

# tables NAME: the run printed its tables (the model states measured ==
# theory row among them), and no row of them says NO
# (else it prints the rows that say NO)
tables() {
    grep -q "model states; measured == theory to the byte: yes" "$tmp/$1.out" && ! grep -q "\bNO\b" "$tmp/$1.out" &&
        return 0
    grep "\bNO\b" "$tmp/$1.out" | head -5 | sed 's/^/    /'
    return 1
}

covered=()
for path in fp32 bf16; do
    if [ $path = fp32 ]; then path_args=("${fp32_args[@]}") tol=1e-5; else path_args=("${bf16_args[@]}") tol=2e-3; fi
    run one 1 && run one_ga2 1 --grad_accum 2 && run one_flash 1 --attention flash || continue
    covered+=("$path: $(sed -n 's/^GEMMs: \(.*\)$/\1/p' "$tmp/one.out")")
    for z in 0 1 2 3; do
        run "z$z" 2 --zero "$z" || continue
        if [ "$z" = 0 ]; then
            losses one_ga2 z0 "$tol"; check "$path: dp 2 ZeRO-0 = one process (grad_accum 2) within $tol" $?
        else
            losses z0 "z$z" 0 exact; check "$path: dp 2 ZeRO-$z = ZeRO-0 bit for bit" $?
        fi
        tables "z$z"; check "$path: dp 2 ZeRO-$z tables: every rank = its own theory" $?
    done
    for layout in "tp 2" "pp 2" "cp 2"; do
        name=${layout// /}
        ref=one
        extra=()
        [ "$name" = cp2 ] && ref=one_flash extra=(--attention flash)
        run "$name" 2 --${layout% *} ${layout#* } "${extra[@]}" || continue
        losses "$ref" "$name" "$tol"; check "$path: $layout = one process within $tol" $?
        tables "$name"; check "$path: $layout tables: every rank = its own theory" $?
    done
    # save and resume at dp 2 x ZeRO-3
    if run whole 2 --zero 3 --steps 4 --save "$tmp/whole.bin" &&
       run first 2 --zero 3 --steps 2 --save_state "$tmp/half.state" &&
       run rest 2 --zero 3 --steps 4 --resume "$tmp/half.state" --save "$tmp/resumed.bin"; then
        cmp -s "$tmp/whole.bin" "$tmp/resumed.bin"
        check "$path: ZeRO-3 on dp 2, 2 steps + 2 resumed = 4 in one go (model files byte-equal)" $?
    fi
done
line=$(IFS=';'; echo "${covered[*]}")
field() { grep -m1 "^$1[[:space:]]*:" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'; }
bf16_flags=$(grep -m1 '^flags' /proc/cpuinfo | grep -o -w -E 'avx512_bf16|amx_bf16' | tr '\n' ' ' | sed 's/ $//')
cpu="$(field 'model name'), family $(field 'cpu family') model $(field model), ${bf16_flags:-no bf16 instructions}"
mkdir -p "$build/tests"
echo "GEMM paths covered on this CPU ($cpu; DNNL_MAX_CPU_ISA=${DNNL_MAX_CPU_ISA:-unset}): ${line//;/; }" \
    >"$build/tests/gemm_paths.txt"
cat "$build/tests/gemm_paths.txt"
[ ${#covered[@]} -eq 2 ] || { echo "FAIL: not every GEMM path ran"; fails=$((fails + 1)); }
[ $fails -eq 0 ] || { echo "gemm_paths: $fails failed"; exit 1; }
echo "gemm_paths: all passed"
