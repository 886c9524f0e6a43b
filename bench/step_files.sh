#!/usr/bin/env bash
# The files a ZeRO-3 data-parallel step passes through (issue 36, part 2: "at
# most 12 source files in at most 5 folders, kernels' dispatch included").
#
# How: builds TREE's trainer with gcov instrumentation (-O0 --coverage) into a
# build directory of its own (a temporary one; TREE's build/ is not touched),
# runs the ZeRO-3 step on 2 ranks for N, N+K and N+2K steps, REPEAT times
# each, and compares each source line's execution count between the runs.
# Start-up and shut-down do the same work in every run (the data, the model
# and the seed are the same); what differs is K more steps per level. A line
# is a step's line when every run of a level counted it at least K times more
# than every run of the level below (at least once per extra step, on that
# rank, in that translation unit). A file counts when one of its lines is a
# step's line. So the step measured is a step after the N-th: work that only
# the first step does (a cache filled on first use) does not count; on
# 3e68ce0, --steps 1 gives the same list as --steps 3.
#
# Why three levels and repeats: some start-up and shut-down counts depend on
# timing. The start-up peak FLOP/s probe runs trials for a fixed time, not a
# fixed count (on the bf16 path through the step's own GEMM code: oneDNN's
# matmul, the dispatch, the kernel timing), and a shut-down report
# branches on whether a step beat the probe. Such a line counts the same in
# distribution at every level, so it passes only if its random counts happen
# to come out in increasing order, level over level, by K or more: with 2
# repeats of 3 levels, at most 8 in 720 (1.1%) for a line with continuous
# noise, and less with ties. A step line whose count also carries that noise
# still passes when its growth per level exceeds the noise. Files with lines
# that grew but did not pass are named below the list, not counted.
#
# What counts as a file:
#   - a .c, .h or .cu file under TREE whose compiled code ran in the step.
#     Headers count when code of theirs ran: static inline functions and
#     other function bodies in a header, attributed to the header's own lines.
#   - not a header that only gives types, prototypes or macros. Gcov
#     attributes a macro's expansion to the line that uses it, so the header
#     that defines it does not count.
#   - not system or library headers (/usr/include, MPI, OpenBLAS, oneDNN,
#     gcc's): only paths inside TREE count. Libraries outside TREE
#     (libmpi, libopenblas, libdnnl, libgomp) are not counted.
#   - tests/ files never count: the trainer does not link them.
# A folder is a file's directory: model/cpu and model are two folders.
#
# Why -O0: every function keeps its own body, including each translation
# unit's copy of a static inline header function, and every line keeps its
# own counter. Nothing is inlined into a caller or folded away, so each line
# is attributed to the file it is written in. -march=native stays, as in the
# normal build: no path here depends on it at compile time. STEP_FILES_OPT
# replaces "-O0 -march=native -g" (for example, to check the list at -O2; on
# 3e68ce0 -O2 gives the same lists for fp32 and auto: bench/STEP_FILES.md).
# The Makefile needs no hook for this: BUILD and OPT are plain := variables,
# which make's command line overrides, and OPT goes into CFLAGS and LDFLAGS.
#
# Per rank: each rank writes its own counters (GCOV_PREFIX per
# OMPI_COMM_WORLD_RANK), so the list says if a file ran on one rank only. The
# total is the union of the ranks.
#
# The step measured (DTYPE fp32, the default):
#   mpirun --oversubscribe --allow-run-as-root -np 2 BUILD/train
#     --config configs/tiny.conf --threads 1 --zero 3 --val_every 0
#     --train_data X --param_dtype fp32 --grad_dtype fp32 --act_dtype fp32
#     --gemm_dtype fp32 --steps N
# where X comes from BUILD/prepare --input data/kjv.txt. Other dtype sets:
#   auto     no dtype flags: the default path, bf16 where this CPU has it
#            (the trainer's start-up lines say which GEMM path it took)
#   bf16ref  bf16 params, grads, activations and GEMMs through the reference
#            GEMM (--gemm_kernel reference)
#
# Usage: bench/step_files.sh [options] [TREE_DIR] [-- TRAINER_ARGS...]
#   TREE_DIR      the source tree to measure (default: this script's tree)
#   --dtype D     fp32 | auto | bf16ref, or a list such as fp32,auto
#                 (default fp32); one report per set
#   --steps N     steps of the shortest runs (default 3; at least 1: with 0
#                 steps the shut-down reports print less, and that would count)
#   --extra K     steps each level adds (default 3)
#   --repeat R    runs per level (default 2)
#   --list        print only the file paths, one per line (for diff)
#   --keep DIR    build and keep the counters in DIR instead of a temporary
#                 directory (a second call with the same DIR reuses the build:
#                 one DIR per tree and STEP_FILES_OPT)
#   -- ARGS       more trainer flags for every run (for example --overlap 0)
# Needs mpicc, mpirun, gcov (gcc's, the same version as the compiler) and
# python3. Not part of `make test`. Exit 0 when every run and the count
# worked. Temporary files go to /tmp/shardlab_stepfiles_* and are removed.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
dtypes=fp32
steps=3
extra=3
repeat=2
list_only=0
keep=
tree=
targs=()
while [ $# -gt 0 ]; do
    case $1 in
        --dtype) dtypes=${2:?--dtype needs a value}; shift 2 ;;
        --steps) steps=${2:?--steps needs a value}; shift 2 ;;
        --extra) extra=${2:?--extra needs a value}; shift 2 ;;
        --repeat) repeat=${2:?--repeat needs a value}; shift 2 ;;
        --list) list_only=1; shift ;;
        --keep) keep=${2:?--keep needs a directory}; shift 2 ;;
        --) shift; targs=("$@"); break ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "step_files.sh: unknown option $1 (--help)" >&2; exit 2 ;;
        *) [ -z "$tree" ] || { echo "step_files.sh: one TREE_DIR only" >&2; exit 2; }
           tree=$1; shift ;;
    esac
done
tree=$(cd "${tree:-$here}" && pwd) || exit 2
{ [ -f "$tree/Makefile" ] && [ -f "$tree/configs/tiny.conf" ]; } ||
    { echo "step_files.sh: $tree is not a shardlab tree" >&2; exit 2; }
case $steps$extra$repeat in *[!0-9]*) echo "step_files.sh: --steps, --extra and --repeat take numbers" >&2; exit 2 ;; esac
{ [ "$steps" -ge 1 ] && [ "$extra" -ge 1 ] && [ "$repeat" -ge 1 ]; } ||
    { echo "step_files.sh: --steps, --extra and --repeat must be >= 1" >&2; exit 2; }
for d in ${dtypes//,/ }; do
    case $d in fp32|auto|bf16ref) ;; *) echo "step_files.sh: unknown dtype set $d (fp32, auto, bf16ref)" >&2; exit 2 ;; esac
done

tmp=$(mktemp -d /tmp/shardlab_stepfiles_XXXXXX) || exit 2
trap 'rm -rf "$tmp"' EXIT
if [ -n "$keep" ]; then
    mkdir -p "$keep" && work=$(cd "$keep" && pwd) || exit 2
else
    work=$tmp
fi
build=$work/build
say() { [ "$list_only" = 1 ] || echo "$@"; }

# The build: the Makefile's own rules, BUILD and OPT set on make's command
# line (see "Why -O0" above).
opt=${STEP_FILES_OPT:--O0 -march=native -g}
say "building $tree with gcov ($opt --coverage) in $build ..."
make -C "$tree" -j2 BUILD="$build" OPT="$opt --coverage" "$build/train" "$build/prepare" \
    >"$tmp/build.log" 2>&1 || { tail -20 "$tmp/build.log" >&2; echo "step_files.sh: the build failed" >&2; exit 1; }
[ -n "$(find "$build/obj" -name '*.gcno' -print -quit)" ] ||
    { echo "step_files.sh: no .gcno files in $build/obj: the Makefile did not take OPT" >&2; exit 1; }

# The data (prepare's own counters go to a directory that is thrown away).
GCOV_PREFIX=$tmp/prepare-gcda "$build/prepare" --input "$tree/data/kjv.txt" \
    --train "$tmp/train.bin" --val "$tmp/val.bin" >"$tmp/prepare.log" 2>&1 ||
    { cat "$tmp/prepare.log" >&2; exit 1; }

# Each rank writes its counters under $SF_GCDA/rankR (GCOV_PREFIX keeps the
# object's absolute path below it).
cat >"$tmp/rank_prefix.sh" <<'EOF'
#!/bin/sh
GCOV_PREFIX="$SF_GCDA/rank${OMPI_COMM_WORLD_RANK:-0}"
export GCOV_PREFIX
exec "$@"
EOF
chmod +x "$tmp/rank_prefix.sh"

dtype_flags() {
    case $1 in
        fp32) echo "--param_dtype fp32 --grad_dtype fp32 --act_dtype fp32 --gemm_dtype fp32" ;;
        auto) echo "" ;;
        bf16ref) echo "--param_dtype bf16 --grad_dtype bf16 --act_dtype bf16 --gemm_dtype bf16 --gemm_kernel reference" ;;
    esac
}

# run NAME DTYPE STEPS: one 2-rank run; its counters in $work/gcda/NAME/rankR
run() {
    local name=$1 dt=$2 n=$3 out=$work/gcda/$1
    rm -rf "$out"
    mkdir -p "$out"
    # shellcheck disable=SC2046
    (cd "$tmp" && SF_GCDA=$out timeout 600 mpirun -x SF_GCDA --oversubscribe --allow-run-as-root -np 2 \
        "$tmp/rank_prefix.sh" "$build/train" --config "$tree/configs/tiny.conf" --threads 1 --zero 3 \
        --val_every 0 --train_data "$tmp/train.bin" $(dtype_flags "$dt") --steps "$n" "${targs[@]}") \
        >"$work/$name.out" 2>&1 || { tail -20 "$work/$name.out" >&2; echo "step_files.sh: run $name failed" >&2; return 1; }
    # gcov finds a .gcda's notes (.gcno) beside it
    local r
    for r in "$out"/rank*; do
        (cd "$build/obj" && find . -name '*.gcno' -print0 | xargs -0 cp --parents -t "$r$build/obj/") || return 1
    done
}

# counts NAME: "rank unit file line count" for every line gcov knows, in $work/NAME.counts
counts() {
    local name=$1 r
    : >"$work/$name.counts"
    for r in "$work/gcda/$name"/rank*; do
        find "$r" -name '*.gcda' | sort >"$tmp/gcda.list"
        [ -s "$tmp/gcda.list" ] || { echo "step_files.sh: no counters from ${r##*/} of run $name" >&2; return 1; }
        (cd "$tree" && xargs gcov --json-format --stdout <"$tmp/gcda.list" 2>"$tmp/gcov.err") |
            python3 "$tmp/lines.py" "${r##*/rank}" "$tree" >>"$work/$name.counts" ||
            { cat "$tmp/gcov.err" >&2; return 1; }
    done
}

# gcov's JSON (one object per .gcda, concatenated) -> "rank unit file line
# count", only files under TREE. A header line is kept apart per translation
# unit (unit: the object's path under obj/), so that a clock read in a
# timing-dependent loop of one unit does not hide the same header's
# fixed-count use in another.
cat >"$tmp/lines.py" <<'PY'
import json, os, sys
rank, tree = sys.argv[1], os.path.realpath(sys.argv[2])
text, dec, pos, total = sys.stdin.read(), json.JSONDecoder(), 0, {}
while True:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos >= len(text):
        break
    doc, pos = dec.raw_decode(text, pos)
    cwd = doc["current_working_directory"]
    unit = doc["data_file"].rsplit("/obj/", 1)[-1]
    for f in doc["files"]:
        path = os.path.realpath(os.path.join(cwd, f["file"]))
        if not path.startswith(tree + os.sep):
            continue  # a system or library header
        rel = os.path.relpath(path, tree)
        for ln in f["lines"]:
            key = (unit, rel, ln["line_number"])
            total[key] = total.get(key, 0) + ln["count"]
for (unit, rel, line), c in sorted(total.items()):
    print(rank, unit, rel, line, c)
PY

# the report: argv = label K list-only then, per level, a comma-separated list
# of its runs' count files
cat >"$tmp/report.py" <<'PY'
import os, sys
from collections import defaultdict
label, extra, list_only = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
def load(p):
    d = {}
    with open(p) as fh:
        for row in fh:
            rank, unit, f, line, c = row.split()
            d[(rank, unit, f, int(line))] = int(c)
    return d
levels = [[load(p) for p in arg.split(",")] for arg in sys.argv[4:]]
keys = set().union(*(run.keys() for lv in levels for run in lv))
step = defaultdict(lambda: defaultdict(set))  # file -> rank -> its step lines
runs = defaultdict(int)                       # file -> most runs of one line per step (one rank, one unit)
grew = defaultdict(int)                       # file -> lines that grew but did not pass
for key in keys:
    rank, unit, f, line = key
    counts = [[run.get(key, 0) for run in lv] for lv in levels]
    if all(min(hi) - max(lo) >= extra for lo, hi in zip(counts, counts[1:])):
        step[f][rank].add(line)
        per = (sum(counts[-1]) / len(counts[-1]) - sum(counts[0]) / len(counts[0])) / (extra * (len(levels) - 1))
        runs[f] = max(runs[f], round(per))
    elif max(counts[-1]) > min(counts[0]):
        grew[f] += 1
ranks = sorted({k[0] for k in keys}, key=int)
files = sorted(step)
if list_only:
    print("\n".join(files))
    sys.exit(0)
# Each file's role (the first pattern that matches its path). The issue's
# count is of the step's own code, "kernels' dispatch included": the
# dispatch files (model/dispatch.c,
# optim/optim_dispatch.c, include/collectives.h) count, and so does every
# file no pattern names. A file with any other code that runs in the step
# is counted whole (model/device.c, include/counters.h, include/grid.h).
ROLES = [
    ("kernel", r"^model/(cpu|cuda)/",
     "the CPU's and the GPU's kernels, behind the op tables (model/layer_ops.h, model/bufops_ops.h)"),
    ("kernel", r"^optim/(cuda/|(adamw|adamw8bit|adamw8bit_state|sgd|sgd8bit|lion|lion8bit|adafactor|blockwise8|"
               r"qmap|qmap_codec|optim_ops_cpu)\.c$|[a-z0-9]+_rule\.h$|elementwise_loops\.h$|blockwise8\.h$)",
     "the update rules' kernels, behind the optimizer's table (optim/optim_ops.h)"),
    ("transport", r"^parallel/comm/(comm_|mpi_impl\.h$|nccl)",
     "the collectives' transports, behind the collectives table (include/collectives.h)"),
    ("observer", r"^train/measure/(?!trainer\.h$)|^train/run/run_(hooks|energy)\.c$|^include/(trace|kernel_timing)\.h$",
     "the instruments, attached to the step's named points (include/step_hooks.h, train/run/run_hooks.c)"),
    ("loop", r"^train/run/run_(team|stop_signal|device)\.c$|^train/measure/trainer\.h$|^parallel/comm/grid_agree\.c$",
     "the loop between steps (train/run/run_loop.c: trainer_run, around train_step)"),
    ("loop", r"^train/run/run_loop\.c$",
     "where the step is parallel/step.c's step_run: train/run/run_loop.c's train_step only times it, "
     "sums the pipeline's timing and fills the step's metrics for the log (before, train_step was the step "
     "itself, and run_loop.c counts as the step's)"),
]
import re
# run_loop.c is the loop's only in a tree whose step lives in parallel/step.c
STEP_APART = os.path.exists(os.path.join(os.environ["STEP_FILES_TREE"], "parallel", "step.c"))
def role(f):
    for name, pat, _ in ROLES:
        if re.search(pat, f) and (f != "train/run/run_loop.c" or STEP_APART):
            return name
    return "step"
folders = defaultdict(list)
for f in files:
    folders[os.path.dirname(f) or "."].append(f)
kinds = defaultdict(int)
for f in files:
    kinds[os.path.splitext(f)[1]] += 1
print(f"{label}: {len(files)} files in {len(folders)} folders (" +
      ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + ")")
head = "step lines, rank " + " ".join(ranks)
print(f"  {'folder/ (files)':<40} {head:>20}  {'max runs/step of a line':>24}")
for d in sorted(folders):
    print(f"  {d}/ ({len(folders[d])})")
    for f in folders[d]:
        per = " ".join(str(len(step[f].get(r, ()))) for r in ranks)
        on = [r for r in ranks if step[f].get(r)]
        only = f"  (rank {','.join(on)} only)" if len(on) < len(ranks) else ""
        tag = "" if role(f) == "step" else f"  [{role(f)}]"
        print(f"    {os.path.basename(f):<38} {per:>20}  {runs[f]:>24}{only}{tag}")
own = [f for f in files if role(f) == "step"]
own_folders = sorted({os.path.dirname(f) for f in own})
src = [f for f in own if not f.endswith(".h")]
src_folders = sorted({os.path.dirname(f) for f in src})
print(f"  the step's own code (kernels' dispatch included): {len(src)} source files in {len(src_folders)} folders, "
      f"and {len(own) - len(src)} headers' inline code: {len(own)} files in {len(own_folders)} folders")
for d in own_folders:
    print(f"    {d}/: " + " ".join(os.path.basename(f) for f in own if os.path.dirname(f) == d))
# The rooms of tp, cp and pp: issue 36 asks that a run without them (the
# step measured by default: dp 2, tp = cp = pp = 1) enter none.
ROOMS = ("model/tensor_parallel", "model/context_parallel", "parallel/pipeline")
entered = [r for r in ROOMS if any(f.startswith(r + "/") for f in files)]
print(f"  the rooms of tp, cp and pp ({', '.join(ROOMS)}) entered: " + (", ".join(entered) or "none"))
for name in dict.fromkeys(r[0] for r in ROLES):
    mine = [f for f in files if role(f) == name]
    why = "; ".join(w for n, _, w in ROLES if n == name)
    print(f"  [{name}] {len(mine)} files: {why}")
rest = sorted(f for f in grew if f not in step)
if rest:
    print("  not counted: files whose counts grew in some run but not by K per level in every run: " +
          ", ".join(f"{f} ({grew[f]} lines)" for f in rest))
PY

status=0
for dt in ${dtypes//,/ }; do
    say "dtype $dt: $repeat runs each of $steps, $((steps + extra)) and $((steps + 2 * extra)) steps on 2 ranks ..."
    args=()
    for level in 0 1 2; do
        names=()
        for rep in $(seq 1 "$repeat"); do
            name=$dt-$((steps + level * extra))-$rep
            if ! { run "$name" "$dt" "$((steps + level * extra))" && counts "$name"; }; then
                status=1
                continue 3
            fi
            names+=("$work/$name.counts")
        done
        args+=("$(IFS=,; echo "${names[*]}")")
    done
    say ""
    [ "$list_only" = 1 ] || grep -E '^(precision|GEMMs):' "$work/$dt-$steps-1.out"
    STEP_FILES_TREE=$tree python3 "$tmp/report.py" "ZeRO-3 step, dtype $dt, 2 ranks, $repeat runs each of $steps, $((steps + extra)) and \
$((steps + 2 * extra)) steps" "$extra" "$list_only" "${args[@]}" || status=1
    say ""
done
exit $status
