#!/usr/bin/env bash
# The planner's LLaMA formulas, measured (issue 38, item 5): a toy LLaMA
# (GQA: 6 query heads on 2 key/value heads; SwiGLU; an untied head) on
# dp x cp x tp x pp = 1 x 2 x 2 x 2, 8 ranks oversubscribed, at ZeRO-1
# with fp32 activations and ZeRO-3 with bf16 ones (the default; the ring's
# K and V then travel in bf16), ZeRO over the dp x cp = 2 ranks that hold
# the same weights. For
# each, `build/plan --ranks --json` with the run's own flags gives every
# rank's model states, activations, communication buffers, scratch and
# bytes per step by group and collective, and the run's --log_json
# records measure them: every one equal to the byte, on every rank;
# every group the planner says carries traffic (dp, tp, pp, cp) measured
# by the run; and the ranks' values not all alike (the stages differ: the
# check sees each rank's own). Then a world that tp x cp x pp does not
# divide, and a run the trainer refuses (LLaMA's sequence parallelism
# with bf16 activations), are refused by --ranks with the trainer's reason,
# as is --ranks without --devices (the world it describes).
# Usage: tests/mpi/plan_ranks.sh BUILD_DIR
set -u
. "$(dirname "$0")/env.sh" # build, tmp, mpi, $tmp/train.bin and val.bin
# llama-tiny at 1 x 2 x 2 x 2: cp's ring is flash attention
model=(--config configs/llama-tiny.conf --micro_batch 2 --grad_accum 2 --tp 2 --cp 2 --pp 2 --attention flash
       --sample_tokens 0 --val_every 0 --warmup_steps 0 --threads 1)
fails=0
check() { # name, condition result
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

for zero in 1 3; do
    acts=fp32; [ "$zero" = 3 ] && acts=bf16
    name="llama 1x2x2x2 ZeRO-$zero, $acts activations"
    if ! timeout 300 "${mpi[@]}" -np 8 "$build/train" "${model[@]}" --zero "$zero" --act_dtype "$acts" --steps 2 \
            --train_data "$tmp/train.bin" --log_json "$tmp/z$zero.json" >"$tmp/z$zero.out" 2>&1; then
        echo "FAIL $name: the run failed"; tail -5 "$tmp/z$zero.out"; fails=$((fails + 1)); continue
    fi
    if ! "$build/plan" "${model[@]}" --zero "$zero" --act_dtype "$acts" --devices 8 --ranks --json >"$tmp/plan$zero.json" \
            2>&1; then
        echo "FAIL $name: build/plan --ranks failed"; cat "$tmp/plan$zero.json"; fails=$((fails + 1)); continue
    fi
    python3 - "$tmp/z$zero.json" "$tmp/plan$zero.json" <<'PY'
import json, sys
run = [json.loads(l) for l in open(sys.argv[1])]
plan = [json.loads(l) for l in open(sys.argv[2])]
cats = ("params", "master", "grads", "optimizer", "activations", "comm", "scratch")
measured = {(r["rank"], r["category"]): r["measured_bytes"] for r in run
            if r["type"] == "memory" and r["category"] in cats}
planned = {(r["rank"], r["category"]): r["theory_bytes"] for r in plan if r["type"] == "memory"}
bad = [(k, measured.get(k), v) for k, v in planned.items() if measured.get(k) != v]
# traffic: every (rank, group, kind) the run recorded, and every one the plan says is non-zero
sent = {(r["rank"], r["group"], r["kind"]): r["bytes_per_step"] for r in run if r["type"] == "comm"}
said = {(r["rank"], r["group"], r["kind"]): r["theory_bytes_per_step"] for r in plan if r["type"] == "comm"}
bad += [(k, sent.get(k, 0), v) for k, v in said.items() if sent.get(k, 0) != v]
bad += [(k, v, said.get(k)) for k, v in sent.items() if k[2] != "scalars" and said.get(k) != v]
groups = {k[1] for k, v in said.items() if v > 0}
ranks = {k[0] for k in planned}
differs = len({tuple(planned[(r, c)] for c in cats) for r in ranks}) > 1
for k, m, p in bad[:8]:
    print(f"    rank {k[0]} {' '.join(k[1:])}: measured {m}, planned {p}")
print(f"    {len(planned)} memory and {len(said)} traffic numbers on {len(ranks)} ranks; groups with traffic: "
      f"{' '.join(sorted(groups))}")
ok = not bad and len(ranks) == 8 and len(planned) == 8 * len(cats) and groups >= {"dp", "tp", "pp", "cp"} and differs
sys.exit(0 if ok else 1)
PY
    check "$name: every rank's measured memory and traffic = build/plan --ranks" $?
done

"$build/plan" "${model[@]}" --ranks >"$tmp/nodevices.out" 2>&1
[ $? -ne 0 ] && grep -q "plan: --ranks needs --devices N" "$tmp/nodevices.out"
check "plan --ranks without --devices is refused" $?
"$build/plan" "${model[@]}" --devices 12 --ranks >"$tmp/odd.out" 2>&1
[ $? -ne 0 ] && grep -q "multiple of tp x cp x pp = 2 x 2 x 2; got 12" "$tmp/odd.out"
check "plan --ranks refuses 12 ranks for tp x cp x pp = 8" $?
"$build/plan" "${model[@]}" --sequence_parallel 1 --act_dtype bf16 --devices 8 --ranks >"$tmp/sp.out" 2>&1
[ $? -ne 0 ] && grep -q "the trainer would refuse this run: arch = llama: .*sequence_parallel with bf16" "$tmp/sp.out"
check "plan --ranks refuses what the trainer refuses, with its reason" $?
[ "$fails" -eq 0 ] || { echo "plan_ranks: $fails failed"; exit 1; }
echo "plan_ranks: all passed"
