/* The engine runs one training step over the model's units and owns the
 * model states (ZeRO's term): params, fp32 master, grads, optimizer states,
 * each full or sharded over the data-parallel group by ZeRO stage:
 *
 *   stage  params  master+m+v  grads   collectives per step (k micro-batches)
 *   0      full    full        full    all-reduce grads once
 *   1      full    shard       full    reduce-scatter grads once, all-gather params
 *   2      full    shard       shard   reduce-scatter each unit's grads as its
 *                                      backward ends (k times), all-gather params
 *   3      shard   shard       shard   all-gather each unit before its forward and
 *                                      again before its backward (k times each),
 *                                      reduce-scatter as in stage 2
 *
 * For every unit it provides fp32 views of the weights (widened from bf16,
 * gathered from shards, or the fp32 params themselves) and an fp32 gradient
 * accumulator, and after the unit's backward moves that gradient where the
 * stage keeps it. Sharding follows include/shard.h. */
#ifndef SHARDLAB_ENGINE_H
#define SHARDLAB_ENGINE_H

#include <stdint.h>

#include "collectives.h"
#include "config.h"
#include "counters.h"
#include "gpt.h"
#include "layout.h"
#include "mem.h"
#include "optim.h"
#include "segments.h"
#include "shard.h"

struct model_states {
    void *params;     /* param_dtype: full padded (stage < 3) or shard (stage 3) */
    float *master;    /* fp32, when params are bf16: full (stage 0) or shard */
    void *grads;      /* grad_dtype: full padded (stage < 2) or shard */
    /* optimizer states (parallel/optstate.c), full (stage 0) or shard:
     *   adamw      s1 = m, s2 = v (fp32, indexed like master)
     *   sgd        s1 = momentum (fp32, indexed like master)
     *   adamw8bit  q1, q2 = m, v codes and absmax1, absmax2 per 256-element
     *              block of each quantized segment; s1, s2 = fp32 m, v of
     *              the small tensors (by segment) */
    float *s1, *s2;
    uint8_t *q1, *q2;
    float *absmax1, *absmax2;
};

struct engine {
    const struct config *cfg;
    struct collectives *dp;       /* the data-parallel group */
    int stage;                    /* ZeRO stage 0..3 */
    struct model_layout lay;
    struct shard_layout sh;
    struct gpt model;
    struct model_states st;
    struct opt_segments segs;      /* what this rank updates (include/segments.h) */
    float qmap_signed[256], qmap_unsigned[256]; /* adamw8bit code books */
    struct qmap_index *qindex_signed, *qindex_unsigned;
    struct mem_tracker *mem;
    struct flop_counter *flops;
    /* stage 3: a unit's params gathered in param_dtype (unit 0 has its own:
     * it serves both ends of the forward and of the backward) */
    void *gather_embed, *gather_layer;
    /* stages 2 and 3: one unit's gradient in grad_dtype for the reduce-scatter */
    void *bucket;
    /* fp32 unit views (NULL when the stored dtype already serves) */
    float *embed_w, *layer_w;     /* widened weights */
    float *embed_dw, *layer_dw;   /* gradient accumulators (padded units) */
    bool embed_w_fresh;           /* stage < 3: embed_w matches params until the next update */
};

/* dp: the data-parallel collectives (size 1 for one process). */
void engine_init(struct engine *e, const struct config *cfg, struct collectives *dp, struct mem_tracker *mem,
                 struct flop_counter *flops);
void engine_free(struct engine *e);

/* Set the weights from a full fp32 buffer in layout order (every rank
 * passes the same buffer; each keeps what its stage holds). */
void engine_set_weights(struct engine *e, const float *full);
/* GPT-2 random init (the same on every rank). */
void engine_init_params(struct engine *e);

void engine_zero_grads(struct engine *e);
/* Forward + backward of one micro-batch, gradients ACCUMULATED. dloss is
 * this micro-batch's weight in the step's loss, 1/(accum x dp). Returns the
 * micro-batch's mean loss on this rank. */
float engine_forward_backward(struct engine *e, const int32_t *inputs, const int32_t *targets, float dloss);
/* Forward only: mean loss on this rank (and logits for sampling). */
float engine_forward(struct engine *e, const int32_t *inputs, const int32_t *targets);

struct step_result {
    double grad_norm;  /* global, before clipping */
    float lr;
};
/* Reduce gradients as the stage requires, clip, update, redistribute params.
 * step is 0-based. */
struct step_result engine_optimizer_step(struct engine *e, int step);

/* Copy the model states out to / in from full unpadded buffers in layout
 * order (checkpoints; resharding between layouts goes through these).
 * Collective over the dp group; `full` buffers matter on rank 0 only for
 * gather, on every rank for scatter. which: the state to move. */
enum engine_state { STATE_PARAMS, STATE_MASTER, STATE_OPT1, STATE_OPT2 };
/* Gathers the full state to rank 0 (dtype: param_dtype for params, fp32
 * for the rest; 8-bit optimizer states are dequantized). */
void engine_gather_state(struct engine *e, enum engine_state which, void *full);
/* Takes this rank's part of a full state present on every rank (8-bit
 * optimizer states are re-quantized, so that resume is not bit-exact). */
void engine_scatter_state(struct engine *e, enum engine_state which, const void *full);
bool engine_has_state(const struct engine *e, enum engine_state which);

#endif
