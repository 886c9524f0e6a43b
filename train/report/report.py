"""build/report: a run's JSON lines (--log_json) as pictures and one page.

    build/report RUN.json [RUN2.json ...] [--trace TRACE.json] --out DIR

Reads the records the trainer writes (train/run/run_loop.c, train/report/report_memory.c,
train/report/report_run_record.c, train/report/report_energy.c): "run", "step" (with its
joules where a meter read them), "memory_setup", "memory", "comm", "energy" (the run's
summary: docs/ENERGY.md) and, where the run has them, "memory_phase"; a pipeline timeline comes from a
Chrome trace-event file (--trace). Writes DIR/NAME.png and DIR/NAME.svg for
each picture the runs have data for, and DIR/index.html showing them, with
"not in this run" where a picture has no data. Several runs (one per ZeRO
stage, say) share each picture. Runs offline; matplotlib's Agg backend.
"""
import argparse
import html
import json
import os
import re
import sys

# The tracked categories of the memory table, in its order (include/mem.h):
# model states, activations, comm buffers and scratch, so a bar is every
# tracked byte of its rank; the report stacks them in this order, bottom up.
STATE_CATEGORIES = ["params", "master", "grads", "optimizer", "activations", "comm", "scratch"]
# One colour per category, kept across pictures.
CATEGORY_COLORS = {
    "params": "#4c72b0", "master": "#55a868", "grads": "#c44e52", "optimizer": "#8172b2",
    "activations": "#ccb974", "comm": "#64b5cd", "scratch": "#8c8c8c",
}
# Where several runs give more bar pairs than this, each run shows rank 0 only.
MAX_BAR_PAIRS = 16
# At most this many ranks get a line in a run's memory timeline (ranks of one
# stage differ only by padding and 8-bit blocks).
MAX_TIMELINE_RANKS = 4
# Communication: at most this many runs side by side, then a new row.
COMM_COLUMNS = 2
MIB = 1024.0 * 1024.0
LINE_STYLES = ["-", "--", "-.", ":"]
MARKERS = ["o", "s", "^", "D"]


def human_bytes(b):
    for unit, size in (("GiB", 1024.0 ** 3), ("MiB", MIB), ("KiB", 1024.0)):
        if b >= size:
            return "%.1f %s" % (b / size, unit)
    return "%.0f B" % b


# The step record's energy fields (docs/ENERGY.md), each a number or null.
STEP_ENERGY = ("joules", "joules_per_token", "tflop_per_joule", "planned_joules")
# Per record type: the numeric fields it must have, and those it may have
# (or give as null). Records of other types are kept out of the pictures.
RECORD_NUMBERS = {
    "step": (("step", "loss"), ("val_loss", "ms", "mfu", "tokens_per_s") + STEP_ENERGY),
    "memory": (("rank", "measured_bytes"), ("theory_bytes",)),
    "comm": (("rank", "bytes_per_step"), ("calls_per_step", "theory_bytes_per_step")),
    "memory_phase": (("rank", "step", "index"), ("total", "theory_total")),
    "pipeline": (("rank", "stage", "bubble"), ("bubble_theory", "busy_s", "wait_s", "total_s")),
    "energy": (("steps",), ("meters", "joules_per_step", "joules_per_token", "tflop_per_joule",
                            "planned_joules_per_step", "watts")),
}
# ... and the text fields.
RECORD_TEXT = {"memory": ("category",), "comm": ("group", "kind"), "memory_phase": ("phase",),
               "energy": ("source", "why_not")}


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # NaN is not


class ReportError(Exception):
    """Bad input: said in one line, exit status 1."""


def load_matplotlib():
    try:
        import matplotlib
    except ImportError:
        raise ReportError("python3-matplotlib is not installed (Debian's python3-matplotlib for /usr/bin/python3): "
                          "run `make deps`")
    matplotlib.use("Agg")
    # Same input, same SVG bytes: no date, fixed ids.
    matplotlib.rcParams["svg.hashsalt"] = "shardlab"
    import matplotlib.pyplot as plt
    return plt


class Run:
    """One --log_json file. A resumed run appends to its log, so steps
    accumulate and the last memory table (the end of the run) wins."""

    def __init__(self, path):
        self.path = path
        self.name = os.path.splitext(os.path.basename(path))[0]
        self.machine = None      # the first "run" record
        self.steps = []          # "step" records, in file order
        self.setup = None        # "memory_setup": zero, world_size, tp, pp, psi, optimizer
        self.memory = []         # "memory" records of the last table
        self.comm = []           # "comm" records of the last table
        self.phases = []         # "memory_phase" records
        self.energy = None       # the last "energy" record (a resumed run's last summary)
        self.pipeline = []       # "pipeline" records of the last table: each rank's bubble beside the theory
        self.read()

    def read(self):
        try:
            f = open(self.path, encoding="utf-8")
        except OSError as e:
            raise ReportError("cannot open run log %s: %s" % (self.path, e.strerror))
        with f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError as e:
                    raise ReportError("%s line %d is not JSON: %s" % (self.path, number, e))
                if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
                    raise ReportError("%s line %d is not a record: no \"type\"" % (self.path, number))
                self.add(rec, number)
        if not (self.machine or self.steps or self.memory or self.phases or self.pipeline):
            raise ReportError("%s has no shardlab records (run, step, memory): is it a --log_json file?" % self.path)

    def add(self, rec, number):
        kind = rec["type"]
        need, may = RECORD_NUMBERS.get(kind, ((), ()))
        missing = [k for k in need if k not in rec]
        if missing:
            raise ReportError("%s line %d: %s record without %s" % (self.path, number, kind, ", ".join(missing)))
        missing = [k for k in RECORD_TEXT.get(kind, ()) if not isinstance(rec.get(k), str)]
        if missing:
            raise ReportError("%s line %d: %s record without text %s" % (self.path, number, kind, ", ".join(missing)))
        # Numbers where the pictures expect them (null allowed where optional).
        for key in list(need) + [k for k in may if rec.get(k) is not None]:
            if not is_number(rec[key]):
                raise ReportError("%s line %d: %s record: \"%s\" is not a number" % (self.path, number, kind, key))
        if kind == "run" and self.machine is None:
            self.machine = rec
        elif kind == "step":
            self.steps.append(rec)
        elif kind == "memory_setup":
            self.setup, self.memory, self.comm, self.pipeline = rec, [], [], []
        elif kind == "memory":
            self.memory.append(rec)
        elif kind == "comm":
            self.comm.append(rec)
        elif kind == "energy":
            self.energy = rec
        elif kind == "pipeline":
            self.pipeline.append(rec)
        elif kind == "memory_phase":
            if not isinstance(rec["bytes"], dict) or not all(is_number(v) for v in rec["bytes"].values()):
                raise ReportError("%s line %d: memory_phase \"bytes\" is not an object of numbers" %
                                  (self.path, number))
            self.phases.append(rec)

    def label_parts(self):
        """The run's setup as words: ["ZeRO-1", "N = 2", "adamw", ...]."""
        if self.setup and is_number(self.setup.get("zero")) and is_number(self.setup.get("world_size")):
            s = self.setup
            parts = ["ZeRO-%d" % s["zero"], "%d rank%s" % (s["world_size"], "" if s["world_size"] == 1 else "s")]
            for lever in ("tp", "pp", "cp"):
                if s.get(lever, 1) > 1:
                    parts.append("%s %d" % (lever, s[lever]))
            if s.get("optimizer"):
                parts.append(s["optimizer"])
            if self.machine and isinstance(self.machine.get("gemm_dtype"), str):
                parts.append("%s GEMMs" % self.machine["gemm_dtype"])
            return parts
        return [self.name]

    def label(self):
        return ", ".join(self.label_parts())

    def dp_size(self):
        """N of the ZeRO formulas: the ranks that share one copy of a part of the model, as the
        memory_setup record names it (n_zero: dp x cp), or world / (tp pp) in older logs."""
        s = self.setup or {}
        if is_number(s.get("n_zero")):
            return int(s["n_zero"])
        model_ranks = 1
        for lever in ("tp", "pp"):
            model_ranks *= s.get(lever, 1) if is_number(s.get(lever)) else 1
        return s["world_size"] // model_ranks

    def split(self):
        """Whether a rank holds a part of the model (tp or pp > 1): each rank's own Psi_r."""
        s = self.setup or {}
        return any(is_number(s.get(lever)) and s[lever] > 1 for lever in ("tp", "pp"))

    def psi_of(self, rank):
        """Psi of the ZeRO formulas for a rank: its Psi_r (memory_setup's psi_ranks) where the model is
        split, else the model's; None where the log does not name it (an older log's other ranks)."""
        s = self.setup or {}
        ranks = s.get("psi_ranks")
        if isinstance(ranks, list) and rank < len(ranks) and is_number(ranks[rank]):
            return ranks[rank]
        return s.get("psi") if rank == 0 or not self.split() else None

    def ranks(self):
        return sorted({r["rank"] for r in self.memory})

    def state_bytes(self, rank, which):
        """{category: bytes} of one rank, which = measured_bytes or theory_bytes."""
        out = {}
        for r in self.memory:
            if r["rank"] == rank and r["category"] in STATE_CATEGORIES:
                out[r["category"]] = r.get(which) or 0
        return out


def run_labels(runs):
    """Short labels that tell the runs apart, and the words they all share:
    eight runs of one optimizer on one machine read "ZeRO-1, 2 ranks" each,
    with "adamw, fp32 GEMMs" said once (in the title), so no label is long
    enough to collide with its neighbour. Where two runs share every word
    their file names tell them apart."""
    parts = [run.label_parts() for run in runs]
    common = [w for w in parts[0] if all(w in p for p in parts)] if len(runs) > 1 else []
    labels = [", ".join(w for w in p if w not in common) or run.name for p, run in zip(parts, runs)]
    if len(set(labels)) < len(labels):
        labels = ["%s (%s)" % (lab, run.name) for lab, run in zip(labels, runs)]
    return labels, ", ".join(common)


def say_common(ax, common, what=""):
    """The words every run shares, once, above the first axes' title (a
    figure's suptitle would overlap the titles of a grid of axes)."""
    head = "; ".join(t for t in (what, common and "every run: " + common) if t)
    if head:
        ax.set_title("%s\n%s" % (head, ax.get_title()), fontsize=9)


def legend_outside(ax, fontsize=8):
    """The legend right of the axes: with eight runs it would cover the lines."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=fontsize)


def save(plt, fig, out_dir, name, written):
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(out_dir, "%s.%s" % (name, ext)), dpi=110, metadata={"Date": None} if ext == "svg" else None)
    plt.close(fig)
    written.append(name)


def plot_loss(plt, runs, out_dir, written):
    runs = [r for r in runs if r.steps]
    if not runs:
        return "no step records"
    labels, common = run_labels(runs)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for i, (run, label) in enumerate(zip(runs, labels)):
        # Runs that agree step for step (ZeRO stages do) draw on top of each
        # other: a line style and a marker each keep them all visible.
        color, style, marker = "C%d" % i, LINE_STYLES[i % len(LINE_STYLES)], MARKERS[i % len(MARKERS)]
        steps = [s["step"] for s in run.steps]
        ax.plot(steps, [s["loss"] for s in run.steps], style, color=color, alpha=0.8, label="%s train" % label)
        val = [(s["step"], s["val_loss"]) for s in run.steps if s.get("val_loss") is not None]
        if val:
            ax.plot(*zip(*val), ":", linewidth=1, marker=marker, markersize=7, color=color,
                    markerfacecolor="none", label="%s validation" % label)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy loss (nats per token)")
    ax.set_title("loss" + (" (%s)" % common if common else ""), fontsize=10)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    save(plt, fig, out_dir, "loss", written)
    return None


def plot_step_time(plt, runs, out_dir, written):
    runs = [r for r in runs if any("ms" in s for s in r.steps)]
    if not runs:
        return "no step times"
    labels, common = run_labels(runs)
    fig, (ax_ms, ax_mfu) = plt.subplots(1, 2, figsize=(13, 4))
    for i, (run, label) in enumerate(zip(runs, labels)):
        timed = [s for s in run.steps if "ms" in s]
        style = LINE_STYLES[i % len(LINE_STYLES)]
        ax_ms.plot([s["step"] for s in timed], [s["ms"] for s in timed], style, color="C%d" % i, label=label)
        mfu = [(s["step"], 100.0 * s["mfu"]) for s in timed if s.get("mfu") is not None]
        if mfu:
            ax_mfu.plot(*zip(*mfu), style, color="C%d" % i, label=label)
    ax_ms.set(xlabel="optimizer step", ylabel="ms per step", title="step time")
    ax_mfu.set(xlabel="optimizer step", ylabel="MFU (%)", title="model FLOPs utilization")
    say_common(ax_ms, common)
    for ax in (ax_ms, ax_mfu):
        ax.grid(alpha=0.3)
    legend_outside(ax_mfu)
    save(plt, fig, out_dir, "step_time", written)
    return None


def plot_memory(plt, runs, out_dir, written):
    """Per rank: a stacked bar of measured bytes beside one of theory."""
    runs = [r for r in runs if r.memory]
    if not runs:
        return "no memory records"
    names, common = run_labels(runs)
    name_of = {id(run): name for run, name in zip(runs, names)}
    pairs = [(run, rank) for run in runs for rank in run.ranks()]
    if len(runs) > 1 and len(pairs) > MAX_BAR_PAIRS:
        pairs = [(run, run.ranks()[0]) for run in runs]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(pairs) + 3), 5))
    ticks, labels, shown, tallest = [], [], set(), 0.0
    x, previous = 0.0, None
    for run, rank in pairs:
        if previous is not None and previous is not run:
            x += 0.8  # a gap between runs
        previous = run
        for offset, which, hatch in ((-0.2, "measured_bytes", None), (0.2, "theory_bytes", "//")):
            bottom = 0.0
            values = run.state_bytes(rank, which)
            for cat in STATE_CATEGORIES:
                height = values.get(cat, 0) / MIB
                if height <= 0:
                    continue
                ax.bar(x + offset, height, 0.38, bottom=bottom, color=CATEGORY_COLORS[cat], hatch=hatch,
                       edgecolor="white", label=None if cat in shown else cat)
                shown.add(cat)
                bottom += height
            ax.text(x + offset, bottom, human_bytes(sum(values.values())), ha="center", va="bottom", fontsize=6,
                    rotation=90)
            tallest = max(tallest, bottom)
        ticks.append(x)
        # one word a line: a label no wider than its pair of bars
        labels.append("%s\nrank %d" % (name_of[id(run)].replace(", ", "\n"), rank) if len(runs) > 1
                      else "rank %d" % rank)
        x += 1.0
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylim(0, 1.2 * tallest if tallest > 0 else 1)  # room for the totals
    ax.set_ylabel("MiB per rank")
    ax.set_title("memory per rank at the end of the run%s\nmeasured (left, solid) beside theory (right, hatched); "
                 "the model states alone: the next picture" % (" (%s)" % common if common else ""), fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    save(plt, fig, out_dir, "memory", written)
    return None


# The ZeRO paper's model states (Rajbhandari et al. 2020, section 5): params
# of p bytes, gradients of g bytes and K bytes of optimizer states (fp32
# master copy included) per parameter; stage s shards, over the N data-
# parallel ranks, the optimizer states from stage 1, the gradients from 2,
# the parameters at 3. Mixed-precision Adam: p = g = 2, K = 4 + 8 = 12, so
# ZeRO-0 holds (2 + 2 + 12) Psi = 16 Psi.
MODEL_STATES = ["params", "master", "grads", "optimizer"]
SHARDED_FROM = {"params": 3, "grads": 2, "master": 1, "optimizer": 1}


def zero_state_bytes(stage, n, psi, p, g, k):
    """Model-state bytes per rank: stage 0 (p + g + K) Psi, 1 (p + g) Psi + K Psi / N,
    2 p Psi + (g + K) Psi / N, 3 (p + g + K) Psi / N."""
    whole = {"params": p, "grads": g, "K": k}
    sharded_from = {"params": SHARDED_FROM["params"], "grads": SHARDED_FROM["grads"], "K": SHARDED_FROM["optimizer"]}
    return sum(b * psi / (n if stage >= sharded_from[c] else 1) for c, b in whole.items())


def bytes_per_param(run, rank=None):
    """(p, g, K) of a run: each model-state category's bytes over all its
    copies' elements: a sharded category's bytes summed over the ranks (one
    whole copy), a replicated one's from one rank, over Psi. Padding of the
    shards shows as a fraction above the dtype's bytes; 8-bit optimizers
    give a fractional K. With rank given (a run whose ranks hold parts of
    the model), that rank's bytes over its Psi_r, or Psi_r / N where the
    stage shards the category."""
    psi, stage = run.setup["psi"], run.setup["zero"]
    ranks = run.ranks()
    out = {}
    for cat in MODEL_STATES:
        per_rank = {r: sum(m["measured_bytes"] for m in run.memory if m["rank"] == r and m["category"] == cat)
                    for r in ranks}
        if rank is not None:
            n = run.dp_size() if stage >= SHARDED_FROM[cat] else 1
            out[cat] = per_rank[rank] * n / run.psi_of(rank)
        else:
            out[cat] = (sum(per_rank.values()) if stage >= SHARDED_FROM[cat] else per_rank[ranks[0]]) / psi
    return out["params"], out["grads"], out["master"] + out["optimizer"]


def model_state_runs(runs):
    """The runs the model-states panel draws: model states in their memory
    records, a ZeRO stage and Psi. Under tp or pp a rank holds a part of the
    model: its points are drawn on its own Psi_r's line (memory_setup's
    psi_ranks); cp splits the sequence, not the model (N = dp x cp)."""
    keep = []
    for run in runs:
        s = run.setup or {}
        if not (run.memory and is_number(s.get("zero")) and is_number(s.get("psi")) and s["psi"] > 0):
            continue
        if all(any(r["category"] == c for r in run.memory) for c in MODEL_STATES):
            keep.append(run)
    return keep


def model_state_points(runs):
    """Per run and rank: {stage, n, rank, measured, theory, formula, p, g, k, psi}: the
    rank's model-state bytes measured, the trainer's theory, and the paper's
    formula with the run's own bytes per parameter; psi is the rank's Psi_r
    where it holds a part of the model (split: True)."""
    points = []
    for run in model_state_runs(runs):
        s = run.setup
        n = run.dp_size()
        whole = None if run.split() else bytes_per_param(run)
        for rank in run.ranks():
            psi = run.psi_of(rank)
            if psi is None or psi <= 0:
                continue  # an older log names rank 0's part only
            p, g, k = whole or bytes_per_param(run, rank)
            measured = sum(r["measured_bytes"] for r in run.memory
                           if r["rank"] == rank and r["category"] in MODEL_STATES)
            theory = sum(r.get("theory_bytes") or 0 for r in run.memory
                         if r["rank"] == rank and r["category"] in MODEL_STATES)
            points.append({"run": run, "stage": s["zero"], "n": n, "rank": rank, "measured": measured,
                           "theory": theory, "formula": zero_state_bytes(s["zero"], n, psi, p, g, k),
                           "p": p, "g": g, "k": k, "psi": psi, "split": run.split()})
    return points


STAGE_FORMULAS = ["(p + g + K) Psi", "(p + g) Psi + K Psi / N", "p Psi + (g + K) Psi / N", "(p + g + K) Psi / N"]
# Points per unit of N on the formula's curve (it goes as 1/N).
CURVE_POINTS_PER_N = 20


def formula_text(stage, p, g, k):
    """The stage's formula with the run's numbers: ZeRO-1 of Adam "4 Psi + 12 Psi / N"."""
    whole = sum(b for b, c in ((p, "params"), (g, "grads"), (k, "optimizer")) if stage < SHARDED_FROM[c])
    shard = p + g + k - whole
    terms = (["%.3g Psi" % whole] if whole else []) + (["%.3g Psi / N" % shard] if shard else [])
    return " + ".join(terms)


def plot_model_states(plt, runs, out_dir, written):
    """Model-state bytes per rank against N, one colour per ZeRO stage: the
    measured points (every rank) on the paper's line."""
    points = model_state_points(runs)
    if not points:
        return "not in these runs (no run with model-state memory records)"
    fig, ax = plt.subplots(figsize=(10, 5))
    largest_n = max(pt["n"] for pt in points)
    ns = list(range(1, max(largest_n, 2) + 1))
    curve = [1 + i / CURVE_POINTS_PER_N for i in range((ns[-1] - 1) * CURVE_POINTS_PER_N + 1)]
    lines = {}  # one line per stage and bytes per parameter (two optimizers: two lines)
    for pt in points:
        lines.setdefault((pt["stage"], round(pt["p"], 3), round(pt["g"], 3), round(pt["k"], 3), pt["psi"]), pt)
    for i, ((stage, p, g, k, psi), pt) in enumerate(sorted(lines.items(), key=lambda kv: kv[0])):
        color = "C%d" % stage
        # a rank's part of the model (tp slice, pp stage): the formula's Psi is its Psi_r
        levers = ", ".join(w for w in pt["run"].label_parts() if w.split()[0] in ("tp", "pp", "cp"))
        part = ",\n  Psi_r = {:,}: rank {}'s part at {}".format(int(psi), pt["rank"], levers) if pt["split"] else ""
        ax.plot(curve, [zero_state_bytes(stage, n, psi, p, g, k) / 1024.0 for n in curve],
                LINE_STYLES[i % len(LINE_STYLES)], color=color,
                label="ZeRO-%d: %s = %s\n  (%s: p %.3g, g %.3g, K %.3g B%s)" % (
                    stage, STAGE_FORMULAS[stage], formula_text(stage, p, g, k),
                    pt["run"].setup.get("optimizer") or "?", p, g, k, part))
    shown = set()
    for pt in points:
        ax.plot(pt["n"], pt["measured"] / 1024.0, MARKERS[pt["stage"] % len(MARKERS)], color="C%d" % pt["stage"],
                markersize=8, markerfacecolor="none", label=None if "m" in shown else "measured, every rank")
        shown.add("m")
    for (stage, n, _), pt in sorted({(pt["stage"], pt["n"], pt["psi"]): pt for pt in points}.items()):
        ax.annotate("%.1f KiB" % (pt["measured"] / 1024.0), (n, pt["measured"] / 1024.0), textcoords="offset points",
                    xytext=(8, 0), va="center", fontsize=7, color="C%d" % stage)
    psis = sorted({pt["psi"] for pt in points if not pt["split"]})
    models = sorted({pt["run"].setup.get("psi_model") for pt in points if pt["split"]} - {None})
    ax.set_xticks(ns)
    ax.set_xlim(0.8, ns[-1] + 0.5)  # room for the numbers right of the points
    ax.set_xlabel("N, the ranks ZeRO shards over (dp, x cp with context parallelism)")
    ax.set_ylabel("KiB of model states per rank")
    ax.set_ylim(bottom=0)
    named = ["Psi = %s parameters" % ", ".join("{:,}".format(int(v)) for v in psis)] if psis else []
    if models:  # tp or pp: each rank's part, Psi_r, of a model of Psi
        named.append("under tp or pp a rank's Psi_r of Psi = %s" % ", ".join("{:,}".format(int(v)) for v in models))
    ax.set_title("model states alone per rank, %s;\npoints: measured, every rank; "
                 "lines: the ZeRO paper's, with each run's bytes per parameter\n"
                 "(p params, g grads, K master + optimizer)" % "; ".join(named), fontsize=9)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    save(plt, fig, out_dir, "model_states", written)
    return None


def phase_micro_batch(name):
    """The micro-batch a memory phase belongs to ("micro-batch 2 forward layer 0": 2), None for the optimizer's."""
    m = re.match(r"micro-batch (\d+)", name)
    return int(m.group(1)) if m else None


def timeline_steps(run):
    """The run's last recorded step: (step, {rank: its phases in order}) of at most MAX_TIMELINE_RANKS ranks."""
    step = max(p["step"] for p in run.phases)
    records = [p for p in run.phases if p["step"] == step]
    ranks = sorted({p["rank"] for p in records})[:MAX_TIMELINE_RANKS]
    return step, {rank: sorted((p for p in records if p["rank"] == rank), key=lambda p: p["index"]) for rank in ranks}


def plot_memory_timeline(plt, runs, out_dir, written):
    """Every run's tracked bytes through one step (the last one logged),
    phase by phase: rank 0's stacked by category, every rank's total, and
    the theory's total where the log has it; the step's start and end and
    each micro-batch marked."""
    runs = [r for r in runs if r.phases]
    if not runs:
        return "not in this run (no memory_phase records)"
    labels, common = run_labels(runs)
    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 1.5 + 2.8 * len(runs)), squeeze=False)
    for ax, run, label in zip(axes[:, 0], runs, labels):
        step, by_rank = timeline_steps(run)
        ranks = sorted(by_rank)
        rows = by_rank[ranks[0]]
        categories = [c for c in STATE_CATEGORIES if any(c in p["bytes"] for p in rows)]
        categories += sorted({c for p in rows for c in p["bytes"]} - set(categories))
        xs = list(range(len(rows)))
        ax.stackplot(xs, *[[p["bytes"].get(c, 0) / MIB for p in rows] for c in categories], step=None, alpha=0.75,
                     colors=[CATEGORY_COLORS.get(c, "C%d" % (i % 10)) for i, c in enumerate(categories)],
                     labels=["rank %d: %s" % (ranks[0], c) for c in categories])
        for j, rank in enumerate(ranks):
            totals = [(p["index"], p["total"] / MIB) for p in by_rank[rank] if is_number(p.get("total"))]
            if totals:
                ax.plot(*zip(*totals), LINE_STYLES[j % len(LINE_STYLES)], color="black", linewidth=1,
                        label="rank %d total" % rank)
        theory = [(p["index"], p["theory_total"] / MIB) for p in rows if is_number(p.get("theory_total"))]
        for j, rank in enumerate(ranks):  # each rank's own walk (its layout and schedule)
            own = [(p["index"], p["theory_total"] / MIB) for p in by_rank[rank] if is_number(p.get("theory_total"))]
            if own:
                ax.plot(*zip(*own), MARKERS[j % len(MARKERS)], color="red", markersize=4, markerfacecolor="none",
                        label="rank %d theory" % rank)
        # The step's edges, and where each micro-batch starts (0-based, as the trace's)
        ax.axvline(-0.5, color="black", linewidth=1.5)
        ax.axvline(len(rows) - 0.5, color="black", linewidth=1.5)
        top = max(p["total"] for p in rows if is_number(p.get("total"))) / MIB if theory or rows else 1
        previous = object()
        for x, p in zip(xs, rows):
            mb = phase_micro_batch(p["phase"])
            if mb != previous:
                ax.axvline(x - 0.5, color="gray", linestyle=":", linewidth=1)
                ax.text(x - 0.4, top * 1.02, "mb %d" % mb if mb is not None else "optimizer", fontsize=7,
                        va="bottom")
                previous = mb
        every = max(1, len(rows) // 40)  # keep the phase names readable
        ax.set_xticks(xs[::every])
        ax.set_xticklabels([re.sub(r"^micro-batch \d+ ", "", str(p["phase"])) for p in rows][::every], rotation=60,
                           ha="right", fontsize=6)
        ax.set_xlim(-0.7, len(rows) - 0.3)
        ax.set_ylim(0, top * 1.15)
        ax.set_ylabel("MiB")
        ax.set_title("%s: step %d (its edges: solid lines; micro-batches: dotted)%s" % (
            label, step, "" if theory else "; no theory per phase in this log (an older log's pp or tp run)"), fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        if ax is axes[0, 0]:  # the same colours in every run: one legend
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    say_common(axes[0, 0], common, "tracked memory through one step, phase by phase")
    save(plt, fig, out_dir, "memory_timeline", written)
    return None


def plot_comm(plt, runs, out_dir, written):
    """Bytes per step per group and collective: each rank beside the theory."""
    if not any(r.comm for r in runs):
        return "no comm records (no steps, or a log older than the comm records)"
    # A one-rank run has no traffic to draw.
    runs = [r for r in runs if any(c["bytes_per_step"] or c.get("theory_bytes_per_step") for c in r.comm)]
    if not runs:
        return "no collective traffic in these runs (one rank each)"
    labels, common = run_labels(runs)
    columns = min(len(runs), COMM_COLUMNS)
    rows_of_plots = (len(runs) + columns - 1) // columns
    fig, axes = plt.subplots(rows_of_plots, columns, figsize=(6 * columns + 2, 4.5 * rows_of_plots), squeeze=False)
    for ax in axes.flat[len(runs):]:
        ax.axis("off")
    for ax, run, label in zip(axes.flat, runs, labels):
        rows = []
        for r in run.comm:
            key = "%s %s" % (r["group"], r["kind"])
            if key not in rows:
                rows.append(key)
        ranks = sorted({r["rank"] for r in run.comm})
        width = 0.8 / (len(ranks) + 1)
        biggest = max(max(r["bytes_per_step"], r.get("theory_bytes_per_step") or 0) for r in run.comm)
        unit, size = ("MiB", MIB) if biggest >= 10 * MIB else ("KiB", 1024.0)
        for j, rank in enumerate(ranks):
            got = {"%s %s" % (r["group"], r["kind"]): r["bytes_per_step"] for r in run.comm if r["rank"] == rank}
            ys = [i + j * width for i in range(len(rows))]
            ax.barh(ys, [got.get(k, 0) / size for k in rows], width, color="C%d" % (j % 10),
                    label="rank %d measured" % rank)
            for y, k in zip(ys, rows):  # the exact number: small ones (scalars) have no visible bar
                ax.text(got.get(k, 0) / size, y, " " + human_bytes(got.get(k, 0)), va="center", fontsize=6)
        theory = {"%s %s" % (r["group"], r["kind"]): r.get("theory_bytes_per_step") for r in run.comm}
        tx = [(i + len(ranks) * width, theory[k] / size) for i, k in enumerate(rows) if theory[k] is not None]
        if tx:
            ax.barh([t[0] for t in tx], [t[1] for t in tx], width, color="none", edgecolor="black", hatch="//",
                    label="theory")
        ax.set_yticks([i + len(ranks) * width / 2 for i in range(len(rows))])
        ax.set_yticklabels(rows)
        ax.invert_yaxis()
        received = any(r["kind"] == "recv" for r in run.comm)
        ax.set_xlabel("%s sent per optimizer step%s" % (unit, " (recv: received)" if received else ""))
        ax.set_title("%s: communication per group and collective" % label, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=8)
    say_common(axes[0, 0], common)
    save(plt, fig, out_dir, "comm", written)
    return None


def trace_spans(path):
    """Chrome trace events -> row labels in (pid, tid) order and spans
    [(row label, name, start us, duration us)]: complete events ("X") and
    begin/end pairs ("B"/"E")."""
    events = load_trace_events(path)
    names, spans, open_spans = {}, [], {}
    for e in events:
        if not isinstance(e, dict):
            continue
        where = (e.get("pid", 0), e.get("tid", 0))
        ph = e.get("ph")
        if ph == "M" and e.get("name") in ("thread_name", "process_name"):
            names[(where, e["name"])] = str(e.get("args", {}).get("name", ""))
        elif ph == "X" and "ts" in e:
            spans.append((where, str(e.get("name", "")), float(e["ts"]), float(e.get("dur", 0))))
        elif ph == "B" and "ts" in e:
            open_spans.setdefault(where, []).append((str(e.get("name", "")), float(e["ts"])))
        elif ph == "E" and "ts" in e and open_spans.get(where):
            name, start = open_spans[where].pop()
            spans.append((where, name, start, float(e["ts"]) - start))

    tids = {}
    for (pid, tid), _, _, _ in spans:
        tids.setdefault(pid, set()).add(tid)

    def row_label(where):
        """One row per (pid, tid): the process's name (or rank pid), then the
        thread's name, or its id where the process has several threads."""
        pid, tid = where
        process = next((v for (w, k), v in names.items() if k == "process_name" and w[0] == pid), "") or \
            "rank %s" % pid
        thread = names.get((where, "thread_name")) or ("thread %s" % tid if len(tids[pid]) > 1 else "")
        return "%s / %s" % (process, thread) if thread else process

    order = sorted({w for w, _, _, _ in spans}, key=lambda w: (natural_key(w[0]), natural_key(w[1])))
    return [row_label(w) for w in order], [(row_label(w), n, s, d) for w, n, s, d in spans]


def natural_key(value):
    """Sorts "rank 10" after "rank 9", numbers before names."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", str(value)) if t]


# What a pipeline picture shows of a shardlab trace, by span name: each
# micro-batch's compute, the waits for point-to-point messages, every other
# collective, and the optimizer; the whole-step spans (which contain the
# rest) and non-blocking posts are left out. Other traces: by name.
SPAN_COLORS = {"forward": "tab:blue", "backward": "tab:green", "p2p wait": "tab:red",
               "collective": "tab:orange", "optimizer": "tab:purple", "other": "tab:gray"}


UNIT_SPAN = re.compile(r"^(forward|backward|release) (embedding|head|layer \d+)$")


def span_kind(name):
    base = re.sub(r"[\s_#]*\d+", "", name).strip() or name
    # a unit's spans and releases ("forward layer 3") lie inside the
    # micro-batch's bars: the residency picture draws them
    if base == "step" or base.startswith("post ") or UNIT_SPAN.match(name):
        return None
    if base in ("forward", "backward", "optimizer"):
        return base
    if base.startswith("recv") or base.startswith("wait send") or base.startswith("wait recv"):
        return "p2p wait"
    if base.split(" ")[0] in ("all-reduce", "all-reduce-max", "reduce-scatter", "all-gather", "scalars", "wait",
                              "send"):
        return "collective"
    return "other"


STEP_SPAN = re.compile(r"^step (\d+)$")


def one_step_window(spans):
    """The last step every row ran, from the trace's "step N" spans: (N,
    start us, end us, {row: (its start, its end)}), or None where the trace
    has no step spans. A whole run of ZeRO-3 is hundreds of short
    collectives in one strip; one step of it is readable."""
    steps = {}
    for row, name, start, dur in spans:
        m = STEP_SPAN.match(name)
        if m:
            steps.setdefault(int(m.group(1)), {})[row] = (start, start + dur)
    rows = {row for row, name, _, _ in spans if STEP_SPAN.match(name) is None}
    full = [n for n, by_row in steps.items() if set(by_row) >= rows] or list(steps)
    if not full:
        return None
    n = max(full)
    by_row = steps[n]
    return n, min(a for a, _ in by_row.values()), max(b for _, b in by_row.values()), by_row


def pipeline_bubbles(runs):
    """The pipeline records of the runs: [(label, rank, stage, measured bubble, theory (p - 1) / (v m + p - 1))]."""
    out = []
    for run in runs:
        for r in sorted(run.pipeline, key=lambda r: r["rank"]):
            out.append((run.label(), r["rank"], r["stage"], r["bubble"], r.get("bubble_theory")))
    return out


def plot_pipeline(plt, trace, out_dir, written, runs=()):
    if trace is None:
        return "not in this run (no --trace file given)"
    rows, all_spans = trace_spans(trace)
    spans = [s for s in all_spans if span_kind(s[1]) is not None]
    if not spans:
        return "not in this run (the trace has no spans)"
    window = one_step_window(all_spans)
    if window is not None:  # the spans of one step, cut to it
        step, w0, w1, edges = window
        spans = [(row, name, max(start, w0), min(start + dur, w1) - max(start, w0))
                 for row, name, start, dur in spans if start < w1 and start + dur > w0]
    kinds = [k for k in SPAN_COLORS if any(span_kind(s[1]) == k for s in spans)]
    color = SPAN_COLORS
    t0 = window[1] if window else min(s[2] for s in spans)
    span = (window[2] if window else max(s[2] + s[3] for s in spans)) - t0
    fig, ax = plt.subplots(figsize=(12, 1.6 + 0.6 * len(rows)))
    shown = set()
    for row, name, start, dur in spans:
        kind = span_kind(name)
        y = rows.index(row)
        ax.barh(y, dur / 1e3, left=(start - t0) / 1e3, height=0.7, color=color[kind], edgecolor="black",
                linewidth=0.3, label=None if kind in shown else kind)
        shown.add(kind)
        number = re.findall(r"\d+", name)
        # the micro-batch (0-based, as the trace's), where the bar has room; a
        # collective's number is its unit's layer, not a micro-batch
        if number and kind in ("forward", "backward") and dur >= 0.02 * span:
            ax.text((start - t0 + dur / 2) / 1e3, y, number[-1], ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=8)
    ax.invert_yaxis()
    title = "timeline per rank (%s)" % os.path.basename(trace)
    if window:
        for row, (a, b) in edges.items():  # each rank's step: its start and its end
            y = rows.index(row)
            for x in (a, b):
                ax.plot([(x - t0) / 1e3] * 2, [y - 0.45, y + 0.45], color="black", linewidth=2)
        title += ": step %d only, its start and end on each rank (black)" % step
        ax.set_xlabel("ms since step %d started" % step)
    else:
        title += ": the trace has no step spans, every event shown"
        ax.set_xlabel("ms since the first event")
    bubbles = pipeline_bubbles(runs)
    if bubbles:
        # the log's run, named: the trace given may be another run's
        for label in dict.fromkeys(b[0] for b in bubbles):
            title += "\nbubble measured over the run (%s): " % label + ", ".join(
                "rank %d %.1f%%" % (b[1], 100 * b[3]) for b in bubbles if b[0] == label)
        theory = sorted({b[4] for b in bubbles if is_number(b[4])})
        if theory:
            title += "; theory (p - 1) / (v m + p - 1) = " + ", ".join("%.1f%%" % (100 * t) for t in theory)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    if len(kinds) <= 12:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    save(plt, fig, out_dir, "pipeline", written)
    return None


def load_trace_events(path):
    """The trace's event list (a list, or an object's "traceEvents")."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise ReportError("cannot open trace %s: %s" % (path, e.strerror))
    except ValueError as e:
        raise ReportError("trace %s is not JSON: %s" % (path, e))
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ReportError("trace %s has no trace events (a list, or an object with \"traceEvents\")" % path)
    return [e for e in events if isinstance(e, dict)]


def residency(events):
    """Which units' gathered params are resident when, over the last step:
    (step, {row: {unit: [(from us, to us)]}}, {row: {unit: [(from, to)]}} of
    their use), a row per rank: its track's thread name (shardlab's tracks
    are threads of one process, "rank 1 (dp 1, ...)"), cut at " (". A unit
    is resident from the post of its all-gather (args.unit) to its release ("release layer 3", cat "release"), or to the step's end;
    its use is its "forward/backward UNIT" spans (cat "unit"). None where the
    trace has no releases (ZeRO 0-2 keep every param resident)."""
    step_of = lambda e: (e.get("args") or {}).get("step")
    steps = [step_of(e) for e in events if e.get("cat") == "release" and is_number(step_of(e))]
    if not steps:
        return None
    step = max(steps)
    names = {(e.get("pid", 0), e.get("tid", 0)): str((e.get("args") or {}).get("name", "")).split(" (")[0]
             for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    track = lambda e: names.get((e.get("pid", 0), e.get("tid", 0))) or "pid %s tid %s" % (e.get("pid", 0),
                                                                                        e.get("tid", 0))
    ends = {track(e): float(e["ts"]) + float(e.get("dur", 0)) for e in events
            if e.get("ph") == "X" and e.get("name") == "step %d" % step}
    resident, used, since = {}, {}, {}
    for e in sorted((e for e in events if step_of(e) == step and "ts" in e), key=lambda e: float(e["ts"])):
        pid, unit, t = track(e), (e.get("args") or {}).get("unit"), float(e["ts"])
        if not isinstance(unit, str) or t > ends.get(pid, t):  # validation after the step: not the step's
            continue
        args = e.get("args") or {}
        if args.get("kind") == "all-gather" and args.get("call") == "post":
            # a prefetch may post the next gather of a unit before the last
            # copy's release: each release ends the oldest open gather
            since.setdefault((pid, unit), []).append(t)
        elif e.get("cat") == "release" and since.get((pid, unit)):
            resident.setdefault(pid, {}).setdefault(unit, []).append((since[pid, unit].pop(0), t))
        elif e.get("cat") == "unit":
            used.setdefault(pid, {}).setdefault(unit, []).append((t, t + float(e.get("dur", 0))))
    for (pid, unit), posts in since.items():  # never released within the step
        for t in posts:
            resident.setdefault(pid, {}).setdefault(unit, []).append((t, ends.get(pid, t)))
    return step, resident, used


def unit_order(name):
    """embedding, layer 0, layer 1, ..., head: the model's order."""
    if name == "embedding":
        return (0, 0)
    m = re.match(r"layer (\d+)$", name)
    return (1, int(m.group(1))) if m else (2, 0)


def plot_residency(plt, trace, out_dir, written):
    if trace is None:
        return "not in this run (no --trace file given)"
    found = residency(load_trace_events(trace))
    if found is None:
        return "not in this run (the trace has no releases: below ZeRO-3 every unit's params stay resident)"
    step, resident, used = found
    pids = sorted(resident, key=natural_key)[:MAX_TIMELINE_RANKS]
    t0 = min(a for pid in pids for spans in resident[pid].values() for a, _ in spans)
    fig, axes = plt.subplots(len(pids), 1, sharex=True, figsize=(12, 1.0 + 0.45 * sum(len(resident[p]) for p in pids) +
                                                    0.6 * len(pids)), squeeze=False)
    for ax, pid in zip(axes[:, 0], pids):
        units = sorted(set(resident[pid]) | set(used.get(pid, {})), key=unit_order)
        for y, unit in enumerate(units):
            for a, b in resident[pid].get(unit, []):
                ax.barh(y, (b - a) / 1e3, left=(a - t0) / 1e3, height=0.7, color="tab:blue", alpha=0.35,
                        label=None if y or a != resident[pid][unit][0][0] else "params gathered (resident)")
            for a, b in used.get(pid, {}).get(unit, []):
                ax.barh(y, (b - a) / 1e3, left=(a - t0) / 1e3, height=0.35, color="tab:green",
                        label=None if y or a != used[pid][unit][0][0] else "forward / backward of the unit")
        ax.set_yticks(range(len(units)))
        ax.set_yticklabels(units, fontsize=8)
        ax.invert_yaxis()
        ax.set_ylabel(pid)
        ax.grid(axis="x", alpha=0.3)
    axes[0, 0].set_title("ZeRO-3: which units' params are gathered over step %d (%s)\n"
                         "from the post of a unit's all-gather to its release" % (step, os.path.basename(trace)),
                         fontsize=9)
    axes[0, 0].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    axes[-1, 0].set_xlabel("ms since the first gather of step %d" % step)
    save(plt, fig, out_dir, "residency", written)
    return None


def energy_planned(run):
    """The planner's E = t x P a step (the summary's, else the steps' mean), or None without a P."""
    e = run.energy or {}
    if is_number(e.get("planned_joules_per_step")):
        return e["planned_joules_per_step"]
    planned = [s["planned_joules"] for s in run.steps if is_number(s.get("planned_joules"))]
    return sum(planned) / len(planned) if planned else None


def energy_figures(run):
    """The run's energy (docs/ENERGY.md) as {steps, joules_per_step,
    joules_per_token, tflop_per_joule, planned, watts, source}, or None where
    no step was measured; the run's "energy" summary record when it has one,
    else the measured steps' own fields (a log cut short before the summary).
    planned is the planner's E = t x P a step (None without a P)."""
    e = run.energy or {}
    measured = [s for s in run.steps if is_number(s.get("joules"))]
    planned = energy_planned(run)
    if is_number(e.get("joules_per_step")):
        return {"steps": e["steps"], "joules_per_step": e["joules_per_step"],
                "joules_per_token": e.get("joules_per_token"), "tflop_per_joule": e.get("tflop_per_joule"),
                "planned": planned, "watts": e.get("watts"), "source": e.get("source")}
    if not measured:
        return None
    total = sum(s["joules"] for s in measured)
    per_token = [s["joules_per_token"] for s in measured if is_number(s.get("joules_per_token"))]
    flop_steps = [s for s in measured if is_number(s.get("tflop_per_joule"))]
    return {"steps": len(measured), "joules_per_step": total / len(measured),
            "joules_per_token": sum(per_token) / len(per_token) if len(per_token) == len(measured) else None,
            # the steps' model TFLOP over their joules, not a mean of ratios
            "tflop_per_joule": (sum(s["tflop_per_joule"] * s["joules"] for s in flop_steps) / total
                                if total > 0 and len(flop_steps) == len(measured) else None),
            "planned": planned, "watts": e.get("watts"), "source": e.get("source") or "the step records"}


def energy_why_not(run):
    """Why a run has no measured joules, in the trainer's words where it said."""
    if run.energy and run.energy.get("why_not"):
        return run.energy["why_not"]
    if run.energy:
        return "no step was measured"
    return "the run had no meter (no energy record)"


def plot_energy(plt, runs, out_dir, written):
    runs = [r for r in runs if any(is_number(s.get("joules")) for s in r.steps)]
    if not runs:
        return "not in this run (no step measured joules)"
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, run in enumerate(runs):
        measured = [(s["step"], s["joules"]) for s in run.steps if is_number(s.get("joules"))]
        ax.plot(*zip(*measured), color="C%d" % i, label="%s measured" % run.label())
        planned = [(s["step"], s["planned_joules"]) for s in run.steps if is_number(s.get("planned_joules"))]
        if planned:
            ax.plot(*zip(*planned), "--", color="C%d" % i, label="%s planner's E = t x P" % run.label())
    ax.set(xlabel="optimizer step", ylabel="joules per step", title="energy per step")
    ax.grid(alpha=0.3)
    ax.legend()
    save(plt, fig, out_dir, "energy", written)
    return None


def energy_table(runs):
    """The page's energy lines: a row of figures per measured run, and
    "energy: not available here (why)" for each run without a meter."""
    def num(v, fmt):
        return fmt % v if is_number(v) else "-"
    lines, rows = [], []
    for run in runs:
        f = energy_figures(run)
        if f is None:
            planned = energy_planned(run)
            text = "energy: not available here (%s)" % energy_why_not(run)
            if planned is not None:
                text += "; planner's E = t x P: %.4g J a step" % planned
            lines.append("<p>%s: %s</p>" % (html.escape(run.label()), html.escape(text)))
            continue
        ratio = f["joules_per_step"] / f["planned"] if is_number(f["planned"]) and f["planned"] > 0 else None
        rows.append("<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>"
                    "<td>%s</td></tr>" % (
                        html.escape(run.label()), num(f["steps"], "%d"), num(f["joules_per_step"], "%.4g"),
                        num(f["joules_per_token"] * 1e3 if is_number(f["joules_per_token"]) else None, "%.4g"),
                        num(f["tflop_per_joule"], "%.4g"),
                        num(f["planned"], "%.4g") + (" (%s W)" % num(f["watts"], "%.0f") if is_number(f["watts"])
                                                     else ""),
                        num(ratio, "%.3f"), html.escape(str(f["source"] or ""))))
    if rows:
        lines[:0] = ["<table border=\"1\" cellpadding=\"4\"><tr><th>run</th><th>steps measured</th>"
                     "<th>J a step</th><th>mJ a token</th><th>model TFLOP per J</th>"
                     "<th>planner's E = t x P, J a step</th><th>measured / planned</th><th>meter</th></tr>"] + \
            rows + ["</table>"]
    return lines


PICTURES = [  # (file name, heading, what it shows, plot function)
    ("loss", "Loss", "training loss per step; validation loss where the run evaluated", plot_loss),
    ("step_time", "Step time", "milliseconds per optimizer step and MFU", plot_step_time),
    ("memory", "Memory per rank",
     "model states, activations and comm buffers at the end of the run, measured beside the theory", plot_memory),
    ("model_states", "Model states per rank",
     "params, grads, master and optimizer alone, per ZeRO stage and N, on the ZeRO paper's lines", plot_model_states),
    ("memory_timeline", "Memory through one step",
     "every run's tracked bytes by category, phase by phase, beside the theory", plot_memory_timeline),
    ("comm", "Communication", "bytes each rank sends per step, per group and collective, beside the theory",
     plot_comm),
    ("pipeline", "Pipeline timeline",
     "what each rank does when in one step, from the trace; the measured bubble beside (p - 1) / (v m + p - 1)",
     plot_pipeline),
    ("residency", "Params resident per unit (ZeRO-3)",
     "over one step, per rank: each unit's params from its all-gather to its release, and its compute",
     plot_residency),
    ("energy", "Energy", "joules each step measured, beside the planner's E = t x P", plot_energy),
]


def run_summary(run):
    m = run.machine or {}
    last = run.steps[-1] if run.steps else {}
    parts = [("log", run.path), ("setup", run.label()), ("CPU", m.get("cpu_model")),
             ("BLAS", " ".join(str(m[k]) for k in ("blas_library", "blas_version", "blas_corename") if k in m)),
             ("threads per rank", m.get("threads")), ("steps", last.get("step")),
             ("final loss", last.get("loss")), ("tokens/s", last.get("tokens_per_s"))]
    return "; ".join("%s: %s" % (k, html.escape(str(v))) for k, v in parts if v not in (None, ""))


def write_index(out_dir, runs, trace, results):
    lines = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\"><title>shardlab report</title>",
             "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}img{max-width:100%}"
             ".missing{color:#888}</style></head><body>",
             "<h1>shardlab report</h1>", "<ul>"]
    lines += ["<li>%s</li>" % run_summary(run) for run in runs]
    if trace:
        lines.append("<li>trace: %s</li>" % html.escape(trace))
    lines.append("</ul>")
    for name, heading, what, _ in PICTURES:
        lines.append("<h2>%s</h2>" % html.escape(heading))
        missing = results[name]
        if missing:
            lines.append("<p class=\"missing\">%s: %s</p>" % (html.escape(what), html.escape(missing)))
        else:
            lines.append("<p>%s (<a href=\"%s.svg\">SVG</a>)</p>" % (html.escape(what), name))
            lines.append("<img src=\"%s.png\" alt=\"%s\">" % (name, html.escape(heading)))
        if name == "energy":  # the figures, or why there are none, under the picture's place
            lines += energy_table(runs)
    lines.append("</body></html>")
    path = os.path.join(out_dir, "index.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def main(argv):
    parser = argparse.ArgumentParser(prog="build/report", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN.json", help="--log_json files, one per run")
    parser.add_argument("--trace", help="Chrome trace-event JSON of a pipeline run")
    parser.add_argument("--out", required=True, help="folder for the pictures and index.html")
    args = parser.parse_args(argv)
    try:
        runs = [Run(p) for p in args.runs]
        plt = load_matplotlib()
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as e:
            raise ReportError("cannot make folder %s: %s" % (args.out, e.strerror))
        written, results = [], {}
        for name, _, _, plot in PICTURES:
            if name == "pipeline":  # the trace, with the runs' measured bubbles
                results[name] = plot(plt, args.trace, args.out, written, runs)
            elif name == "residency":
                results[name] = plot(plt, args.trace, args.out, written)
            else:
                results[name] = plot(plt, runs, args.out, written)
        path = write_index(args.out, runs, args.trace, results)
    except ReportError as e:
        print("build/report: %s" % e, file=sys.stderr)
        return 1
    except OSError as e:  # writing the pictures or the page
        print("build/report: cannot write into %s: %s" % (args.out, e), file=sys.stderr)
        return 1
    print("report: %s (%d picture%s)" % (path, len(written), "" if len(written) == 1 else "s"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
