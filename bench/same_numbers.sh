#!/usr/bin/env bash
# Same numbers before and after a change of the code (issue 36: "the
# numbers stay the same"). Builds BASE (a git ref) in a temporary worktree,
# runs the configurations below with its train and with this tree's, and
# compares, case by case:
#   - every step's loss, gradient norm, learning rate and FLOP counts, bit
#     for bit (the JSON log prints them with enough digits to tell);
#   - every rank's memory records (measured and theory, per category), its
#     memory timeline phase by phase, and its comm records (bytes, calls,
#     theory); a phase's theory_total may be added where the base had none
#     (null: a layout its walk did not cover), never changed;
#   - the saved model file and resume state, byte for byte;
#     (not the resident-set rows: the OS's pages move from run to run);
#   - the kernel table's calls per step (printed as a note, not a failure:
#     a refactor may move a conversion pass between kinds).
# Both builds run on this machine, so the bf16 path on oneDNN compares too.
# Usage: bench/same_numbers.sh BASE [BUILD_DIR]   (BUILD_DIR: this tree's build)
# Exit 0 when every case matches; the differing fields are printed.
set -u
base_ref=${1:?usage: bench/same_numbers.sh BASE [BUILD_DIR]}
build=${2:-build}
here=$(pwd)
tmp=$(mktemp -d /tmp/shardlab_same_XXXXXX)
cleanup() {
    git -C "$here" worktree remove --force "$tmp/base" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT

git worktree add --detach "$tmp/base" "$base_ref" >/dev/null 2>&1 || { echo "cannot check out $base_ref"; exit 2; }
echo "building $base_ref in $tmp/base ..."
make -C "$tmp/base" -j2 build/train build/prepare >"$tmp/base_build.log" 2>&1 ||
    { tail -20 "$tmp/base_build.log"; echo "the base does not build"; exit 2; }
[ -x "$build/train" ] || { echo "$build/train: build this tree first (make all)"; exit 2; }
"$build/prepare" --input data/kjv.txt --train "$tmp/train.bin" --val "$tmp/val.bin" >/dev/null || exit 2

mpi=(mpirun --oversubscribe --allow-run-as-root)
common=(--config configs/tiny.conf --threads 1 --steps 4 --val_every 0 --train_data "$tmp/train.bin")
fp32=(--param_dtype fp32 --grad_dtype fp32 --act_dtype fp32 --gemm_dtype fp32)
bf16ref=(--param_dtype bf16 --grad_dtype bf16 --act_dtype bf16 --gemm_dtype bf16 --gemm_kernel reference)
# NAME RANKS ARGS...: the cases; the default dtype (auto) picks this CPU's path
cases=(
    "fp32-1|1|${fp32[*]}"
    "fp32-zero0|2|${fp32[*]} --zero 0"
    "fp32-zero1|2|${fp32[*]} --zero 1"
    "fp32-zero2|2|${fp32[*]} --zero 2"
    "fp32-zero3|2|${fp32[*]} --zero 3"
    "fp32-zero3-nooverlap|2|${fp32[*]} --zero 3 --overlap 0"
    "fp32-zero3-accum2|2|${fp32[*]} --zero 3 --grad_accum 2"
    "fp32-tp2|2|${fp32[*]} --tp 2"
    "fp32-tp2-sp|2|${fp32[*]} --tp 2 --sequence_parallel 1"
    "fp32-pp2|2|${fp32[*]} --pp 2 --schedule 1f1b --grad_accum 2"
    "fp32-pp2-gpipe|2|${fp32[*]} --pp 2 --schedule gpipe --grad_accum 2"
    "fp32-pp2-interleaved|2|${fp32[*]} --pp 2 --schedule interleaved --virtual_stages 2 --grad_accum 2 --n_layer 4"
    "fp32-dp2-tp2|4|${fp32[*]} --tp 2 --zero 3"
    "fp32-cp2|2|${fp32[*]} --cp 2 --attention flash"
    "fp32-recompute|1|${fp32[*]} --recompute full"
    "fp32-adamw8bit-zero3|2|${fp32[*]} --zero 3 --optimizer adamw8bit"
    "fp32-adafactor-zero2|2|${fp32[*]} --zero 2 --optimizer adafactor"
    "bf16ref-1|1|${bf16ref[*]}"
    "bf16ref-zero3|2|${bf16ref[*]} --zero 3"
    "bf16ref-tp2|2|${bf16ref[*]} --tp 2"
    "bf16ref-pp2|2|${bf16ref[*]} --pp 2 --grad_accum 2"
    "bf16ref-cp2|2|${bf16ref[*]} --cp 2 --attention flash"
    "auto-1|1|"
    "auto-zero2|2|--zero 2"
)

run_one() { # BIN OUTDIR NAME RANKS ARGS
    local bin=$1 out=$2 name=$3 ranks=$4 args=$5
    local cmd=("$bin")
    [ "$ranks" -gt 1 ] && cmd=("${mpi[@]}" -np "$ranks" "$bin")
    # shellcheck disable=SC2086
    timeout 300 "${cmd[@]}" "${common[@]}" $args --log_json "$out/$name.json" --save "$out/$name.model" \
        --save_state "$out/$name.state" >"$out/$name.out" 2>&1
}

fingerprint() { # JSON -> the fields that must not move, one per line
    python3 - "$1" <<'PY'
import json, sys
keep = {
    "step": ("loss", "grad_norm", "lr", "flops", "model_flops", "skipped"),
    "memory_setup": None, "memory": None, "memory_phase": None, "comm": None,
}
for line in open(sys.argv[1]):
    r = json.loads(line)
    t = r.get("type")
    if t == "kernel":
        print("kernel", r.get("rank"), r["kind"], r["calls_per_step"])
    elif t == "memory" and r["category"] in ("peak_rss", "startup_peak_rss", "untracked"):
        continue  # the process's resident pages: the allocator's and the OS's, not the code's
    elif t == "memory_phase":
        # theory_total apart: a theory added where the base had none (null) is
        # not a changed number; one the base had must stay (checked below)
        theory = r.pop("theory_total", None)
        print(t, json.dumps(r, sort_keys=True))
        if theory is not None:
            print("theory", r["rank"], r["step"], r["index"], theory)
    elif t == "memory_setup":
        # the names of Psi and N added for the report's panel (psi_model,
        # n_zero, psi_ranks): theory, added where the base had none
        for key in ("psi_model", "n_zero", "psi_ranks"):
            if key in r:
                print("theory setup", key, json.dumps(r.pop(key)))
        print(t, json.dumps(r, sort_keys=True))
    elif t in keep:
        fields = keep[t]
        rec = r if fields is None else {k: r.get(k) for k in fields}
        print(t, json.dumps(rec, sort_keys=True))
PY
}

mkdir -p "$tmp/a" "$tmp/b"
fails=0
for c in "${cases[@]}"; do
    IFS='|' read -r name ranks args <<<"$c"
    run_one "$tmp/base/build/train" "$tmp/a" "$name" "$ranks" "$args"; rc_a=$?
    run_one "$here/$build/train" "$tmp/b" "$name" "$ranks" "$args"; rc_b=$?
    if [ $rc_a -ne 0 ] || [ $rc_b -ne 0 ]; then
        echo "FAIL $name: exit $rc_a (base) / $rc_b (this tree)"
        tail -n 3 "$tmp/a/$name.out" "$tmp/b/$name.out"
        fails=$((fails + 1)); continue
    fi
    fingerprint "$tmp/a/$name.json" >"$tmp/a/$name.fp"
    fingerprint "$tmp/b/$name.json" >"$tmp/b/$name.fp"
    bad=""
    if ! diff <(grep -v '^kernel\|^theory' "$tmp/a/$name.fp") <(grep -v '^kernel\|^theory' "$tmp/b/$name.fp") \
            >"$tmp/$name.diff"; then
        bad="log"
    fi
    # every phase theory of the base's kept; this tree may add theory where the base had none
    if [ -n "$(comm -23 <(grep '^theory' "$tmp/a/$name.fp" | sort) <(grep '^theory' "$tmp/b/$name.fp" | sort))" ]; then
        bad="$bad theory"
    fi
    # phases given a theory (the setup's added names of Psi and N are not phases)
    added=$(( $(grep -c '^theory [0-9]' "$tmp/b/$name.fp") - $(grep -c '^theory [0-9]' "$tmp/a/$name.fp") ))
    for f in model state; do cmp -s "$tmp/a/$name.$f" "$tmp/b/$name.$f" || bad="$bad $f"; done
    if [ -n "$bad" ]; then
        echo "FAIL $name: differs in $bad"; head -8 "$tmp/$name.diff"
        fails=$((fails + 1))
    else
        echo "same $name$([ "$added" -gt 0 ] && echo " (theory added to $added phases)")"
    fi
    diff <(grep '^kernel' "$tmp/a/$name.fp") <(grep '^kernel' "$tmp/b/$name.fp") >/dev/null ||
        echo "     note: kernel calls per step differ: $(diff <(grep '^kernel' "$tmp/a/$name.fp") \
            <(grep '^kernel' "$tmp/b/$name.fp") | grep '^[<>]' | head -4 | tr '\n' ';')"
done
echo "$(( ${#cases[@]} - fails )) of ${#cases[@]} cases the same as $base_ref"
[ $fails -eq 0 ]
