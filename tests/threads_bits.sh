#!/usr/bin/env bash
# A run's numbers do not depend on its team (docs/THREADS.md): the same
# training on a fixed team of 2 threads, of 3, on 2 threads whose team
# follows the load while another process takes a core for the first
# seconds and then leaves (the team shrinks and grows back mid-run), and on
# more threads than the machine has cores (the team starts smaller) writes
# byte-equal model files. (One thread runs one GEMM per call instead of
# the team's blocks: its last bits may differ, and are not compared.) Two
# sets of runs: the fp32 GEMMs (OpenBLAS in fixed blocks) on any CPU, then
# the bf16 GEMMs: oneDNN's (fixed blocks of one-thread primitives) where the
# CPU runs them, else (no avx512_bf16/amx_bf16, or DNNL_MAX_CPU_ISA below
# avx512_core_bf16) the reference bf16 GEMM's (--gemm_kernel reference:
# sgemm in the same fixed blocks on rounded operands).
# Usage: tests/threads_bits.sh BUILD_DIR (build or build-san)
set -u
build=${1:-build}
train="$build/train"
tmp=$(mktemp -d /tmp/shardlab_threads_XXXXXX)
spinner=
cleanup() { [ -n "$spinner" ] && kill "$spinner" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0
check() { # name, condition result
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
"$build/prepare" --input data/kjv.txt --train "$tmp/train.bin" --val "$tmp/val.bin" >/dev/null || exit 1
# d_model 128 and 8 sequences: products with several blocks each; 60 steps
# with clipping at work (the norm's sum of squares on every team)
base=(--config configs/tiny.conf --train_data "$tmp/train.bin" --val_data "" --peak_flops 1e9
      --d_model 128 --micro_batch 8 --steps 60 --grad_clip 0.5)

run_set() { # the GEMMs' dtype (names the checks), then the GEMMs' flags: every run of the set
    local d=$1
    shift
    local args=("${base[@]}" "$@")
    "$train" "${args[@]}" --threads 2 --threads_adapt 0 --save "$tmp/$d-ref.bin" >"$tmp/$d-ref.log" 2>&1
    check "$d: 2 threads, fixed team: trained" $?
    "$train" "${args[@]}" --threads 3 --threads_adapt 0 --save "$tmp/$d-three.bin" >"$tmp/$d-three.log" 2>&1
    check "$d: 3 threads, fixed team: trained" $?
    cmp -s "$tmp/$d-ref.bin" "$tmp/$d-three.bin"
    check "$d: 3 threads: the model file equals 2 threads', byte for byte" $?
    local more=$(( $(nproc) + 2 ))
    "$train" "${args[@]}" --threads "$more" --save "$tmp/$d-more.bin" >"$tmp/$d-more.log" 2>&1
    check "$d: $more threads on $(nproc) cores: trained" $?
    grep -q "the run follows the free cores between steps, starting on [1-9][0-9]* thread" "$tmp/$d-more.log"
    check "$d: $more threads on $(nproc) cores: the team starts on what fits, and says so" $?
    cmp -s "$tmp/$d-ref.bin" "$tmp/$d-more.bin"
    check "$d: $more threads on $(nproc) cores: the model file equals 2 threads', byte for byte" $?

    # another process on one core for the run's first seconds (bounded here)
    timeout 4 sh -c 'while :; do :; done' &
    spinner=$!
    "$train" "${args[@]}" --threads 2 --save "$tmp/$d-two.bin" --log_json "$tmp/$d-two.json" >"$tmp/$d-two.log" 2>&1
    check "$d: 2 threads following the load: trained" $?
    kill "$spinner" 2>/dev/null
    wait "$spinner" 2>/dev/null
    spinner=
    cmp -s "$tmp/$d-ref.bin" "$tmp/$d-two.bin"
    check "$d: 2 threads following the load: the model file equals the fixed team's, byte for byte" $?
    grep -q 'team: follows the free cores between steps, 1 to 2 threads' "$tmp/$d-two.log"
    check "$d: the banner says the team follows the load" $?
    # the teams the steps ran on (how the load went is the machine's: shown, not asserted)
    local teams
    teams=$(grep -o '"threads":[0-9]*' "$tmp/$d-two.json" | tail -n +2 | cut -d: -f2 | uniq -c | awk '{ printf "%s%d step(s) on %d", sep, $1, $2; sep = ", " }')
    echo "     $d: 2-thread run's teams, in order: $teams"
    grep -h '^rank 0: team' "$tmp/$d-two.log" | sed 's/^/     /'
}

run_set fp32 --gemm_dtype fp32
grep -q 'GEMMs: fp32 operands' "$tmp/fp32-ref.log"
check "fp32: the GEMMs ran in fp32 (the banner)" $?
# bf16: on oneDNN where it runs bf16 here, else on the reference (the
# refusal names why oneDNN cannot)
if "$train" "${base[@]}" --gemm_dtype bf16 --steps 1 >"$tmp/bf16-probe.log" 2>&1; then
    run_set bf16 --gemm_dtype bf16
    grep -q 'oneDNN' "$tmp/bf16-ref.log"
    check "bf16: the GEMMs ran on oneDNN (the banner)" $?
else
    echo "     bf16 on the reference: $(grep -o -- 'oneDNN cannot run its bf16 GEMMs here: [^(]*' "$tmp/bf16-probe.log" | head -1)"
    run_set bf16 --gemm_dtype bf16 --gemm_kernel reference
    grep -q 'kernel reference bf16 GEMM' "$tmp/bf16-ref.log"
    check "bf16: the GEMMs ran on the reference bf16 GEMM (the banner)" $?
fi

"$train" "${base[@]}" --gemm_dtype fp32 --threads 2 --threads_adapt 0 --steps 1 >"$tmp/fixed.log" 2>&1
grep -q 'team: 2 threads, fixed (--threads_adapt 0)' "$tmp/fixed.log"
check "--threads_adapt 0: the banner says the team is fixed and why" $?

if [ "$fails" -ne 0 ]; then
    echo "threads_bits.sh: $fails check(s) failed"
    exit 1
fi
echo "threads_bits.sh: all checks passed"
