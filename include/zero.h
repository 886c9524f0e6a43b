/* Model states (ZeRO's term) of one rank: params, fp32 master, grads and
 * optimizer states, each full or sharded over the data-parallel group as
 * the stage's row of include/zero_stages.h says (Rajbhandari et al. 2020).
 * Per step of k micro-batches: DDP all_reduces the grads once; ZeRO-1
 * reduce_scatters them once; ZeRO-2 reduce_scatters each unit's as its
 * backward ends (k times); ZeRO-1 and 2 all_gather the updated params
 * once; ZeRO-3 all_gathers each unit before its forward and again before
 * its backward (k times each), releases it after, and reduce_scatters as
 * ZeRO-2 does.
 *
 * "Full" means every unit of this rank's layout (include/layout.h), padded
 * to a multiple of the group size; "shard" this rank's slice of each unit
 * (include/shard.h). What a rank updates is its list of segments
 * (include/segments.h). parallel/zero/zero.c holds the stages' states
 * (the update rules' optimizer states among them) and the optimizer
 * step's phases; parallel/zero/comm.c their collectives during the step,
 * blocking or overlapped with compute, and the tied embedding's sum;
 * parallel/zero/places.c where each element lives; parallel/zero/states_io.c
 * moving states in and out a unit at a time.
 *
 * Overlap (zero_options.overlap): stage 3 posts the next unit's all-gather
 * (zero_all_gather_ahead) while the current one computes, into a second
 * gathered layer; stages 2-3 post a unit's reduce-scatter and finish it
 * when its bucket (one of two) comes round again or before the update;
 * stage 0 all-reduces gradient buckets of whole units (DDP, Li et al.
 * 2020) as soon as their units' last backward of the step is done. The
 * blocking path (overlap off) posts the same collectives on the same
 * buffers and waits at once: MPI runs the same algorithm on the same
 * values, so the results are bitwise equal (Open MPI's blocking and
 * non-blocking reductions may combine 3 or more ranks in different orders,
 * so the blocking path does not mix them). */
#ifndef SHARDLAB_ZERO_H
#define SHARDLAB_ZERO_H

#include <stdbool.h>
#include <stdint.h>

#include "collectives.h"
#include "counters.h"
#include "dtype.h"
#include "factored.h"
#include "layout.h"
#include "mem.h"
#include "optim.h"
#include "segments.h"
#include "shard.h"
#include "step_hooks.h"
#include "zero_stages.h"

struct zero_options {
    int stage;                     /* 0..3 */
    enum dtype param_dtype, grad_dtype;
    enum rounding_mode rounding;   /* bf16 params written back by the update */
    uint64_t seed;                 /* stochastic rounding noise */
    struct optim_options optim;
    bool overlap;                  /* collectives behind compute (above); off: wait at once */
    size_t ddp_bucket_bytes;       /* stage 0: gradient bytes per all-reduce bucket (whole units) */
    const struct step_hooks *hooks; /* the step's observers (include/step_hooks.h; NULL: none) */
};

/* A posted collective on one unit: its all-gather (stage 3, into gathered
 * buffer `buf` of its kind) or reduce-scatter (stages 2-3). unit < 0: none. */
struct zero_pending {
    int unit, buf;
    struct coll_request req;
};

/* Stage 0: units whose grads are contiguous [lo, hi) in the full grads and
 * consecutive in the backward's order, all-reduced in place as one call
 * once none of them (`left`) is still to finish. */
struct ddp_bucket {
    size_t lo, hi;
    int units, left;
    struct coll_request req;
};

/* The tied embedding across pipeline stages (parallel/zero/comm.c): this
 * rank's copy of wte is elements [lo, hi) of unit `unit`, its gradient
 * summed over `group` (first and last stage) at every step. in_norm: the
 * copy counts in the global gradient norm (the embedding's does, the
 * head's copy does not: one tensor is counted once). */
struct zero_tie {
    struct collectives *group;     /* NULL: no tie */
    int unit;
    size_t lo, hi;
    bool in_norm;
};

struct model_states {
    void *params;     /* param_dtype: full padded (stage < 3) or shard (stage 3) */
    float *master;    /* fp32, when params are bf16: full (stage 0) or shard */
    void *grads;      /* grad_dtype: full padded (stage < 2) or shard */
    /* optimizer states, full (stage 0) or shard:
     *   adamw      s1 = m, s2 = v (fp32, indexed like master)
     *   sgd, lion  s1 = momentum (fp32, indexed like master)
     *   adamw8bit  q1, q2 = m, v codes and absmax1, absmax2 per 256-element
     *              block of each quantized segment; s1, s2 = fp32 m, v of
     *              the small tensors (by segment)
     *   sgd8bit, lion8bit  q1, absmax1, s1 the same for the one momentum
     *   adafactor  s1 = its statistics (include/factored.h: R and C of the
     *              matrices, v of the vectors, packed by tensor); s2 = the
     *              first moment (fp32, indexed like master) if adafactor_beta1 > 0 */
    float *s1, *s2;
    uint8_t *q1, *q2;
    float *absmax1, *absmax2;
};

/* The groups a gradient norm sums over besides dp, in this order
 * (struct zero's norm_groups). */
enum norm_group { NORM_OVER_PP, NORM_OVER_TP, NORM_GROUP_NUM };

struct zero {
    struct zero_options o;
    const struct zero_stage *row;  /* the stage's row of include/zero_stages.h: what it shards, how it moves */
    const struct optim_rule *rule; /* the update rule's row of include/optim.h's table: its states */
    const struct model_layout *lay;
    struct shard_layout sh;
    struct collectives *dp;
    struct mem_tracker *mem;
    enum mem_space space;
    struct exec_ctx *flops;
    struct model_states st;
    struct opt_segments segs;       /* what this rank updates */
    float qmap_signed[QMAP_SIZE], qmap_unsigned[QMAP_SIZE]; /* the 8-bit rules' code books (states 1, 2) */
    struct qmap_index *qindex_signed, *qindex_unsigned;
    /* adafactor: the plan of its statistics, the sums shared over dp (fp32),
     * the row sums and each tensor's update squares (doubles), in MEM_SCRATCH
     * of the states' space; fac_squares (host) is what the scalar
     * all-reduces take: fac_squares_at itself on the CPU, else a copy of
     * it, one a step (fac_host_reads counts those copies) */
    struct factored_plan fac;
    float *fac_sums, *fac_rowsums, *fac_tpsums, *fac_tiesums; /* (over tp: tp > 1; the tied wte's: pp) */
    double *fac_squares, *fac_squares_at;
    double fac_host_reads;
    /* stage 3: one gathered unit per kind, in param_dtype (the embedding's
     * stays valid through the forward: the tied head reads its wte); with
     * overlap a second layer buffer (gathered_layer2) takes the next layer */
    void *gathered[UNIT_LAYER + 1];
    void *gathered_layer2;
    int layer_in_use;                              /* 0, 1: the layer buffer the model reads */
    int holds[UNIT_LAYER + 1][2];                  /* the unit each gathered buffer holds; -1: released */
    struct zero_pending gather[UNIT_LAYER + 1];    /* at most one posted all-gather per kind */
    /* stages 2 and 3: one unit's gradient in grad_dtype for the
     * reduce-scatter; with overlap two, used in turn */
    void *bucket[2];
    struct zero_pending scatter[2];
    int next_bucket;
    /* stage 0: the all-reduce buckets (a table in MEM_SCRATCH) */
    struct ddp_bucket *ddp;
    int n_ddp, ddp_posted, ddp_waited;             /* buckets [0, ddp_posted) posted, [0, ddp_waited) reduced */
    bool last_backward;                            /* this backward's grads are the step's last */
    struct zero_tie tie;
    /* model-parallel groups whose ranks hold different parameters (pp:
     * other layers; tp: other slices): squared gradient norms sum over them
     * too, in the order of enum norm_group */
    struct collectives *norm_groups[NORM_GROUP_NUM];
    /* a backend with a one-pass norm (flops->device.one_pass_norm): the
     * norm's segments as one list (include/bufops.h: buf_sumsq_open), made
     * at the first norm (the segments and the grads are fixed by then) and
     * freed with the states; NULL otherwise, a call and a copy per segment */
    struct sumsq_list *norm_list;
};

/* Which model state a checkpoint moves. */
/* STATE_FACTORED: Adafactor's statistics as they are (include/factored.h:
 * factored_raw_usable), for a resume at the same tp. */
enum zero_state { STATE_PARAMS, STATE_MASTER, STATE_OPT1, STATE_OPT2, STATE_FACTORED };

/* Allocates the states (zero-filled). Allocation failures are left in the
 * tracker (mem_failed); -1 when the segment table itself could not be
 * allocated (nothing else was). Either way the caller frees with zero_free. */
int zero_init(struct zero *z, const struct zero_options *o, const struct model_layout *lay, struct collectives *dp,
              struct mem_tracker *mem, enum mem_space space, struct exec_ctx *flops);
void zero_free(struct zero *z);

/* ---- the step, unit by unit (called by the engine) */
/* Unit u's params in param_dtype, whole, for its forward or backward: the
 * resident params themselves, or (ZeRO-3) all_gathered from every rank's
 * slice into a buffer of its kind, which holds them until zero_release. */
const void *zero_all_gather(struct zero *z, int u);
/* Unit u's gradient in the full grads, when the stage keeps them full
 * (stage < 2); NULL otherwise. */
void *zero_unit_grads(struct zero *z, int u);
/* Unit u's backward is done; acc (fp32, the padded unit) holds its
 * gradient for this micro-batch: reduce_scatter it into the grad shard
 * (ZeRO-2, 3), or keep it in the full grads (DDP, ZeRO-1: added into bf16
 * grads; DDP's buckets all_reduced on the step's last backward). acc may
 * be reused on return. */
void zero_reduce_scatter(struct zero *z, int u, const float *acc);
void zero_zero_grads(struct zero *z);
/* ZeRO-3 with overlap: posts unit u's all_gather early, taken by the next
 * zero_all_gather(z, u). The engine calls it after taking the current
 * unit's params and before computing it: the target buffer is the kind's
 * other layer buffer, or the embedding's or head's own (which the model
 * must not be reading then). A no-op otherwise, or for u < 0. */
void zero_all_gather_ahead(struct zero *z, int u);
/* ZeRO-3: unit u's gathered params are read no more until its next
 * all_gather: released. Its buffer is free for the next gather of its
 * kind (a gather into a buffer not released stops the run: a bug); the
 * bytes stay, the stage's fixed comm memory (theory: one gathered unit per
 * kind, two layers with overlap). The trace records the release. A no-op
 * below ZeRO-3. */
void zero_release(struct zero *z, int u);
/* The next backward is the step's last micro-batch (stage 0: its units'
 * buckets all-reduce as they finish; otherwise they wait for the step). */
void zero_backward_begins(struct zero *z, bool last_of_step);
/* Lets posted collectives move (between units). */
void zero_progress(struct zero *z);

/* The optimizer step's phases, called in this order after the schedule's
 * forwards and backwards (parallel/step.c: step_run). step is
 * 0-based. Each is collective over the groups it names.
 *   zero_reduce_grads   the gradients every rank needs reduced: whatever
 *                       is in flight finished, then stage 0's all-reduce
 *                       (the buckets not yet posted) or stage 1's
 *                       reduce-scatter; the tied wte's copies summed over
 *                       the tie group. dp, tie.
 *   zero_all_reduce_grad_norm  the global norm: the owned segments' squares
 *                       all-reduced over dp (stages > 0), pp and tp
 *                       (replicated tensors and the head's wte copy
 *                       counted once).
 *   zero_update         clip (the norm's scale) and the update rule over
 *                       the segments this rank owns; local.
 *   zero_all_gather_updated  ZeRO-1 and 2: every rank gets every updated
 *                       param for the next forward (all_gather, dp); a
 *                       no-op for DDP (all updated) and ZeRO-3 (gathered
 *                       unit by unit as used). */
void zero_reduce_grads(struct zero *z);
double zero_all_reduce_grad_norm(struct zero *z);
void zero_update(struct zero *z, int step, double grad_norm);
void zero_all_gather_updated(struct zero *z);

/* ---- the tied embedding across stages (parallel/zero/comm.c) */
void zero_tie_init(struct zero *z, struct collectives *tie, int unit, size_t lo, size_t hi, bool in_norm);

/* ---- moving states in and out, one unit at a time (parallel/zero/states_io.c) */
bool zero_has_state(const struct zero *z, enum zero_state which);
/* dtype of a state as checkpoints hold it: param_dtype for params, fp32
 * for the rest (8-bit optimizer states dequantized). */
enum dtype zero_state_dtype(const struct zero *z, enum zero_state which);
/* Sets params (and master) of unit u from fp32 values of its elements
 * [lo, hi), which must cover what this rank stores of the unit
 * (zero_unit_stored). bf16 params are rounded to nearest. */
void zero_set_unit(struct zero *z, int u, size_t lo, size_t hi, const float *w);
/* The part of unit u whose params this rank stores: all of it (stage < 3)
 * or its slice. */
void zero_unit_stored(const struct zero *z, int u, size_t *lo, size_t *hi);
/* Collective over the dp group: unit u of state `which` gathered into
 * work (the unit's padded size x 4 bytes, in the states' memory space:
 * the collectives move it); on dp rank 0 it then starts with the unit's
 * elements in zero_state_dtype. */
void zero_gather_unit(struct zero *z, enum zero_state which, int u, void *work);
/* Takes this rank's part of unit u of state `which` from src (the whole
 * unit, zero_state_dtype; every rank passes it; either memory space, best
 * the states': 8-bit states are re-quantized from it). */
void zero_scatter_unit(struct zero *z, enum zero_state which, int u, const void *src);
/* After every unit of a resume state was scattered (collective over the
 * tp group): Adafactor's sums over tp of what its slices re-derived (not
 * when `as_saved`, STATE_FACTORED having been loaded), and the parts of
 * sum(C) the next save reads. Nothing for the other rules. */
void zero_states_loaded(struct zero *z, bool as_saved);

/* ---- 8-bit states as they are (the 8-bit rules), for a resume in the same
 * layout (dp size, stage, min_8bit_size): codes and block absmax move
 * unchanged, so the run continues bit for bit; another layout loads the
 * dequantized fp32 states above and requantizes. Codes travel by unit-local
 * element (a byte each; 0 where a tensor keeps fp32 states). The absmax of
 * a unit are the blocks of each rank holding a part of it, rank by rank,
 * each rank's in its segment order. */
/* Ranks whose 8-bit states differ: the dp size when states are sharded
 * (stage >= 1), else 1 (every rank holds the same full states). */
int zero_raw_ranks(const struct zero *z);
/* first[u * R + r], R = zero_raw_ranks: where rank r's absmax of unit u
 * start in the layout's array of all blocks (units in order, ranks in order
 * within a unit); first[n_units * R] = the number of blocks. The caller
 * gives n_units * R + 1 entries. -1 when a scratch table could not be
 * allocated (the tracker holds the message). */
int zero_raw_block_table(struct zero *z, size_t *first);
/* Collective over the dp group, like zero_gather_unit: on dp rank 0, work
 * (the unit's padded size x 4 bytes) then starts with unit u's codes of
 * state `which` (STATE_OPT1 or STATE_OPT2), one byte per unit element. No
 * rank holds more than this one unit of other ranks' codes. The ranks'
 * slots are compacted on the host: `host` is work itself when the states
 * are host memory, else a host buffer of work's size (a mirror: work is
 * copied there, compacted and copied back). */
void zero_gather_unit_codes(struct zero *z, enum zero_state which, int u, void *work, void *host);
/* Collective: on dp rank 0, work starts with unit u's absmax (fp32), the
 * blocks first[u*R] .. first[(u+1)*R] of the table above; `host` as for
 * the codes. */
void zero_gather_unit_absmax(struct zero *z, enum zero_state which, int u, const size_t *first, void *work,
                             void *host);
/* This rank's codes / absmax of unit u from src, laid out as the gathers
 * leave them (every rank passes the whole unit). */
void zero_scatter_unit_codes(struct zero *z, enum zero_state which, int u, const void *src);
void zero_scatter_unit_absmax(struct zero *z, enum zero_state which, int u, const size_t *first, const void *src);

#endif
