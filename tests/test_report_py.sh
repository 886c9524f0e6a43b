#!/usr/bin/env bash
# build/report (train/report/report.py) on real runs: a 2-rank ZeRO-3 run and a
# 1-rank run of the tiny config, 5 steps each. Checks the run log's comm
# records against the theory (ZeRO-3 on 2 ranks: the dp all-gather and
# reduce-scatter measured == theory, no all-reduce), then renders two
# reports: both runs (no memory timeline, no trace: "not in this run"), and
# the ZeRO-3 log with hand-made memory_phase records and a hand-made
# pipeline trace (tests/report/) appended, which draws the six pictures
# other than energy (this host has no meter: the page says "not available
# here" with the trainer's reason); then a hand-made measured log
# (tests/report/energy_steps.json), whose energy figures the page shows
# beside the planner's E = t x P, from its summary record and, cut short,
# from its steps.
# The panels that teach (issue 37) are checked by their numbers through
# report.py's functions: model states per rank on the ZeRO paper's lines
# (hand-made logs and the real ZeRO-3 run), the memory timeline's
# theory_total per phase, one step cut from a trace, the measured bubble.
# Every PNG must carry the PNG signature and be over 1 KB, every SVG must
# parse as XML with an <svg> root, and index.html must show every picture
# written and name no file that is not there. Bad input: non-zero exit, one
# line naming the file and line, no traceback.
# Usage: tests/test_report_py.sh BUILD_DIR
set -u
build=${1:-build}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if ! "$py" -c 'import matplotlib' 2>/dev/null; then
    echo "FAIL report: $py has no matplotlib: run \`make deps\` (installs Debian's python3-matplotlib)"
    exit 1
fi
tmp=$(mktemp -d /tmp/shardlab_report_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --oversubscribe --allow-run-as-root -np 2)
for v in ASAN_OPTIONS UBSAN_OPTIONS; do [ -n "${!v:-}" ] && mpi+=(-x "$v"); done
"$build/prepare" --input data/kjv.txt --train "$tmp/train.bin" --val "$tmp/val.bin" >/dev/null || exit 1
common=(--config configs/tiny.conf --steps 5 --threads 1 --val_every 5 --val_batches 2 --sample_tokens 0
        --train_data "$tmp/train.bin" --val_data "$tmp/val.bin")
passed=0 failed=0
check() { # name, then the command
    local name=$1
    shift
    if "$@"; then
        echo "ok   $name"
        passed=$((passed + 1))
    else
        echo "FAIL $name"
        failed=$((failed + 1))
    fi
}
run() { # log, ranks, then the trainer's own arguments
    local log=$1 ranks=$2
    shift 2
    local launch=()
    [ "$ranks" -gt 1 ] && launch=("${mpi[@]}")
    timeout 300 "${launch[@]}" "$build/train" "${common[@]}" "$@" --log_json "$log" >"$log.out" 2>&1 ||
        { tail -5 "$log.out"; return 1; }
}
check "2-rank ZeRO-3 run with --log_json" run "$tmp/zero3.json" 2 --zero 3
check "1-rank run with --log_json" run "$tmp/one.json" 1
check "2-rank tp 2 run with --log_json" run "$tmp/tp2.json" 2 --tp 2
check "2-rank pp 2 run with --log_json" run "$tmp/pp2.json" 2 --pp 2 --grad_accum 2

# The comm records of the ZeRO-3 run: 4 dp kinds x 2 ranks, and the numbers.
comm_records() {
    "$py" - "$tmp/zero3.json" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
setup = [r for r in recs if r["type"] == "memory_setup"]
assert len(setup) == 1 and setup[0]["zero"] == 3 and setup[0]["world_size"] == 2, setup
comm = {(r["rank"], r["kind"]): r for r in recs if r["type"] == "comm"}
assert len(comm) == 8 and all(r["group"] == "dp" for r in comm.values()), sorted(comm)
for rank in (0, 1):
    for kind in ("all-gather", "reduce-scatter"):
        r = comm[rank, kind]
        assert r["bytes_per_step"] > 0 and r["bytes_per_step"] == r["theory_bytes_per_step"], r
        assert r["calls_per_step"] >= 1, r
    assert comm[rank, "all-reduce"]["bytes_per_step"] == 0 == comm[rank, "all-reduce"]["theory_bytes_per_step"]
    assert comm[rank, "scalars"]["theory_bytes_per_step"] is None
    # ZeRO-3 gathers each unit in forward and again in backward: twice the
    # reduce-scatter of the gradients
    assert comm[rank, "all-gather"]["bytes_per_step"] == 2 * comm[rank, "reduce-scatter"]["bytes_per_step"]
EOF
}
check "comm records: dp all-gather and reduce-scatter measured == theory, 8 records" comm_records

# The memory records: every tracked category the report stacks, scratch
# included, on both ranks, measured == theory to the byte.
memory_records() {
    "$py" - "$tmp/zero3.json" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
mem = {(r["rank"], r["category"]): r for r in recs if r["type"] == "memory"}
for rank in (0, 1):
    for cat in ("params", "master", "grads", "optimizer", "activations", "comm", "scratch"):
        r = mem[rank, cat]
        assert r["measured_bytes"] > 0 and r["measured_bytes"] == r["theory_bytes"], r
EOF
}
check "memory records: the seven tracked categories, scratch included, measured == theory on both ranks" memory_records

# One report folder: PNGs and SVGs valid, index.html shows exactly those.
check_report() { # dir, expected number of pictures, pictures said missing
    "$py" - "$@" <<'EOF'
import os, re, sys
import xml.etree.ElementTree as ET
out, want, missing = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
files = sorted(os.listdir(out))
pngs = [f for f in files if f.endswith(".png")]
svgs = [f for f in files if f.endswith(".svg")]
assert len(pngs) == want and [p[:-4] for p in pngs] == [s[:-4] for s in svgs], files
for p in pngs:
    data = open(os.path.join(out, p), "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", p + ": no PNG signature"
    assert len(data) > 1024, "%s: %d bytes" % (p, len(data))
for s in svgs:
    root = ET.parse(os.path.join(out, s)).getroot()
    assert root.tag.endswith("svg"), s + ": root " + root.tag
page = open(os.path.join(out, "index.html")).read()
named = set(re.findall(r'(?:src|href)="([^"]+)"', page))
assert named == set(pngs + svgs), (sorted(named), pngs + svgs)
for name in missing:  # said in words, no picture
    assert not os.path.exists(os.path.join(out, name + ".png")), name
assert page.count("not in this run") == len(missing), page
EOF
}
check "report of both runs renders" "$build/report" "$tmp/zero3.json" "$tmp/one.json" --out "$tmp/both"
check "  6 pictures (loss, step time, memory, model states, comm, the memory timeline the trainer records),"\
"  pipeline, residency and energy not in this run" \
    check_report "$tmp/both" 6 pipeline residency energy
cat "$tmp/zero3.json" tests/report/memory_phases.json >"$tmp/phases.json"
check "report with memory_phase records and a trace renders" \
    "$build/report" "$tmp/phases.json" --trace tests/report/pipeline_trace.json --out "$tmp/all"
check "  all 7 pictures of a run without a meter or releases in its trace" check_report "$tmp/all" 7 residency energy

# Energy (docs/ENERGY.md): this host has no meter, so the runs' energy
# records say why, and the page says "not available here" with that reason;
# a hand-made measured log (tests/report/energy_steps.json: 10, 12, 14 J
# over 1000 tokens a step, 2 model TFLOP a step, the planner's 15 J at
# 700 W) shows its summary's figures, and the same steps without the
# summary (a log cut short) the same figures from the steps: J a step 12,
# mJ a token 12, TFLOP per J 6/36 = 0.1667 (the steps' TFLOP over their
# joules; the mean of their ratios would be 0.1698), measured / planned 0.800.
energy_page() { # dir, then the strings index.html must hold
    "$py" - "$@" <<'EOF'
import html, sys
page = html.unescape(open(sys.argv[1] + "/index.html").read())
for want in sys.argv[2:]:
    assert want in page, (want, page[page.find("<h2>Energy"):])
EOF
}
no_meter_record() { # the 1-rank run's energy record: no figures, a reason
    "$py" - "$tmp/one.json" <<'EOF'
import json, sys
e = [r for r in map(json.loads, open(sys.argv[1])) if r["type"] == "energy"]
assert len(e) == 1 and e[0]["joules_per_step"] is None and e[0]["why_not"], e
open(sys.argv[1] + ".why", "w").write(e[0]["why_not"])
EOF
}
check "a run without a meter writes an energy record with its reason" no_meter_record
check "  the page: energy: not available here (the trainer's reason)" \
    energy_page "$tmp/both" "energy: not available here ($(cat "$tmp/one.json.why" 2>/dev/null))"
check "report of a measured log renders" "$build/report" tests/report/energy_steps.json --out "$tmp/energy"
check "  3 pictures (loss, step time, energy); no memory, comm, timeline, pipeline or residency" \
    check_report "$tmp/energy" 3 memory_timeline pipeline residency
check "  the summary's figures beside the planner's E = t x P" energy_page "$tmp/energy" \
    "<td>3</td><td>12</td><td>12</td><td>0.1667</td><td>15 (700 W)</td><td>0.800</td><td>NVML (1 GPU)</td>"
grep -v '"energy"' tests/report/energy_steps.json >"$tmp/energy_cut.json"
check "report of a measured log without its summary renders" "$build/report" "$tmp/energy_cut.json" --out "$tmp/cut"
check "  the same figures from the steps" energy_page "$tmp/cut" \
    "<td>3</td><td>12</td><td>12</td><td>0.1667</td><td>15</td><td>0.800</td><td>the step records</td>"

# The panels that teach (issue 37), on hand-made logs whose numbers are
# worked by hand: Psi = 1000 with mixed-precision Adam (p 2, g 2, K 4 + 8
# = 12 bytes a parameter). ZeRO-1 on 2 ranks holds (2 + 2) Psi + 12 Psi / 2
# = 10,000 B a rank, ZeRO-3 on 4 ranks 16 Psi / 4 = 4,000 B; the
# activations (50,000 B a rank) stay out of the model-states panel.
report_py() { # python code run with train/report on the path
    (cd train/report && "$py" -c "$1")
}
check "model states: bytes per parameter (2, 2, 12) read from each run's records" report_py '
import report
for f in ("states_zero1_n2", "states_zero3_n4"):
    run = report.Run("../../tests/report/%s.json" % f)
    assert report.bytes_per_param(run) == (2, 2, 12), (f, report.bytes_per_param(run))'
check "model states: the formulas 16 Psi, 4 Psi + 12 Psi / N, 2 Psi + 14 Psi / N, 16 Psi / N" report_py '
import report
got = [report.zero_state_bytes(stage, 4, 1000, 2, 2, 12) for stage in range(4)]
assert got == [16000, 7000, 5500, 4000], got
texts = [report.formula_text(stage, 2, 2, 12) for stage in range(4)]
assert texts == ["16 Psi", "4 Psi + 12 Psi / N", "2 Psi + 14 Psi / N", "16 Psi / N"], texts'
check "model states: every rank's point on its line (10,000 B at ZeRO-1 N 2, 4,000 B at ZeRO-3 N 4)" report_py '
import report
runs = [report.Run("../../tests/report/%s.json" % f) for f in ("states_zero1_n2", "states_zero3_n4")]
pts = [(p["stage"], p["n"], p["rank"], p["measured"], p["formula"]) for p in report.model_state_points(runs)]
assert pts == [(1, 2, 0, 10000, 10000), (1, 2, 1, 10000, 10000)] + \
    [(3, 4, r, 4000, 4000) for r in range(4)], pts
labels, common = report.run_labels(runs)
assert labels == ["ZeRO-1, 2 ranks", "ZeRO-3, 4 ranks"] and common == "adamw", (labels, common)'
# pp 2 over dp 2 (hand-made): stage 0's ranks hold Psi_r = 600 of a
# 1,000-parameter model, stage 1's 400; ZeRO-1 with N = 2 is 10 Psi_r a
# rank: 6,000 B and 4,000 B, each on its own Psi_r's line.
check "model states: a pp run's ranks on their own Psi_r lines (6,000 B and 4,000 B at ZeRO-1 N 2)" report_py '
import report
run = report.Run("../../tests/report/states_zero1_pp2.json")
pts = [(p["rank"], p["n"], p["psi"], p["measured"], p["formula"], (p["p"], p["g"], p["k"]))
       for p in report.model_state_points([run])]
assert pts == [(0, 2, 600, 6000, 6000, (2, 2, 12)), (1, 2, 600, 6000, 6000, (2, 2, 12)),
               (2, 2, 400, 4000, 4000, (2, 2, 12)), (3, 2, 400, 4000, 4000, (2, 2, 12))], pts'
check "model states: the real tp 2 and pp 2 runs each rank on its line, Psi_r from memory_setup" report_py "
import report
for name in ('tp2', 'pp2'):
    run = report.Run('$tmp/%s.json' % name)
    pts = report.model_state_points([run])
    assert len(pts) == 2 and all(p['measured'] == p['formula'] for p in pts), (name, pts)
    assert [p['psi'] for p in pts] == run.setup['psi_ranks'] and all(p['split'] for p in pts), (name, pts)"
check "model states: the real ZeRO-3 run on 2 ranks is 16 Psi / 2 on both ranks" report_py "
import report
run = report.Run('$tmp/zero3.json')
psi = run.setup['psi']
pts = report.model_state_points([run])
assert len(pts) == 2 and all(p['measured'] == p['formula'] == 16 * psi / 2 for p in pts), pts"
check "memory timeline: the real ZeRO-3 run's theory_total equals its total at every phase" report_py "
import report
run = report.Run('$tmp/zero3.json')
step, by_rank = report.timeline_steps(run)
assert sorted(by_rank) == [0, 1] and all(len(rows) > 4 for rows in by_rank.values()), by_rank
for rows in by_rank.values():
    assert [p['theory_total'] for p in rows] == [p['total'] for p in rows], rows
    assert [report.phase_micro_batch(p['phase']) for p in rows][0] == 0  # 0-based, as the trace's"
check "memory timeline: the real tp 2 and pp 2 runs' theory_total equals the total at every phase of every rank" report_py "
import report
for name in ('tp2', 'pp2'):
    step, by_rank = report.timeline_steps(report.Run('$tmp/%s.json' % name))
    assert sorted(by_rank) == [0, 1], (name, by_rank)
    for rows in by_rank.values():
        assert [p['theory_total'] for p in rows] == [p['total'] for p in rows], (name, rows)"
check "report of the tp and pp runs renders, model states and the timeline's theory included" "$build/report" \
    "$tmp/tp2.json" "$tmp/pp2.json" --out "$tmp/split"
check "pipeline: one step (step 2, 2000-3250 us) from the trace's step spans" report_py '
import report
rows, spans = report.trace_spans("../../tests/report/step_trace.json")
w = report.one_step_window(spans)
assert w == (2, 2000.0, 3250.0, {"rank 0": (2000.0, 3000.0), "rank 1": (2050.0, 3250.0)}), w'
check "pipeline: the measured bubbles (25%, 30%) beside the theory 1/5 = (p - 1) / (m + p - 1)" report_py '
import report
b = report.pipeline_bubbles([report.Run("../../tests/report/pipeline_bubble.json")])
assert [x[1:] for x in b] == [(0, 0, 0.25, 0.2), (1, 1, 0.3, 0.2)], b'
# Residency (tests/report/residency_trace.json, one rank, step 1 over 0-1000
# us): layer 0 gathered at 0, released at 300, gathered again at 500 and
# released at 900; layer 1 gathered at 100, released at 400, gathered at
# 600 and never released: resident to the step's end (1000); its gather at
# 1100 (validation, after the step) left out.
check "residency: each unit from its gather to its release, to the step's end where not released" report_py '
import report
step, resident, used = report.residency(report.load_trace_events("../../tests/report/residency_trace.json"))
assert step == 1 and resident == {"rank 0": {"layer 0": [(0.0, 300.0), (500.0, 900.0)],
                                             "layer 1": [(100.0, 400.0), (600.0, 1000.0)]}}, resident
assert used == {"rank 0": {"layer 0": [(50.0, 300.0)]}}, used
assert report.residency(report.load_trace_events("../../tests/report/step_trace.json")) is None'
check "report of a trace with releases draws the residency chart" "$build/report" tests/report/states_zero3_n4.json \
    --trace tests/report/residency_trace.json --out "$tmp/residency"
check "  its residency picture" test -s "$tmp/residency/residency.png"
check "report of the hand-made model-state and pipeline logs renders" "$build/report" \
    tests/report/states_zero1_n2.json tests/report/states_zero3_n4.json tests/report/pipeline_bubble.json \
    --trace tests/report/step_trace.json --out "$tmp/teach"
check "  3 pictures (memory, model states, pipeline); memory timeline, residency and energy not in this run" \
    check_report "$tmp/teach" 3 memory_timeline residency energy

# Bad input: a clear one-line error, non-zero exit.
bad_input() { # contents, expected message
    printf '%s\n' "$1" >"$tmp/bad.json"
    ! "$build/report" "$tmp/bad.json" --out "$tmp/bad" >"$tmp/bad.out" 2>&1 &&
        grep -q "^build/report: $2" "$tmp/bad.out" && ! grep -q Traceback "$tmp/bad.out"
}
check "bad input: not JSON" bad_input '{"type":"step",' "$tmp/bad.json line 1 is not JSON"
check "bad input: a step without a loss" bad_input '{"type":"step","step":1}' \
    "$tmp/bad.json line 1: step record without loss"
check "bad input: an empty log" bad_input '' "$tmp/bad.json has no shardlab records"
echo "report: $passed passed, $failed failed"
[ $failed -eq 0 ]
