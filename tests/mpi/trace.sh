#!/usr/bin/env bash
# --trace FILE (train/measure/trace_file.h) on real runs of build/train, checked
# by tests/trace_check.py:
#  0. the checker's self-test: a hand-made good trace passes, each defect
#     (wrong order, early optimizer, overlap, missing rank, ts going back,
#     wrong bytes, a missing backward, dropped events, bad JSON) fails;
#  1. 1 and 2 ranks x ZeRO 0 and 3, 3 steps of grad_accum 2 with a
#     validation: one track per rank, F0 B0 F1 B1 in every step, the
#     optimizer after the last backward, the communication inside steps
#     equal, per rank, group and kind, to the comm records of the log;
#  2. the same 2-rank trace against a wrong order: the checker fails;
#  3. a trace that fills up (trace_events 20): the run succeeds, the file
#     says how many were dropped, the checker fails it unless --allow-dropped;
#  4. steps 0: a valid trace with the tracks and no spans;
#  5. a trace path in a missing folder: every rank fails before step 1,
#     one message naming --trace;
#  6. SIGUSR1 to mpirun mid-run: the ranks stop at a step boundary (exit
#     3) and the trace of the steps run is written and checks;
#  7. pp 2: GPipe's F0 F1 B0 B1 on both stages, 1F1B's one warm-up forward
#     on stage 0 (F0 F1 B0 B1) and none on stage 1 (F0 B0 F1 B1), the pp
#     sends, receives and tie all-reduces equal to the log;
#  8. pp 2 interleaved (2 chunks a stage): each stage's order of
#     (micro-batch, chunk) forwards and backwards, the pp traffic;
#  9. cp 2: the ring's sends and waits, against the log;
# 10. a unit's life at ZeRO-3 on 2 ranks (the 2-rank trace of 1.): in every
#     micro-batch on every rank, each layer's params all-gathered (the
#     post, tagged with the layer, before its forward span ends), its
#     forward span, then its release; in backward its all-gather again, its
#     backward span, its reduce-scatter posted inside it, its release; at
#     ZeRO-0 no unit is gathered or released.
# Usage: tests/mpi/trace.sh BUILD_DIR (build or build-san)
set -u
build=${1:-build}
train="$build/train"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
checker=tests/trace_check.py
tmp=$(mktemp -d /tmp/shardlab_trace_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --oversubscribe --allow-run-as-root)
for v in ASAN_OPTIONS UBSAN_OPTIONS; do [ -n "${!v:-}" ] && mpi+=(-x "$v"); done
fails=0
check() { # name, condition result
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

"$build/prepare" --input data/kjv.txt --train "$tmp/train.bin" --val "$tmp/val.bin" >/dev/null || exit 1
common=(--config configs/tiny.conf --train_data "$tmp/train.bin" --val_data "$tmp/val.bin" --threads 1
    --peak_flops 1e9 --grad_accum 2 --val_every 2)

# 0.
"$py" "$checker" --selftest
check "trace_check.py self-test: it fails each hand-made defect" $?

# 1. and 2.
for np in 1 2; do
    for zero in 0 3; do
        name="np${np}_zero${zero}"
        timeout 120 "${mpi[@]}" -np $np "$train" "${common[@]}" --steps 3 --zero $zero \
            --trace "$tmp/$name.trace.json" --log_json "$tmp/$name.json" >"$tmp/$name.out" 2>&1
        rc=$?
        [ $rc -eq 0 ] && grep -q "^trace: $tmp/$name.trace.json" "$tmp/$name.out" &&
            "$py" "$checker" "$tmp/$name.trace.json" --ranks $np --steps 3 --grad-accum 2 \
                --expect-order "F0 B0 F1 B1" --log "$tmp/$name.json" $([ $np -gt 1 ] && echo --require-comm)
        check "$np rank(s), ZeRO-$zero: the trace checks against the run's log (rc $rc)" $?
    done
done
# 10. a unit's life, from the 2-rank ZeRO-3 and ZeRO-0 traces
"$py" - "$tmp/np2_zero3.trace.json" "$tmp/np2_zero0.trace.json" <<'PY'
import json, sys
def events(path):
    ev = json.load(open(path))["traceEvents"]
    return [e for e in ev if e.get("ph") == "X"]
def life(ev, rank, unit, mb, step, kind):
    """One unit's events in one micro-batch's pass of a step: the all-gather
    posts before its span ends, its span, the releases and reduce-scatter
    posts inside it (validation's forwards left out)."""
    vals = [e for e in ev if e["tid"] == rank and e["cat"] == "validation"]
    inside = lambda e, o: o["ts"] <= e["ts"] and e["ts"] + e["dur"] <= o["ts"] + o["dur"]
    mine = [e for e in ev if e["tid"] == rank and e["args"].get("step") == step and e["args"].get("unit") == unit
            and not any(inside(e, v) for v in vals)]
    span = [e for e in mine if e["cat"] == "unit" and e["name"] == "%s %s" % (kind, unit) and e["args"]["micro_batch"] == mb]
    if len(span) != 1:
        return None
    s = span[0]
    end = s["ts"] + s["dur"]
    gather = [e for e in mine if e["name"] == "post all-gather dp: " + unit and e["ts"] <= end]
    release = [e for e in mine if e["cat"] == "release" and s["ts"] <= e["ts"] <= end]
    scatter = [e for e in mine if e["name"] == "post reduce-scatter dp: " + unit and s["ts"] <= e["ts"] <= end]
    return gather, s, release, scatter
z3, z0 = events(sys.argv[1]), events(sys.argv[2])
bad = []
for rank in (0, 1):
    for step in (1, 2, 3):
        for mb in (0, 1):
            for layer in (0, 1):
                unit = "layer %d" % layer
                for kind in ("forward", "backward"):
                    got = life(z3, rank, unit, mb, step, kind)
                    if not got or not got[0] or len(got[2]) != 1 or (kind == "backward") != (len(got[3]) == 1):
                        bad.append("rank %d step %d mb %d %s %s: %s" % (rank, step, mb, kind, unit,
                                   got and [len(x) if isinstance(x, list) else 1 for x in got]))
units0 = [e["name"] for e in z0 if e["cat"] == "release" or "all-gather dp: layer" in e["name"]]
ok = not bad and not units0
print(("ok  " if ok else "FAIL") + " a unit's life in the trace: all-gather, forward, release; all-gather, backward, "
      "reduce-scatter, release" + "".join("\n    " + b for b in bad[:6]) + ("\n    ZeRO-0: %s" % units0[:3] if units0 else ""))
sys.exit(0 if ok else 1)
PY
check "ZeRO-3: every layer's all-gather, use, release and reduce-scatter in the trace, tagged with it" $?
"$py" "$checker" "$tmp/np2_zero3.trace.json" --ranks 2 --steps 3 --grad-accum 2 --expect-order "F0 F1 B0 B1" \
    >"$tmp/wrong.out"
[ $? -ne 0 ] && grep -q "order F0 B0 F1 B1, expected F0 F1 B0 B1" "$tmp/wrong.out"
check "a wrong expected order fails the checker on a real trace" $?

# 3.
timeout 120 "${mpi[@]}" -np 2 "$train" "${common[@]}" --steps 3 --zero 3 --trace_events 20 \
    --trace "$tmp/full.json" >"$tmp/full.out" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q '"name":"trace full: [0-9]* events dropped"' "$tmp/full.json" &&
    grep -q "events did not fit (trace_events 20 per rank)" "$tmp/full.out" &&
    "$py" "$checker" "$tmp/full.json" --ranks 2 --allow-dropped >/dev/null &&
    ! "$py" "$checker" "$tmp/full.json" --ranks 2 >/dev/null
check "a full trace: the run goes on (rc $rc), the file counts the dropped events" $?

# 4.
timeout 60 "${mpi[@]}" -np 2 "$train" "${common[@]}" --steps 0 --trace "$tmp/zero.json" >"$tmp/zero.out" 2>&1
rc=$?
[ $rc -eq 0 ] && "$py" "$checker" "$tmp/zero.json" --ranks 2 --steps 0 --grad-accum 2 >/dev/null &&
    ! grep -q '"ph":"X"' "$tmp/zero.json"
check "steps 0: a valid trace with a track per rank and no spans (rc $rc)" $?

# 5.
timeout 60 "${mpi[@]}" -np 2 "$train" "${common[@]}" --steps 3 --trace "$tmp/missing/t.json" \
    >"$tmp/bad.out" 2>"$tmp/bad.err"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c -- "--trace $tmp/missing/t.json cannot be written" "$tmp/bad.err")" -eq 1 ] &&
    ! grep -q '^step' "$tmp/bad.out"
check "--trace in a missing folder: non-zero exit before step 1, one message (rc $rc)" $?

# 6.
timeout 120 "${mpi[@]}" -np 2 "$train" "${common[@]}" --steps 1000000 --val_every 0 --trace "$tmp/stop.json" \
    --save_state "$tmp/stop.state" >"$tmp/stop.out" 2>&1 &
job=$!
for _ in $(seq 1 300); do grep -q '^step' "$tmp/stop.out" 2>/dev/null && break; sleep 0.1; done
kill -USR1 "$(pgrep -P $job | head -n 1)" 2>/dev/null
wait $job
rc=$?
ran=$(sed -n 's/.*"steps_run":\([0-9]*\).*/\1/p' "$tmp/stop.json" 2>/dev/null)
[ $rc -eq 3 ] && [ -n "$ran" ] && [ "$ran" -ge 1 ] &&
    "$py" "$checker" "$tmp/stop.json" --ranks 2 --steps "$ran" --grad-accum 2 --expect-order "F0 B0 F1 B1" >/dev/null
check "stopped by SIGUSR1 (rc $rc): the trace of the ${ran:-?} steps run is written and checks" $?

# 7.
for sch in gpipe 1f1b; do
    timeout 120 "${mpi[@]}" -np 2 "$train" "${common[@]}" --steps 3 --pp 2 --schedule $sch \
        --trace "$tmp/pp_$sch.json" --log_json "$tmp/pp_$sch.log" >"$tmp/pp_$sch.out" 2>&1
    rc=$?
    if [ $sch = gpipe ]; then order=(--expect-order "F0 F1 B0 B1"); else
        order=(--rank-order "0=F0 F1 B0 B1" --rank-order "1=F0 B0 F1 B1"); fi
    [ $rc -eq 0 ] && "$py" "$checker" "$tmp/pp_$sch.json" --ranks 2 --steps 3 --grad-accum 2 "${order[@]}" \
        --log "$tmp/pp_$sch.log" --require-comm && grep -q '"name":"recv pp"' "$tmp/pp_$sch.json"
    check "pp 2, $sch: each stage's order, the pp traffic against the log (rc $rc)" $?
done

# 8. pp 2 interleaved, 2 chunks a stage (4 layers), m 2: Megatron-LM's order
#    (include/schedule.h), F<mb>:<chunk> for the rank's chunk 1. Stage 0
#    warms up with 2 + 2 = all 4 forwards; stage 1 with 2, then alternates.
timeout 120 "${mpi[@]}" -np 2 "$train" "${common[@]}" --steps 3 --pp 2 --n_layer 4 --schedule interleaved \
    --virtual_stages 2 --trace "$tmp/pp_inter.json" --log_json "$tmp/pp_inter.log" >"$tmp/pp_inter.out" 2>&1
rc=$?
[ $rc -eq 0 ] && "$py" "$checker" "$tmp/pp_inter.json" --ranks 2 --steps 3 --grad-accum 2 --virtual-stages 2 \
    --rank-order "0=F0 F1 F0:1 F1:1 B0:1 B1:1 B0 B1" --rank-order "1=F0 F1 F0:1 B0:1 F1:1 B1:1 B0 B1" \
    --log "$tmp/pp_inter.log" --require-comm
check "pp 2 interleaved: each stage's order (chunks), the pp traffic against the log (rc $rc)" $?
"$py" "$checker" "$tmp/pp_inter.json" --ranks 2 --steps 3 --grad-accum 2 >/dev/null
[ $? -ne 0 ]
check "the interleaved trace without --virtual-stages fails the span count" $?

# 9. cp 2 (ring attention, docs/CP.md): F0 B0 F1 B1 on both ranks, the ring's
#    posts and waits (the "cp" group: 2 layers x (1 + 3) isends per
#    micro-batch, each named with its layer) equal, per rank and kind, to
#    the log's [cp] rows.
timeout 120 "${mpi[@]}" -np 2 "$train" "${common[@]}" --steps 3 --cp 2 --attention flash \
    --trace "$tmp/cp2.json" --log_json "$tmp/cp2.log" >"$tmp/cp2.out" 2>&1
rc=$?
[ $rc -eq 0 ] && "$py" "$checker" "$tmp/cp2.json" --ranks 2 --steps 3 --grad-accum 2 --expect-order "F0 B0 F1 B1" \
    --log "$tmp/cp2.log" --require-comm && grep -q '"name":"wait recv cp: layer [0-9]*"' "$tmp/cp2.json" &&
    grep -q '"name":"post send cp: layer [0-9]*"' "$tmp/cp2.json"
check "cp 2: the ring's sends and waits against the log (rc $rc)" $?

[ $fails -eq 0 ] && echo "trace: all passed" || echo "trace: $fails failed"
exit $((fails > 0))
