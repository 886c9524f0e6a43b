/* The trainer's theory column: what the formulas say this run's buffers,
 * FLOPs and traffic should be, computed from the config alone, itemised so
 * each line of a measured table has its formula beside it. */
#ifndef SHARDLAB_ACCOUNTING_H
#define SHARDLAB_ACCOUNTING_H

#include "../config/config.h"
#include "collectives.h"
#include "grid.h"
#include "mem.h"
#include "theory.h"
#include "../measure/timeline.h"

/* Where a rank sits in the grid (include/grid.h): its model is its
 * pipeline stage's layers and its tensor-parallel slice, its states are
 * sharded over its dp group. Every theory below is for one such rank.
 * dp and dp_rank are that group's: with context parallelism it is the
 * dp x cp ranks that hold the same weights (dp_rank = data index x cp +
 * cp_rank), as the grid's dp_comm; cp (>= 1) divides the rank's positions
 * of each sequence (activations per rank: T/cp). */
struct rank_place {
    int dp, dp_rank, tp, tp_rank, pp, pp_rank;
    int cp, cp_rank;
};

/* The context-parallel degree of a place; a place made without one (the
 * shard maps', the checkpoints') is cp 1. */
static inline int rank_place_cp(struct rank_place p) { return p.cp > 1 ? p.cp : 1; }

/* Data parallelism only: rank `rank` of N, the whole model. */
static inline struct rank_place rank_place_dp(int N, int rank) {
    return (struct rank_place){.dp = N, .dp_rank = rank, .tp = 1, .pp = 1, .cp = 1};
}
/* World rank `world_rank` of a grid of `world` ranks with the config's cp,
 * tp and pp, in the grid's order (tp innermost, then cp, then dp, pp
 * outermost). */
struct rank_place rank_place_of(const struct config *c, int world, int world_rank);
/* The same place read off a grid that is built (include/grid.h). */
struct grid;
struct rank_place rank_place_of_grid(const struct grid *g);
/* The rank's layout: its chunks of layers (pp_layers, or the even split;
 * pp x virtual_stages chunks under the interleaved schedule) and its tp
 * slice, the one layout every part of the trainer (engine, checkpoints,
 * theory) uses. -1 when the config cannot be split so (the trainer refuses
 * it first). */
int rank_layout(const struct config *c, struct rank_place p, struct model_layout *lay);
/* The same for the theory of any place: where there is none, the whole
 * model stands in. */
void rank_place_layout(const struct config *c, struct rank_place p, struct model_layout *lay);

/* The rows [v0, v1) of the vocabulary, padded to a multiple of 128 tp
 * (include/layout.h), that the rank's slice of wte holds (and the columns
 * of its logits), and how many of them lie at or past V: padding, zero and
 * never trained. Only the last tp ranks hold padding rows; at tp = 4 a rank
 * can hold nothing else. The model's own slice (tp_vocab_slice,
 * include/tensor_parallel.h) in the accounting's terms. */
struct vocab_rows {
    int v0, v1, padding;
};

struct vocab_rows rank_vocab_rows(const struct model_layout *lay);

/* Model states of `rank` (ZeRO 3.1 and 5 accounting) for ZeRO stage
 * c->zero over N data-parallel ranks: bytes per category and the rule in
 * words (8-bit states depend on where the rank's slices cut tensors). Padding (vocab rows V..Vp, and each unit rounded up to a multiple
 * of N) is its own term, derived from the layout. */
struct state_line {
    enum mem_category category;
    double bytes_per_param;  /* w_p, 4 for master, w_g, 8 for Adam */
    bool sharded;            /* held as 1/N by this stage */
    double psi_bytes;        /* bytes_per_param x Psi (/ N when sharded) */
    double padding_bytes;    /* bytes_per_param x padding elements of the buffer */
    const char *rule;        /* e.g. "w_p = 2 B x Psi (bf16)" */
};

/* the most lines a rule has: params, master, grads, and adafactor's first
 * moment and statistics (theory_trainer_states) */
enum { MAX_STATE_LINES = 5 };

struct state_theory {
    double psi;             /* parameters, real vocabulary */
    double padding;         /* full buffer elements - Psi */
    double shard_padding;   /* shard buffer elements - Psi / N */
    int N;
    int n;
    struct state_line lines[MAX_STATE_LINES];
};

struct state_theory theory_trainer_states(const struct config *c, struct rank_place p);

/* Data-parallel traffic of one optimizer step per rank, bytes, by
 * collective: exact for this engine's padded units (what the counters must
 * show), and ZeRO's formula with Psi (THEORY.md 1.3, 7). */
struct comm_theory {
    double all_reduce, reduce_scatter, all_gather; /* exact, padded */
    double total;
    double zero_formula;    /* the paper's volume with Psi, ring (N-1)/N factors */
    const char *rule;
};

struct comm_theory theory_trainer_comm(const struct config *c, struct rank_place p);

/* Pipeline traffic of one optimizer step on this rank's stage (bytes it
 * sends and receives over the pp group: an activation forward and its
 * gradient backward per micro-batch and boundary, act dtype: (B,T,C), or
 * with sequence parallelism the rank's (B,T/tp,C): half of the planner's
 * theory_pp_boundary_bytes per boundary), and the tied wte's gradient
 * all-reduced over the first and last stage (ring volume 2 (N-1)/N Vp C
 * w_g, N = 2). */
struct pipe_comm_theory {
    double send, recv;
    double tie_all_reduce;
};

struct pipe_comm_theory theory_trainer_pp_comm(const struct config *c, struct rank_place p);

/* Tensor-parallel traffic of one optimizer step (bytes this rank sends
 * over its tp group of t ranks, ring volumes, M = B T C x 4: gpt.c reduces
 * fp32 whatever act_dtype is), validation excluded. Per micro-batch, the
 * layers as theory_tp_layer_collectives counts them (train/theory/theory_comm.c),
 * and without sequence parallelism
 *   each of the stage's layers: 4 (5 with full recompute) all-reduces of M;
 *   first stage: the vocabulary-parallel embedding's g, M;
 *   last stage: the head's f in the backward (dlnf, M);
 * with sequence parallelism (Korthikanti et al. 2022) each (B,T,C)
 * collective a reduce-scatter or all-gather, (t-1)/t M each, issued as B
 * calls (one per sequence, model/tensor_parallel/tp.h):
 *   each layer: 4 reduce-scatters and 6 all-gathers (full: 5 and 8) and
 *     one all-reduce of its LayerNorm gradients (4C fp32);
 *   first stage: g-bar after the rows' lookup (reduce-scatter) and its
 *     backward (all-gather);
 *   last stage: g before the logits, in the forward and again in the
 *     backward (2 all-gathers), its backward (reduce-scatter of dlnf), and
 *     the final LayerNorm's gradients' all-reduce (2C fp32);
 * and either way, last stage: the cross-entropy's sum of exponentials and
 * target logit (all-reduce of 2 B T) and its row maxima (B T,
 * all-reduce-max). */
struct tp_comm_theory {
    bool sp;                 /* sequence parallelism on (c->sequence_parallel and t > 1) */
    double per_layer;        /* one layer, one micro-batch, every kind (theory_tp_layer_bytes) */
    struct theory_tp_layer_calls layer; /* one layer's collectives per micro-batch */
    int layer_all_reduces;   /* all-reduces of (B,T,C) per layer per micro-batch (0 with sp) */
    double layers, embedding, head, ce_sum; /* all-reduce bytes per step, by where they come from */
    double norm_grads;       /* sp: the LayerNorm gradients' all-reduce bytes per step (layers and head) */
    double optimizer;        /* adafactor: its slices' row or column sums, once a step (include/factored.h) */
    double all_reduce;       /* their sum: the [tp] all-reduce row */
    double all_reduce_max;   /* the cross-entropy's row maxima: the [tp] all-reduce-max row */
    double calls, calls_max; /* calls per step */
    /* sp: the [tp] reduce-scatter and all-gather rows, bytes per step, and
     * what they add up from (layers, embedding, head) */
    double reduce_scatter, all_gather;
    double calls_reduce_scatter, calls_all_gather;
    double sp_layers, sp_embedding, sp_head;
};

struct tp_comm_theory theory_trainer_tp_comm(const struct config *c, struct rank_place p);

/* Context parallelism's ring (model/context_parallel/cp.h; train/theory/
 * theory_cp.c): bytes this rank sends over its cp group, and receives (as
 * many), validation excluded. A block is one rank's keys and values in
 * the stores' dtype, KV = B (T/cp) 2 (C/t) x e bytes (e 2 where the ring
 * keeps bf16 stores, theory_stores_direct, else 4), or their gradients, always
 * fp32, dKV = B (T/cp) 2 (C/t) x 4; per layer per micro-batch the forward
 * sends (cp - 1) KV, the backward (cp - 1) KV of keys and values and cp
 * dKV of their gradients, and full recompute another forward's; a step is
 * grad_accum micro-batches over the rank's n layers. 0 at cp = 1. */
struct cp_comm_theory {
    double kv, kv_elem;                   /* one block, bytes; bytes per element of K and V */
    double dkv;                           /* one block of their gradients (fp32), bytes */
    double layer_forward, layer_backward; /* one layer, one micro-batch (backward: with full recompute's forward) */
    double send, recv;                    /* per step */
    double calls;                         /* isends per step */
};

struct cp_comm_theory theory_trainer_cp_comm(const struct config *c, struct rank_place p);

/* The bytes per step this rank's theory gives for collective kind k in
 * grid group g, from the theories above (dp: theory_trainer_comm; tp:
 * theory_trainer_tp_comm; pp and tie: theory_trainer_pp_comm, the tie's on
 * the first and last stage only; cp: theory_trainer_cp_comm); -1 where no
 * theory covers that kind (the scalars). The one source of the report's
 * theory column (train/report/report_memory.c) and build/plan --ranks. */
double theory_trainer_group_comm(const struct config *c, struct rank_place p, enum grid_group g, enum coll_kind k);

/* Bytes of the stage's communication buffers: ZeRO-3's gathered
 * embedding, head and layer (param dtype), ZeRO-2/3's reduce-scatter bucket
 * (largest padded unit, grad dtype); with c->overlap a second gathered
 * layer and a second bucket. */
double theory_trainer_comm_buffers(const struct config *c, struct rank_place p);

/* Activation bytes for exactly the tensors model/gpt.c saves (one
 * micro-batch) under c->recompute on this rank's tp slice, and Korthikanti's
 * Table 2 for the same shape, t and mode (eq. 1 and the "tensor parallel"
 * row, sbh (10 + 24/t + 5 a s / (h t)); selective without the 5as/h term;
 * full 2 sbh). At tp the residual stream, ln1, res2 and ln2 are whole on
 * every rank; qkv, att, atty, fch and gelu are the rank's 1/t. With
 * sequence parallelism the stream, ln1, res2, ln2, the LayerNorm stats and
 * the final LN output are the rank's T/t positions (per layer
 * (16 C e + 16) B T / t + NH/t T e B T) and the Korthikanti column is the
 * "tensor + sequence parallel" row, sbh/t (34 + 5as/h). */
struct activation_theory {
    double per_layer;        /* none: ((4 + 12/t) C e + NH/t T e + 16) B T; selective: ((4 + 12/t) C e + 16) B T;
                              * full: C e B T */
    double layers;           /* slots x n x per_layer + the one-layer recompute buffers (n: the stage's layers) */
    double recompute_buffers; /* the one-layer fp32 buffers recompute uses (local sizes) */
    double head;             /* per slot: the stage's last residual; last stage: final LN out (e) + LN stats +
                              * logits (Vp/t columns; fp32, bf16 where theory_logits_bf16) + losses +
                              * target ids; first stage: input ids */
    int slots;               /* micro-batches the schedule holds (include/schedule.h) */
    double per_slot;         /* n x per_layer + head */
    double total;            /* slots x per_slot + the one-layer recompute buffers */
    double korthikanti_layer; /* s b h (10 + 24/t + 5 a s / (h t)), 16-bit, with dropout (t = 1: 34 + 5as/h) */
    double korthikanti_total; /* slots x (n x that + output layer 4 s b h / t (1 + V / h) on the last stage) */
};

struct activation_theory theory_trainer_activations(const struct config *c, struct rank_place p);

/* Bytes of the fp32 working buffers (MEM_SCRATCH) of rank `rank` of N,
 * from the same layout the engine allocates from: exact for the buffers that
 * live through the run (the optimizer's segment table, the fp32 unit views
 * of bf16 weights and the fp32 gradient accumulators, the model's widened
 * activations and backward temporaries, the attention backward's T x T
 * score gradients for min(c->threads, B NH) threads, the batch's ids, the
 * 8-bit code-search indexes). `staging` is the one-unit fp32 buffer init,
 * loads and saves hold for a moment: the largest padded unit, an upper
 * bound of what any of them takes. On a GPU each is a pair of that size,
 * one in device memory (what the collectives touch) and its host mirror
 * (what files and the host's init see; train/ckpt/ckpt_staging.h): `staging`
 * is one of them, in each memory space. */
struct scratch_theory {
    double persistent;
    double staging;
};

struct scratch_theory theory_trainer_scratch(const struct config *c, struct rank_place p);

/* What rank `rank` of N will hold at its start-up peak, by category
 * (MEM_PARAMS.. from the theories above; MEM_SCRATCH includes the one-unit
 * staging): the tracked bytes the memory check (train/run/run_memcheck.c) adds
 * the libraries' allowance to and compares with what the machine has. */
struct memory_need {
    double bytes[MEM_NUM_CATEGORIES];
    double staging;         /* the part of bytes[MEM_SCRATCH] that is one-unit staging */
    double total;           /* the sum over categories */
};

struct memory_need theory_trainer_memory(const struct config *c, struct rank_place p);

/* FLOPs of one optimizer step on this rank, as issued by this code (the
 * HFU basis) and per the papers (model FLOPs, the MFU basis). At tp every
 * GEMM is the rank's 1/t (its heads, its 4C/t features, its Vp/t vocabulary
 * columns); the model FLOPs are the stage's at tp = 1 over t, so that the
 * tp group's ranks add up to the stage's and replicated tensors (norms, the
 * row-parallel biases) count once. */
struct flop_theory {
    double tokens;            /* B T accum per step */
    double gemm;              /* layer GEMMs: 6 tokens (L W + Vp C) / t, W = theory_layer_gemm_weights (GPT-2:
                               * 12 C^2) (+ 2 L (W - C F) tokens / t full recompute: GPT-2's 16 L C^2) */
    double attention;         /* attention GEMMs issued, full T x T squares: 12 L B C T^2 accum / t
                               * (+ 4 L B C T^2 accum / t recomputed) */
    double recompute;         /* the recomputed part of gemm + attention (hardware, not model FLOPs) */
    double model;             /* tokens (6 N + 6 L C T) / t: PaLM App. B, causal half of 12 L H Q T */
    double attention_model;   /* its attention term, tokens 6 L C T / t: half the 12 L B C T^2 accum issued */
    double n_gemm_params;     /* N: the stage's parameters used in GEMMs at tp = 1 (gpt2: Psi - wpe; llama: Psi - wte) */
};

struct flop_theory theory_trainer_flops(const struct config *c, struct rank_place p);

/* The peak of the memory timeline (train/measure/timeline.h, docs/MEMORY.md) of
 * the rank at place p for one step: the engine's phases in order, each with
 * the bytes in use by the timeline's definition, derived from the config:
 * the rank's layout (tp slice, pp stage and chunks, cp positions), its
 * schedule's order (include/schedule.h), the activations of each
 * micro-batch in flight, ZeRO's gathered units and buckets; the peak is the
 * first phase with the largest total, split into its terms (e.g. ZeRO-3:
 * own shards + scratch + gathered units + buckets + live activations).
 * Exact for every rank of dp, tp, pp (gpipe, 1f1b, interleaved) and cp
 * runs: ZeRO 0-3, overlap on or off, every recompute mode and dtype. */
struct timeline_theory {
    struct timeline_phase peak;  /* its phase and bytes by category */
    double states;               /* params + master + grads + optimizer (own shards where sharded) */
    double scratch;              /* persistent fp32 working buffers */
    double gathered, buckets;    /* the two parts of peak.bytes[MEM_COMM] */
    double activations;
    int phases;                  /* in the step */
    bool exact;                  /* the recorder measures what the walk counts: all but interleaved */
};

/* phases: NULL, or room for TIMELINE_MAX_PHASES: every phase of the step
 * (the first TIMELINE_MAX_PHASES), as the recorder keeps them. */
struct timeline_theory theory_trainer_timeline_peak(const struct config *c, struct rank_place p,
                                                    struct timeline_phase *phases);

#endif
