#!/usr/bin/env bash
# Every per-rank number is that rank's own: its JSON memory records carry its own theory (issue 37,
# item 1: they carried rank 0's, so build/report drew mismatches that did
# not exist). On layouts whose ranks hold different parts or different
# optimizer blocks:
#   pp 2 on 2 ranks (the stages differ), pp 3 on 3 ranks (tiny with 3
#   layers), adamw8bit at ZeRO-3 on 3 ranks and sgd8bit at ZeRO-2 on 2
#   ranks (the 8-bit blocks differ by rank), adafactor at ZeRO-2 on 3 ranks;
# each run's params, master, grads, optimizer, activations, comm and
# scratch records equal their theory on every rank, and rank 1's theory
# differs from rank 0's somewhere (so the check sees per-rank values).
# The memory table's heading names Psi and N as what they are (item 3: it
# called rank 0's share Psi and the world N): at pp 2 and at tp 2 the
# model's 34,688 parameters beside rank 0's part, and N = dp. --explain's
# shard map says what each stage holds as the run holds it, on 2 and 3
# ranks: ZeRO-0 shards nothing (item 5: it said rank r owns slice r), and
# --overlap's second gathered layer and second bucket are named where the
# run keeps them (item 4: it said one layer and one bucket). The
# pipeline's memory timeline (item 2), 1F1B at pp 2 on 2 ranks and pp 3
# on 3, 2 pp micro-batches: its phases carry the schedule's micro-batches,
# numbered from 0 as the trace's are (pp 2's stage 0: F0 F1 B0 F2 B1 F3 B2
# B3, where it read F1 F1 B1 F2 B2 F3 B3 B3), and each rank's activations
# at its peak phase equal its table's theory (1F1B keeps p - s
# micro-batches in flight on stage s: it counted one). Padding
# (item 6) in whole elements: at N = 3 each state row's bytes per element
# times the elements it names equal its theory column to the byte (it
# showed rounded averages: "+ padding 3"). --explain 2 (deliver 1): at
# ZeRO-3 on 2 and 3 ranks, every phase's comm and total bytes in its
# table equal what the run then measured at that phase (the JSON
# memory_phase records), and each layer's rows name its all_gather,
# release and, in backward, its reduce_scatter.
# Usage: tests/mpi/own_numbers.sh BUILD_DIR
set -u
. "$(dirname "$0")/env.sh" # build, tmp, mpi, $tmp/train.bin and val.bin
base=(--config configs/tiny.conf --threads 1 --steps 2 --val_every 0 --train_data "$tmp/train.bin")
fails=0
# case NAME RANKS ARGS...
case_() {
    local name=$1 ranks=$2
    shift 2
    if ! timeout 120 "${mpi[@]}" -np "$ranks" "$build/train" "${base[@]}" "$@" --log_json "$tmp/$name.json" \
            >"$tmp/$name.out" 2>&1; then
        echo "FAIL $name: the run failed"; tail -3 "$tmp/$name.out"; fails=$((fails + 1)); return
    fi
    if python3 - "$tmp/$name.json" "$ranks" "$name" <<'PY'; then :; else fails=$((fails + 1)); fi
import json, sys
path, ranks, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cats = ("params", "master", "grads", "optimizer", "activations", "comm", "scratch")
rows = [json.loads(l) for l in open(path) if '"type":"memory"' in l]
rows = [r for r in rows if r["category"] in cats]
bad = [r for r in rows if r["measured_bytes"] != r["theory_bytes"]]
theory = {(r["rank"], r["category"]): r["theory_bytes"] for r in rows}
differs = any(theory.get((1, c)) != theory.get((0, c)) for c in cats)
complete = len(rows) == ranks * len(cats)
ok = complete and not bad and differs
print(("ok  " if ok else "FAIL") + f" {name}: {len(rows)} records on {ranks} ranks, each rank's theory its own"
      + ("" if complete else ", records missing") + ("" if differs else ", rank 1's theory equal to rank 0's everywhere")
      + "".join(f"\n    rank {r['rank']} {r['category']}: measured {r['measured_bytes']}, theory {r['theory_bytes']}"
                for r in bad))
sys.exit(0 if ok else 1)
PY
}
case_ pp2 2 --pp 2
case_ pp3 3 --pp 3 --n_layer 3
case_ adamw8bit_z3 3 --zero 3 --optimizer adamw8bit --min_8bit_size 1024
case_ sgd8bit_z2 2 --zero 2 --optimizer sgd8bit --min_8bit_size 1024
case_ adafactor_z2 3 --zero 2 --optimizer adafactor
# heading NAME PATTERN: the run's memory heading matches
heading() {
    if grep -q "^memory per rank, after allocation (bytes): $2" "$tmp/$1.out"; then
        echo "ok   $1: the heading names Psi and N"
    else
        echo "FAIL $1: $(grep '^memory per rank' "$tmp/$1.out" | head -1)"; fails=$((fails + 1))
    fi
}
heading pp2 "ZeRO-0 over N = 1 rank (dp), Psi = 34688 parameters in the model, rank 0 holds Psi_r = 21920 of them (its pp stage);"
heading adamw8bit_z3 "ZeRO-3 over N = 3 ranks (dp), Psi = 34688;"
timeout 120 "${mpi[@]}" -np 2 "$build/train" "${base[@]}" --tp 2 >"$tmp/tp2.out" 2>&1
heading tp2 "ZeRO-0 over N = 1 rank (dp), Psi = 34688 parameters in the model, rank 0 holds Psi_r = 18080 of them (its tp slice);"
# explain NAME PATTERN NOT-PATTERN ARGS...: --explain on 2 and on 3 ranks
# says PATTERN and not NOT-PATTERN
explain() {
    local name=$1 want=$2 not=$3
    shift 3
    for np in 2 3; do
        timeout 120 "${mpi[@]}" -np $np "$build/train" "${base[@]}" --steps 0 --explain 1 "$@" >"$tmp/$name.out" 2>&1
        if grep -q "$want" "$tmp/$name.out" && ! grep -q "$not" "$tmp/$name.out"; then
            echo "ok   --explain $* on $np ranks: \"$want\""
        else
            echo "FAIL --explain $* on $np ranks:"; grep -A3 "^shard map\|each rank holds" "$tmp/$name.out"
            fails=$((fails + 1))
        fi
    done
}
explain z0 "Nothing is sharded at ZeRO-0: every rank holds and updates" "Rank r owns slice r" --zero 0
explain z2 "plus two units' gradients in full (two reduce-scatter buckets, one in flight)" "one unit's gradient" --zero 2
explain z2_blocking "plus one unit's gradient in full (the reduce-scatter bucket)" "two units' gradients" --zero 2 --overlap 0
explain z3 "head and two layers (the one in use and the next, prefetched)" "head and one layer" --zero 3
explain z3_blocking "head and one layer in full while they are used, and one unit's gradient" "head and two layers" --zero 3 --overlap 0
# padding: each row's B x elements = its theory, at N = 3 (tiny's 34,688
# parameters: 4 elements of padding, 11,564 a shard) and with wte's padded
# rows (V = 200: 56 rows of 32)
timeout 120 "${mpi[@]}" -np 3 "$build/train" "${base[@]}" --zero 1 --vocab_size 200 >"$tmp/z1_v200.out" 2>&1
for name in adamw8bit_z3 z1_v200; do
    if python3 - "$tmp/$name.out" "$name" <<'PY'; then :; else fails=$((fails + 1)); fi
import re, sys
text = open(sys.argv[1]).read()
table = text[text.index("memory per rank, after allocation"):]
rows = re.findall(r"^  (\w+) +(?:\d+ +){3}(\d+)  .*: (\d+) B x (\d+) elements", table, re.M)
bad = [r for r in rows if int(r[1]) != int(r[2]) * int(r[3])]
heading = re.search(r"padding (\d+) elements .*?\((\d+) \+ (\d+)\) / 3 = (\d+) elements", table)
ok = len(rows) >= 3 and not bad and heading and int(heading.group(4)) * 3 == int(heading.group(2)) + int(heading.group(3))
print(("ok  " if ok else "FAIL") + f" {sys.argv[2]}: padding in whole elements, {len(rows)} rows of B x elements = theory"
      + "".join(f"\n    {r}" for r in bad))
sys.exit(0 if ok else 1)
PY
done
# --explain 2: the unit-life table against the measured phases
for np in 2 3; do
timeout 120 "${mpi[@]}" -np $np "$build/train" "${base[@]}" --zero 3 --explain 2 --log_json "$tmp/life.json" \
    >"$tmp/life.out" 2>&1
if python3 - "$tmp/life.out" "$tmp/life.json" $np <<'PY'; then :; else fails=$((fails + 1)); fi
import json, re, sys
text = open(sys.argv[1]).read()
table = text[text.index("a unit's life, one step on rank 0"):].split("\n  peak ")[0]
rows = re.findall(r"^  (micro-batch \d+ (?:forward|backward) (?:embedding|head|layer \d+)|optimizer: [a-z -]+?)"
                  r" +(\d+) +(\d+) +(\d+)  (.*)$", table, re.M)
last = max(json.loads(l)["step"] for l in open(sys.argv[2]) if '"memory_phase"' in l)
measured = {r["phase"]: r for r in map(json.loads, open(sys.argv[2])) if r.get("type") == "memory_phase"
            and r["rank"] == 0 and r["step"] == last}
bad = [n for n, comm, act, total, life in rows
       if n not in measured or measured[n]["bytes"]["comm"] != int(comm) or measured[n]["total"] != int(total)]
lives = {n: life for n, *_, life in rows}
named = all("all_gather" in lives.get("micro-batch 0 %s layer %d" % (k, l), "") and
            "release layer %d" % l in lives.get("micro-batch 0 %s layer %d" % (k, l), "") and
            (k == "forward" or "reduce_scatter layer %d" % l in lives["micro-batch 0 %s layer %d" % (k, l)])
            for k in ("forward", "backward") for l in (0, 1))
ok = len(rows) >= 10 and not bad and named
print(("ok  " if ok else "FAIL") + f" --explain 2 on {sys.argv[3]} ranks: {len(rows)} phases, comm and total = the run's measured phases, "
      "each layer's all_gather, release and reduce_scatter named" + "".join(f"\n    {b}" for b in bad[:5]))
sys.exit(0 if ok else 1)
PY
done
# the pipeline's timeline: its order is the trace's, its activations peak
# at each rank's theory
# pp 2 (tiny's 2 layers) on 2 ranks and pp 3 (3 layers) on 3, 1F1B, 2 pp micro-batches a stage
for pp in 2 3; do
m=$((2 * pp))
timeout 120 "${mpi[@]}" -np $pp "$build/train" "${base[@]}" --pp $pp --n_layer $pp --grad_accum $m --steps 1 \
    --log_json "$tmp/pp_timeline.json" --trace "$tmp/pp_timeline.trace" >"$tmp/pp_timeline.out" 2>&1
if python3 - "$tmp/pp_timeline.json" "$tmp/pp_timeline.trace" $pp $m <<'PY'; then :; else fails=$((fails + 1)); fi
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
phases = [r for r in recs if r.get("type") == "memory_phase"]
theory = {r["rank"]: r["theory_bytes"] for r in recs if r.get("type") == "memory" and r["category"] == "activations"}
events = json.load(open(sys.argv[2]))
events = events["traceEvents"] if isinstance(events, dict) else events
ok = True
pp, m = int(sys.argv[3]), int(sys.argv[4])
for rank in range(pp):
    # a micro-batch's forward or backward, in the timeline's order (one entry per run of phases)
    order = []
    for p in (p for p in phases if p["rank"] == rank and p["phase"].startswith("micro-batch ")):
        _, mb, kind = p["phase"].split()[:3]
        op = ("F" if kind == "forward" else "B") + mb
        if not order or order[-1] != op:
            order.append(op)
    # the trace's spans "forward K" and "backward K" on the rank's track (its tid)
    spans = sorted((e for e in events if e.get("ph") == "X" and e.get("tid") == rank
                    and e.get("cat") in ("forward", "backward")), key=lambda e: e["ts"])
    trace_order = [("F" if e["name"].startswith("forward") else "B") + e["name"].split(" ")[1] for e in spans]
    peak = max(p["bytes"]["activations"] for p in phases if p["rank"] == rank)
    good = order == trace_order and len(order) == 2 * m and peak == theory.get(rank)
    ok = ok and good
    print(("ok  " if good else "FAIL") + f" pp {pp} timeline, rank {rank}: {' '.join(order)} (trace: {' '.join(trace_order)}); "
          f"activations at the peak {peak:.0f}, theory {theory.get(rank)}")
sys.exit(0 if ok else 1)
PY
done
# Every rank's memory timeline is its theory, phase by phase (issue 37:
# the walk covered one whole-model stage): tp 2, pp 2 (1F1B and GPipe, 4
# micro-batches, so 1F1B's stage 0 holds two in flight and GPipe's four)
# and cp 2, at ZeRO-0 on 2 ranks and ZeRO-3 on 4 (dp 2 beside them, with
# overlap: gathered units and buckets in flight). Every phase of the
# recorded step on every rank: its measured total = its theory_total, and
# the theory --explain 2 prints beside each row of rank 1 is that phase's.
# Interleaved (pp 2 x 2 chunks): the walk follows the recorder's phases
# one by one (same phases, same order, a theory on each) on every rank;
# its bytes differ (the recorder counts an interleaved rank's slots by its
# first chunk, train/measure/measure_timeline.c), which the table says.
walk() {
    local name=$1 ranks=$2 exact=$3
    shift 3
    if ! timeout 180 "${mpi[@]}" -np "$ranks" "$build/train" "${base[@]}" --explain 2 "$@" \
            --log_json "$tmp/$name.json" >"$tmp/$name.out" 2>&1; then
        echo "FAIL timeline $name: the run failed"; tail -3 "$tmp/$name.out"; fails=$((fails + 1)); return
    fi
    if python3 - "$tmp/$name.json" "$tmp/$name.out" "$ranks" "$name" "$exact" <<'PY'; then :; else fails=$((fails + 1)); fi
import json, re, sys
path, out, ranks, name, exact = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
recs = [json.loads(l) for l in open(path) if '"memory_phase"' in l]
last = max(r["step"] for r in recs)
recs = [r for r in recs if r["step"] == last]
per_rank = {k: [r for r in recs if r["rank"] == k] for k in range(ranks)}
complete = all(len(p) > 4 for p in per_rank.values()) and all(r["theory_total"] is not None for r in recs)
bad = [r for r in recs if r["total"] != r["theory_total"]]
text = open(out).read()
# --explain 2's table of rank 1: each row's total is the theory of the same phase
table = text[text.index("a unit's life, one step on rank 1"):].split("\n  peak ")[0]
rows = re.findall(r"^  (micro-batch \d+ (?:forward|backward) (?:embedding|head|layer \d+)|optimizer: [a-z -]+?)"
                  r" +(\d+) +(\d+) +(\d+)  ", table, re.M)
theory = {r["phase"]: r["theory_total"] for r in per_rank[1]}
life = len(rows) >= 4 and all(theory.get(n) == int(total) for n, _, _, total in rows)
ok = complete and life and (not bad if exact else True)
say = f"{len(recs)} phases on {ranks} ranks, " + ("measured = theory at every phase" if exact else
      f"a theory beside each ({len(bad)} differ: the recorder's interleaved count)")
print(("ok  " if ok else "FAIL") + f" timeline {name}: {say}, --explain 2 rank 1's {len(rows)} rows the walk's"
      + ("" if complete else ", phases or theory missing") + ("" if life else ", --explain 2 rows differ")
      + "".join(f"\n    rank {r['rank']} {r['phase']}: measured {r['total']}, theory {r['theory_total']}"
                for r in (bad[:5] if exact else [])))
sys.exit(0 if ok else 1)
PY
}
for z in 0 3; do
    np=$((z == 0 ? 2 : 4))
    walk tp2_z$z $np 1 --zero $z --tp 2
    walk pp2_1f1b_z$z $np 1 --zero $z --pp 2 --schedule 1f1b --grad_accum 4
    walk pp2_gpipe_z$z $np 1 --zero $z --pp 2 --schedule gpipe --grad_accum 4
    walk cp2_z$z $np 1 --zero $z --cp 2 --attention flash
    walk interleaved_z$z $np 1 --zero $z --pp 2 --schedule interleaved --virtual_stages 2 --grad_accum 2 --n_layer 4
done
# arch = llama at ZeRO-3: its untied head reads no wte, so its ranks hold
# the embedding's params in the embedding's forward only (the theory's
# walk, the measured phases and the [dp] gathers alike); with tp 2 on 4
llama=(--arch llama --n_kv_head 2 --ffn_dim 96)
walk llama_z3 2 1 --zero 3 "${llama[@]}" --grad_accum 2
walk llama_tp2_z3 4 1 --zero 3 --tp 2 "${llama[@]}" --act_dtype fp32
[ $fails -eq 0 ] || { echo "own_numbers: $fails failed"; exit 1; }
echo "own_numbers: all passed"
