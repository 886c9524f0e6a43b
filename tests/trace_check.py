#!/usr/bin/python3
"""Checks a --trace file of build/train (Chrome trace-event JSON,
train/measure/trace_file.h) against what the run must have done.

    tests/trace_check.py FILE --ranks N [--steps S --grad-accum K [--virtual-stages V]]
        [--expect-order "F0 B0 F1 B1"] [--rank-order R="F0 F1 B0 B1"] ...
        [--log RUN.json] [--require-comm] [--allow-dropped]
    tests/trace_check.py --selftest

Always: valid JSON with traceEvents, displayTimeUnit and otherData; one
named track per rank ("rank R (dp d, cp c, tp t, pp p)"), tids exactly 0..N-1;
per rank, timestamps non-decreasing in file order, spans nested or
disjoint, forward/backward spans never overlapping each other; one step
span per step number, each forward, backward and optimizer span of a step
inside it, the optimizer after the step's last backward; communication
spans named after their kind and group (and the unit they move, ": layer
3", as their "unit" arg says), with bytes (or posted_bytes on a wait); each
unit's forward and backward span ("forward layer 3", cat "unit") inside
its micro-batch's forward or backward, each release of a unit's gathered
params ("release layer 3", cat "release", with bytes) inside a step; no
dropped events unless --allow-dropped.

--steps S --grad-accum K [--virtual-stages V]: per rank exactly S step
spans, S x K x V forwards and S x K x V backwards, each step's micro-batches
0..K-1 forward and backward through each of the rank's V chunks (the
interleaved schedule; 1 otherwise) once, each backward after its forward.
--expect-order: every step's forward/backward sequence on every rank, as
tokens F<mb> / B<mb> (F<mb>:<chunk> for a virtual stage > 0);
--rank-order R=ORDER overrides it for world rank R (a pipeline stage's
schedule). --log RUN.json: the run's --log_json; per rank, group and kind,
the bytes and calls of the communication inside step spans (validation,
agreement and checkpoints are outside, as in the comm counters) equal the
"comm" records' per-step figures times the steps run. --require-comm: every
rank has communication spans inside its steps.

Exit 0 when every check passes, 1 with one line per failure otherwise,
2 on bad usage. Standard library only.
"""
import argparse
import collections
import json
import re
import sys

GROUPS = ("dp", "tp", "pp", "tie", "cp")
CALLS = ("blocking", "post", "wait")
SPAN_CATS = ("step", "forward", "backward", "optimizer", "validation", "comm", "unit", "release")
UNIT = re.compile(r"^(embedding|head|layer \d+)$")
TOKEN = re.compile(r"^([FB])(\d+)(?::(\d+))?$")


class Span:
    def __init__(self, e):
        self.name, self.cat, self.args = e.get("name", ""), e.get("cat", ""), e.get("args", {}) or {}
        self.ts, self.dur = float(e["ts"]), float(e["dur"])
        self.end = self.ts + self.dur
        self.step = self.args.get("step", 0)

    def token(self):
        letter = "F" if self.cat == "forward" else "B"
        chunk = self.args.get("chunk", 0)
        return "%s%d" % (letter, self.args.get("micro_batch", -1)) + (":%d" % chunk if chunk else "")

    def inside(self, other):
        return other.ts <= self.ts and self.end <= other.end


def parse_order(text):
    tokens = text.split()
    for t in tokens:
        if not TOKEN.match(t):
            raise ValueError("bad order token %r (expected F<mb> or B<mb>, optionally :<chunk>)" % t)
    return tokens


def load_trace(path, errors):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        errors.append("cannot open %s: %s" % (path, e.strerror))
        return None
    except ValueError as e:
        errors.append("%s is not valid JSON: %s" % (path, e))
        return None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        errors.append("no traceEvents list at the top level")
        return None
    if data.get("displayTimeUnit") != "ms":
        errors.append("displayTimeUnit is %r, not \"ms\"" % data.get("displayTimeUnit"))
    if not isinstance(data.get("otherData"), dict):
        errors.append("no otherData object")
    return data


def check_tracks(events, ranks, errors):
    """Thread names, dropped counts; returns {tid: [Span in file order]}."""
    names, dropped, instants = {}, {}, collections.Counter()
    spans = collections.defaultdict(list)
    for e in events:
        ph, tid = e.get("ph"), e.get("tid")
        if ph == "M" and e.get("name") == "thread_name":
            names[tid] = str(e.get("args", {}).get("name", ""))
            dropped[tid] = e.get("args", {}).get("dropped", 0)
        elif ph == "i" and str(e.get("name", "")).startswith("trace full"):
            instants[tid] += 1
        elif ph == "X":
            try:
                s = Span(e)
            except (KeyError, TypeError, ValueError):
                errors.append("rank %s: X event %r without numeric ts and dur" % (tid, e.get("name")))
                continue
            if s.ts < 0 or s.dur < 0:
                errors.append("rank %s: %s has negative ts or dur" % (tid, s.name))
            if s.cat not in SPAN_CATS:
                errors.append("rank %s: %s has unknown cat %r" % (tid, s.name, s.cat))
            spans[tid].append(s)
    want = set(range(ranks))
    if set(names) != want:
        errors.append("tracks (thread_name tids) %s, expected one per rank %s" % (sorted(names), sorted(want)))
    for tid, name in names.items():
        m = re.match(r"^rank (\d+) \(dp \d+, cp \d+, tp \d+, pp \d+\)$", name)
        if not m or int(m.group(1)) != tid:
            errors.append("track %s is named %r, not \"rank %s (dp d, cp c, tp t, pp p)\"" % (tid, name, tid))
    stray = set(spans) - want
    if stray:
        errors.append("spans on tids %s, which are not ranks" % sorted(stray))
    for tid, d in sorted(dropped.items()):
        if d and not instants[tid]:
            errors.append("rank %s dropped %s events but has no \"trace full\" instant" % (tid, d))
    return spans, dropped


def check_rank(r, spans, args, order, errors, truncated=False):
    """Nesting, order, counts, optimizer placement for one rank. truncated:
    the rank dropped events, so its last step and the totals are incomplete
    and not judged."""
    last_ts, stack = -1.0, []
    for s in spans:
        if s.ts < last_ts:
            errors.append("rank %d: ts not monotonic in file order at %s (ts %.3f after %.3f)" % (r, s.name, s.ts, last_ts))
        last_ts = max(last_ts, s.ts)
        while stack and stack[-1].end <= s.ts:
            stack.pop()
        if stack and s.end > stack[-1].end:
            errors.append("rank %d: %s (%.3f..%.3f) overlaps %s (%.3f..%.3f) without nesting"
                          % (r, s.name, s.ts, s.end, stack[-1].name, stack[-1].ts, stack[-1].end))
        stack.append(s)
    fb = sorted((s for s in spans if s.cat in ("forward", "backward")), key=lambda s: s.ts)
    for a, b in zip(fb, fb[1:]):
        if b.ts < a.end:
            errors.append("rank %d: %s of step %s overlaps %s (forward/backward spans must not overlap)"
                          % (r, b.name, b.step, a.name))
    steps = collections.defaultdict(list)
    for s in spans:
        if s.cat == "step":
            steps[s.step].append(s)
    for n, ss in sorted(steps.items()):
        if len(ss) != 1:
            errors.append("rank %d: %d spans for step %s" % (r, len(ss), n))
    if args.steps is not None and not truncated and sorted(steps) != list(range(1, args.steps + 1)):
        errors.append("rank %d: step spans %s, expected 1..%d" % (r, sorted(steps), args.steps))
    for kind in ("forward", "backward"):
        count = sum(1 for s in spans if s.cat == kind)
        if args.steps is not None and args.grad_accum is not None and not truncated and \
                count != args.steps * args.grad_accum * args.virtual_stages:
            errors.append("rank %d: %d %s spans, expected steps x grad_accum x virtual_stages = %d"
                          % (r, count, kind, args.steps * args.grad_accum * args.virtual_stages))
    for n, ss in sorted(steps.items()):
        if truncated and n == max(steps):
            continue
        step = ss[0]
        mine = [s for s in spans if s.step == n and s.cat in ("forward", "backward", "optimizer")]
        for s in mine:
            if not s.inside(step):
                errors.append("rank %d: %s of step %d lies outside the step's span" % (r, s.name, n))
        seq = [s.token() for s in sorted(mine, key=lambda s: s.ts) if s.cat != "optimizer"]
        if order is not None and seq != order:
            errors.append("rank %d step %d: order %s, expected %s" % (r, n, " ".join(seq), " ".join(order)))
        if args.grad_accum is not None:
            for letter in "FB":
                mbs = sorted(int(TOKEN.match(t).group(2)) for t in seq if t[0] == letter)
                if sorted(set(mbs)) != list(range(args.grad_accum)):
                    errors.append("rank %d step %d: %s micro-batches %s, expected 0..%d"
                                  % (r, n, letter, mbs, args.grad_accum - 1))
                # each (micro-batch, chunk) once; a backward after its forward
                pairs = [(int(TOKEN.match(t).group(2)), int(TOKEN.match(t).group(3) or 0)) for t in seq if t[0] == letter]
                every = [(k, c) for k in range(args.grad_accum) for c in range(args.virtual_stages)]
                if sorted(pairs) != every:
                    errors.append("rank %d step %d: %s (micro-batch, chunk) pairs %s, expected each of %s once"
                                  % (r, n, letter, sorted(pairs), every))
            for i, t in enumerate(seq):
                if t[0] == "B" and "F" + t[1:] not in seq[:i]:
                    errors.append("rank %d step %d: %s before its forward" % (r, n, t))
        opts = [s for s in mine if s.cat == "optimizer"]
        if len(opts) != 1:
            errors.append("rank %d step %d: %d optimizer spans, expected 1" % (r, n, len(opts)))
            continue
        backs = [s for s in mine if s.cat == "backward"]
        if backs and opts[0].ts < max(s.end for s in backs):
            errors.append("rank %d step %d: optimizer starts at %.3f, before the last backward ends (%.3f)"
                          % (r, n, opts[0].ts, max(s.end for s in backs)))
    check_units(r, spans, steps, errors)
    return steps


def check_units(r, spans, steps, errors):
    """A unit's spans inside its micro-batch's pass (or a validation's
    forward); releases inside a step or a validation."""
    passes = [s for s in spans if s.cat in ("forward", "backward")]
    vals = [s for s in spans if s.cat == "validation"]
    for s in spans:
        if s.cat not in ("unit", "release"):
            continue
        unit = s.args.get("unit", "")
        if not UNIT.match(unit):
            errors.append("rank %d: %s has unit %r" % (r, s.name, unit))
            continue
        if s.cat == "release":
            if s.name != "release " + unit or not isinstance(s.args.get("bytes"), (int, float)):
                errors.append("rank %d: release span %r (unit %r) without its name or bytes" % (r, s.name, unit))
            if not any(s.inside(o) for o in [st[0] for st in steps.values()] + vals) and s.step in steps:
                errors.append("rank %d: %s lies outside its step" % (r, s.name))
            continue
        kind = s.name.split(" ")[0]
        if kind not in ("forward", "backward") or s.name != kind + " " + unit:
            errors.append("rank %d: unit span %r, expected \"forward|backward %s\"" % (r, s.name, unit))
            continue
        mb = s.args.get("micro_batch")
        if any(s.inside(v) for v in vals) and kind == "forward":
            continue
        if not any(p.cat == kind and p.args.get("micro_batch") == mb and s.inside(p) for p in passes):
            errors.append("rank %d: %s of micro-batch %s lies outside that micro-batch's %s" % (r, s.name, mb, kind))


def check_comm(r, spans, steps, args, errors):
    """Names and args of communication spans; returns {(group, kind): [bytes, calls]} inside step spans."""
    sums = collections.defaultdict(lambda: [0.0, 0])
    for s in spans:
        if s.cat != "comm":
            continue
        a = s.args
        group, kind, call = a.get("group"), a.get("kind"), a.get("call")
        if group not in GROUPS or not isinstance(kind, str) or call not in CALLS:
            errors.append("rank %d: comm span %r has group %r, kind %r, call %r" % (r, s.name, group, kind, call))
            continue
        prefix = "" if call == "blocking" else call + " "
        unit = a.get("unit")
        want = "%s%s %s" % (prefix, kind, group) + (": " + unit if unit else "")
        if s.name != want or (unit and not UNIT.match(unit)):
            errors.append("rank %d: comm span named %r, expected %r" % (r, s.name, want))
        key = "posted_bytes" if call == "wait" else "bytes"
        b = a.get(key)
        if not isinstance(b, (int, float)) or b < 0:
            errors.append("rank %d: %s has no %s" % (r, s.name, key))
            continue
        step = steps.get(s.step)
        if call != "wait" and step and s.inside(step[0]):
            sums[(group, kind)][0] += b
            sums[(group, kind)][1] += 1
    if args.require_comm and not sums:
        errors.append("rank %d: no communication spans inside its steps" % r)
    return sums


def check_log(path, sums, ranks, errors):
    """Trace bytes and calls in steps against the log's "comm" records x steps run."""
    records, steps = [], 0
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                rec = json.loads(line)
                if rec.get("type") == "step":
                    steps += 1
                elif rec.get("type") == "comm":
                    records.append(rec)
    except (OSError, ValueError) as e:
        errors.append("cannot read log %s: %s" % (path, e))
        return
    if not records:
        errors.append("log %s has no comm records" % path)
    seen = set()
    for rec in records:
        key = (rec["rank"], rec["group"], rec["kind"])
        seen.add(key)
        got = sums.get(rec["rank"], {}).get((rec["group"], rec["kind"]), [0.0, 0])
        want_bytes, want_calls = rec["bytes_per_step"] * steps, rec["calls_per_step"] * steps
        if abs(got[0] - want_bytes) > 1e-9 * max(1.0, abs(want_bytes)):
            errors.append("rank %d %s %s: %.17g bytes in the trace's steps, the log says %.17g per step x %d steps = %.17g"
                          % (key + (got[0], rec["bytes_per_step"], steps, want_bytes)))
        if got[1] != round(want_calls):
            errors.append("rank %d %s %s: %d calls in the trace's steps, the log says %g" % (key + (got[1], want_calls)))
    for r in range(ranks):
        for (group, kind), (b, calls) in sorted(sums.get(r, {}).items()):
            if (r, group, kind) not in seen:
                errors.append("rank %d %s %s: %d calls (%g bytes) in the trace's steps, no comm record in the log"
                              % (r, group, kind, calls, b))


def check(args):
    errors = []
    data = load_trace(args.file, errors)
    if data is None:
        return errors
    spans, dropped = check_tracks(data["traceEvents"], args.ranks, errors)
    if not args.allow_dropped and any(dropped.values()):
        errors.append("events dropped (trace full): %s; raise trace_events or pass --allow-dropped"
                      % {r: d for r, d in sorted(dropped.items()) if d})
    sums = {}
    for r in range(args.ranks):
        order = args.rank_order.get(r, args.expect_order)
        steps = check_rank(r, spans.get(r, []), args, order, errors, truncated=bool(dropped.get(r)))
        sums[r] = check_comm(r, spans.get(r, []), steps, args, errors)
    if args.log:
        check_log(args.log, sums, args.ranks, errors)
    return errors


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file", nargs="?")
    p.add_argument("--ranks", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--grad-accum", type=int)
    p.add_argument("--virtual-stages", type=int, default=1)
    p.add_argument("--expect-order", type=parse_order)
    p.add_argument("--rank-order", action="append", default=[], metavar="R=ORDER")
    p.add_argument("--log")
    p.add_argument("--require-comm", action="store_true")
    p.add_argument("--allow-dropped", action="store_true")
    p.add_argument("--selftest", action="store_true")
    args = p.parse_args(argv)
    if not args.selftest and (args.file is None or args.ranks is None or args.ranks < 1):
        p.error("FILE and --ranks N (>= 1) are required")
    orders = {}
    for item in args.rank_order:
        rank, _, text = item.partition("=")
        try:
            orders[int(rank)] = parse_order(text)
        except ValueError as e:
            p.error("--rank-order %s: %s" % (item, e))
    args.rank_order = orders
    return args


# ---- self-test: a hand-made good trace passes; each defect is caught ----

def synthetic(ranks=2, steps=2, accum=2):
    """A trace (as a dict) and its log lines, the way build/train writes them."""
    events = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "shardlab"}}]
    logs = []
    for r in range(ranks):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": r,
                       "args": {"name": "rank %d (dp %d, cp 0, tp 0, pp 0)" % (r, r), "recorded": 0, "dropped": 0}})
        t = 0.0

        def x(name, cat, ts, dur, **a):
            events.append({"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": 0, "tid": r, "args": a})

        for n in range(1, steps + 1):
            x("all-reduce-max dp", "comm", t, 1, step=n - 1, kind="all-reduce-max", group="dp", call="blocking", bytes=4)
            t += 2
            x("step %d" % n, "step", t, 100 * accum + 50, step=n)
            start = t
            for k in range(accum):
                x("forward %d" % k, "forward", t + 1, 40, step=n, micro_batch=k, chunk=0)
                x("post all-gather dp: layer 0", "comm", t + 2, 1, step=n, micro_batch=k, chunk=0, unit="layer 0",
                  kind="all-gather", group="dp", call="post", bytes=96)
                x("forward layer 0", "unit", t + 4, 10, step=n, micro_batch=k, chunk=0, unit="layer 0")
                x("wait all-gather dp: layer 0", "comm", t + 5, 3, step=n, micro_batch=k, chunk=0, unit="layer 0",
                  kind="all-gather", group="dp", call="wait", posted_bytes=96)
                x("release layer 0", "release", t + 13, 0, step=n, unit="layer 0", bytes=192)
                x("backward %d" % k, "backward", t + 50, 40, step=n, micro_batch=k, chunk=0)
                t += 100
            x("optimizer", "optimizer", t + 5, 20, step=n)
            x("all-gather dp", "comm", t + 6, 2, step=n, kind="all-gather", group="dp", call="blocking", bytes=8)
            t = start + 100 * accum + 60
            x("validation", "validation", t, 10, step=n)
            x("all-gather dp", "comm", t + 1, 2, step=n, kind="all-gather", group="dp", call="blocking", bytes=1000)
            t += 20
        logs.append({"type": "comm", "rank": r, "group": "dp", "kind": "all-gather",
                     "bytes_per_step": 96 * accum + 8, "calls_per_step": accum + 1, "theory_bytes_per_step": None})
    trace = {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {}}
    steplines = [{"type": "step", "step": n} for n in range(1, steps + 1)]
    return trace, steplines + logs


def selftest():
    import copy
    import os
    import tempfile

    def run(trace, logs, extra=()):
        with tempfile.TemporaryDirectory() as d:
            tp, lp = os.path.join(d, "t.json"), os.path.join(d, "run.json")
            with open(tp, "w") as f:
                f.write(trace if isinstance(trace, str) else json.dumps(trace))
            with open(lp, "w") as f:
                f.write("".join(json.dumps(l) + "\n" for l in logs))
            argv = [tp, "--ranks", "2", "--steps", "2", "--grad-accum", "2", "--expect-order", "F0 B0 F1 B1",
                    "--log", lp, "--require-comm"] + list(extra)
            return check(parse_args(argv))

    def spans(trace, tid, name):
        return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["tid"] == tid and e["name"] == name]

    good, logs = synthetic()
    failures = []
    errs = run(good, logs)
    if errs:
        failures.append("the good trace fails: %s" % errs)

    def expect(what, needle, trace, log=None, extra=()):
        errs = run(trace, logs if log is None else log, extra)
        if not any(needle in e for e in errs):
            failures.append("%s: no error containing %r (got %s)" % (what, needle, errs))

    bad = copy.deepcopy(good)  # F1 moved before B0 on rank 1, step 1 (both still inside the step)
    f1, b0 = spans(bad, 1, "forward 1")[0], spans(bad, 1, "backward 0")[0]
    f1["ts"], b0["ts"] = b0["ts"], f1["ts"]
    f1["dur"] = b0["dur"] = 40
    bad["traceEvents"].sort(key=lambda e: (e.get("tid", -1), e.get("ts", -1)))
    expect("wrong order", "order F0 F1 B0 B1", bad)
    expect("wrong order given", "order F0 B0 F1 B1, expected F0 F1 B0 B1", good,
           extra=("--rank-order", "0=F0 F1 B0 B1"))

    bad = copy.deepcopy(good)  # the optimizer starts inside the last backward
    spans(bad, 0, "optimizer")[0]["ts"] -= 30
    bad["traceEvents"].sort(key=lambda e: (e.get("tid", -1), e.get("ts", -1)))
    expect("optimizer early", "before the last backward", bad)

    bad = copy.deepcopy(good)  # a forward running into its backward
    spans(bad, 0, "forward 0")[0]["dur"] = 60
    expect("overlap", "overlaps", bad)

    bad = copy.deepcopy(good)  # a unit's span labelled with another micro-batch than the pass it lies in
    spans(bad, 0, "forward layer 0")[0]["args"]["micro_batch"] = 1
    expect("unit outside its micro-batch", "lies outside that micro-batch's forward", bad)

    bad = copy.deepcopy(good)  # a unit's collective whose name does not say the unit
    spans(bad, 1, "wait all-gather dp: layer 0")[0]["name"] = "wait all-gather dp"
    expect("unit missing from a name", "expected 'wait all-gather dp: layer 0'", bad)

    bad = copy.deepcopy(good)  # a release without its bytes
    del spans(bad, 0, "release layer 0")[0]["args"]["bytes"]
    expect("release without bytes", "without its name or bytes", bad)

    bad = copy.deepcopy(good)  # rank 1's track missing
    bad["traceEvents"] = [e for e in bad["traceEvents"] if e.get("tid") != 1 or e.get("ph") == "M" and e["name"] == "process_name"]
    expect("missing rank", "tracks", bad)

    bad = copy.deepcopy(good)  # ts going backwards in file order
    ev = bad["traceEvents"]
    i = ev.index(spans(bad, 0, "optimizer")[0])
    ev[i], ev[i - 1] = ev[i - 1], ev[i]
    expect("non-monotonic", "monotonic", bad)

    bad = copy.deepcopy(good)  # an all-gather's bytes off by one
    spans(bad, 1, "post all-gather dp: layer 0")[0]["args"]["bytes"] = 97
    expect("bytes", "bytes in the trace's steps", bad)

    bad = copy.deepcopy(good)  # a backward missing: the count and the step's micro-batches
    bad["traceEvents"].remove(spans(bad, 0, "backward 1")[-1])
    expect("count", "3 backward spans", bad)

    bad = copy.deepcopy(good)
    [m for m in bad["traceEvents"] if m["name"] == "thread_name"][0]["args"]["dropped"] = 5
    expect("dropped", "events dropped", bad)
    expect("dropped without instant", "no \"trace full\" instant", bad, extra=("--allow-dropped",))

    expect("not JSON", "not valid JSON", json.dumps(good)[:-3])
    expect("comm record missing", "no comm record", good, log=[l for l in logs if l["type"] == "step"])

    for f in failures:
        print("FAIL selftest: " + f)
    print("trace_check selftest: %s" % ("ok" if not failures else "%d failures" % len(failures)))
    return 1 if failures else 0


def main(argv):
    args = parse_args(argv)
    if args.selftest:
        return selftest()
    errors = check(args)
    for e in errors:
        print("FAIL %s: %s" % (args.file, e))
    if not errors:
        print("ok   %s: %d ranks%s" % (args.file, args.ranks,
                                       "" if args.steps is None else ", %d steps" % args.steps))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
