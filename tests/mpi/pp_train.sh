#!/usr/bin/env bash
# The trainer on the full grid, end to end: build/train logs the same loss
# at every one of 10 steps (within 1e-5; fp32) as one process reading the
# same micro-batches (grad_accum x dp), for
#   tp 2 x pp 2 on 4 ranks (1F1B and GPipe),
#   dp 2 x tp 2 x pp 2 on 8 ranks (oversubscribed), ZeRO-1, 1F1B, and
#   tp 2 x pp 2 with --sequence_parallel 1 on 4 ranks (the boundary carries
#   each tp rank's T/tp positions),
#   pp 2 (each schedule) and pp 3 with synchronous sends (NCCL's: below),
#   arch = llama at pp 2 (1F1B, interleaved) and dp 2 x pp 2 (GPipe, ZeRO-3),
# and every one of those runs reports each rank's memory, activations and
# pipeline traffic equal to its own theory (no "NO" in the tables); and
# resume states on and across grids (below).
# Usage: tests/mpi/pp_train.sh BUILD_DIR
set -u
. "$(dirname "$0")/env.sh" # build, tmp, mpi, $tmp/train.bin and val.bin
args=(--config configs/tiny.conf --threads 1 --steps 10 --n_layer 4 --param_dtype fp32 --grad_dtype fp32
      --act_dtype fp32 --val_every 5 --train_data "$tmp/train.bin" --val_data "$tmp/val.bin")
fails=0
same() { # name, reference log, log
    python3 - "$2" "$3" "$1" <<'PY'
import json, sys
def losses(p):
    return [json.loads(l)["loss"] for l in open(p) if '"type":"step"' in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(x - y) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print(f"{sys.argv[3]}: loss {a[0]:.6f} -> {a[-1]:.6f} over {len(b)} steps, max |loss diff| {worst:.2e}")
sys.exit(0 if len(a) == 10 and worst <= 1e-5 and a[-1] < a[0] else 1)
PY
}
run() { # name, ranks, grad_accum of the reference, args...
    local name=$1 n=$2 ref_accum=$3
    shift 3
    timeout 300 "$build/train" "${args[@]}" --grad_accum "$ref_accum" --log_json "$tmp/ref.json" >/dev/null 2>&1 ||
        { echo "!! reference run failed"; fails=$((fails + 1)); return; }
    if ! timeout 300 "${mpi[@]}" -np "$n" "$build/train" "${args[@]}" "$@" --log_json "$tmp/run.json" \
        >"$tmp/run.out" 2>&1; then
        echo "!! $name failed:"; tail -5 "$tmp/run.out"; fails=$((fails + 1)); return
    fi
    same "$name" "$tmp/ref.json" "$tmp/run.json" || fails=$((fails + 1))
    if grep -E "theory: NO|own: NO|the byte: NO|to the byte: NO" "$tmp/run.out"; then
        echo "!! $name: a rank differs from its theory"; fails=$((fails + 1))
    fi
}
run "tp 2 x pp 2, 1f1b" 4 3 --tp 2 --pp 2 --grad_accum 3
run "tp 2 x pp 2, gpipe" 4 3 --tp 2 --pp 2 --grad_accum 3 --schedule gpipe
run "dp 2 x tp 2 x pp 2, ZeRO-1, 1f1b" 8 6 --tp 2 --pp 2 --grad_accum 3 --zero 1
run "tp 2 x pp 2 + sequence parallel, 1f1b" 4 3 --tp 2 --pp 2 --grad_accum 3 --sequence_parallel 1
# LLaMA's blocks (arch = llama: GQA, SwiGLU, RoPE, an untied head: no
# tie between the first and the last stage) on each schedule, and with
# ZeRO-3 over dp 2 beside pp 2.
gpt2_args=("${args[@]}")
args+=(--arch llama --n_kv_head 2 --ffn_dim 96)
run "llama pp 2, 1f1b" 2 3 --pp 2 --grad_accum 3
run "llama pp 2, interleaved (2 chunks)" 2 4 --pp 2 --grad_accum 4 --schedule interleaved --virtual_stages 2
run "llama dp 2 x pp 2, gpipe, ZeRO-3" 4 6 --pp 2 --grad_accum 3 --schedule gpipe --zero 3
args=("${gpt2_args[@]}")
# Synchronous sends (SHARDLAB_MPI_SYNC_SENDS=1: MPI_Issend / MPI_Ssend),
# which complete only once matched and read the buffer then, as NCCL's do
# (parallel/comm/cuda/comm_nccl.h): a schedule that reused a buffer with
# its send in flight, or that waited on a send whose receive comes later,
# would show here as a wrong loss or a hang. Each schedule at pp 2 and
# 1f1b at pp 3, with validation (evaluation's forward-only order): the
# losses and validation losses of one process within 1e-5.
sync_same() { # name, reference log, log
    python3 - "$2" "$3" "$1" <<'PY'
import json, sys
def rows(p):
    return [json.loads(l) for l in open(p) if '"type":"step"' in l]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
pairs = [(x[k], y[k]) for x, y in zip(a, b) for k in ("loss", "val_loss") if x[k] is not None]
worst = max(abs(u - v) for u, v in pairs) if a and len(a) == len(b) and pairs else float("inf")
vals = sum(x["val_loss"] is not None for x in a)
print(f"{sys.argv[3]}: {len(b)} steps, {vals} validations, max |loss or val loss diff| {worst:.2e}")
sys.exit(0 if len(a) == 10 and vals >= 5 and worst <= 1e-5 else 1)
PY
}
sync_run() { # name, ranks, grad_accum, args...
    local name=$1 n=$2 accum=$3
    shift 3
    local eval=(--val_every 2 --val_batches 2) # 5 validations: the old slot race showed from the second
    timeout 300 "$build/train" "${args[@]}" --grad_accum "$accum" "${eval[@]}" --log_json "$tmp/sref.json" \
        >/dev/null 2>&1 ||
        { echo "!! reference run failed"; fails=$((fails + 1)); return; }
    if ! SHARDLAB_MPI_SYNC_SENDS=1 timeout 300 "${mpi[@]}" -x SHARDLAB_MPI_SYNC_SENDS -np "$n" "$build/train" \
        "${args[@]}" --grad_accum "$accum" "${eval[@]}" "$@" --log_json "$tmp/srun.json" >"$tmp/srun.out" 2>&1; then
        echo "!! $name failed:"; tail -5 "$tmp/srun.out"; fails=$((fails + 1)); return
    fi
    sync_same "$name" "$tmp/sref.json" "$tmp/srun.json" || fails=$((fails + 1))
}
sync_run "pp 2, gpipe, synchronous sends" 2 3 --pp 2 --schedule gpipe
sync_run "pp 2, 1f1b, synchronous sends" 2 3 --pp 2 --schedule 1f1b
sync_run "pp 2, interleaved (2 chunks), synchronous sends" 2 4 --pp 2 --schedule interleaved --virtual_stages 2
sync_run "pp 3, 1f1b, synchronous sends" 3 4 --pp 3
# Resume states on the grid: tp 2 x pp 2 stopped at step 5 and resumed on
# the same grid continues bit for bit (losses and norms as logged); the same
# state resumed on one process, and one process's state resumed at tp 4,
# continue within 1e-5 of the uninterrupted runs.
tail_same() { # name, uninterrupted log, resumed log, tolerance (0: exact)
    python3 - "$2" "$3" "$1" "$4" <<'PY'
import json, sys
def steps(p):
    return {r["step"]: r for r in (json.loads(l) for l in open(p) if '"type":"step"' in l)}
a, b, tol = steps(sys.argv[1]), steps(sys.argv[2]), float(sys.argv[4])
tail = [s for s in sorted(b) if s > 5]
worst = max(max(abs(a[s]["loss"] - b[s]["loss"]), abs(a[s]["grad_norm"] - b[s]["grad_norm"])) for s in tail)
ok = tail == list(range(6, 11)) and worst <= tol
print(f"{sys.argv[3]}: steps {tail[0]}..{tail[-1]}, max |loss or norm diff| {worst:.2e} (allowed {tol:g}): "
      + ("ok" if ok else "FAILED"))
sys.exit(0 if ok else 1)
PY
}
grid=(--tp 2 --pp 2 --grad_accum 3)
timeout 300 "${mpi[@]}" -np 4 "$build/train" "${args[@]}" "${grid[@]}" --log_json "$tmp/straight.json" >/dev/null 2>&1 &&
    timeout 300 "${mpi[@]}" -np 4 "$build/train" "${args[@]}" "${grid[@]}" --steps 5 --save_state "$tmp/grid5.state" \
        >/dev/null 2>&1 &&
    timeout 300 "${mpi[@]}" -np 4 "$build/train" "${args[@]}" "${grid[@]}" --resume "$tmp/grid5.state" \
        --log_json "$tmp/resumed.json" >/dev/null 2>&1 || { echo "!! grid resume runs failed"; fails=$((fails + 1)); }
tail_same "tp 2 x pp 2 resumed on its own grid" "$tmp/straight.json" "$tmp/resumed.json" 0 || fails=$((fails + 1))
timeout 300 "$build/train" "${args[@]}" --grad_accum 3 --resume "$tmp/grid5.state" --log_json "$tmp/one_resumed.json" \
    >/dev/null 2>&1 || { echo "!! one-process resume failed"; fails=$((fails + 1)); }
tail_same "tp 2 x pp 2's state resumed on one process" "$tmp/straight.json" "$tmp/one_resumed.json" 1e-5 ||
    fails=$((fails + 1))
timeout 300 "$build/train" "${args[@]}" --grad_accum 3 --steps 5 --save_state "$tmp/one5.state" >/dev/null 2>&1 &&
    timeout 300 "${mpi[@]}" -np 4 "$build/train" "${args[@]}" --grad_accum 3 --tp 4 --resume "$tmp/one5.state" \
        --log_json "$tmp/tp4_resumed.json" >/dev/null 2>&1 || { echo "!! tp 4 resume failed"; fails=$((fails + 1)); }
tail_same "one process's state resumed at tp 4" "$tmp/straight.json" "$tmp/tp4_resumed.json" 1e-5 || fails=$((fails + 1))
[ "$fails" -eq 0 ] && echo "pipeline training: passed" || { echo "pipeline training: $fails failed"; exit 1; }
