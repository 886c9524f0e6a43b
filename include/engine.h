/* The engine runs one training step over the model's units and owns the
 * model states (ZeRO's term): params, fp32 master, grads, optimizer states.
 * For every unit it provides fp32 views of the weights (widened from bf16,
 * or the fp32 params themselves) and an fp32 gradient accumulator (the
 * grads themselves in fp32, or a unit buffer flushed into bf16 grads when
 * the unit's backward is done). This is the seam where data parallelism
 * shards states and reduces gradients per unit. */
#ifndef SHARDLAB_ENGINE_H
#define SHARDLAB_ENGINE_H

#include <stdint.h>

#include "config.h"
#include "counters.h"
#include "gpt.h"
#include "layout.h"
#include "mem.h"

struct model_states {
    void *params;     /* param_dtype [Psi] */
    float *master;    /* fp32 [Psi] when params are bf16, else NULL */
    void *grads;      /* grad_dtype [Psi] */
    float *adam_m, *adam_v;
};

struct engine {
    const struct config *cfg;
    struct model_layout lay;
    struct gpt model;
    struct model_states st;
    struct mem_tracker *mem;
    struct flop_counter *flops;
    /* fp32 unit views (NULL when the stored dtype is already fp32) */
    float *embed_w, *layer_w;     /* widened weights */
    float *embed_dw, *layer_dw;   /* gradient accumulators */
    bool embed_w_fresh;           /* embed_w matches params (until the next update) */
};

void engine_init(struct engine *e, const struct config *cfg, struct mem_tracker *mem, struct flop_counter *flops);
void engine_free(struct engine *e);

/* Random GPT-2 init into the master (or fp32 params), then params. */
void engine_init_params(struct engine *e);
/* After params were loaded from a file: master = params (widened). */
void engine_sync_master_from_params(struct engine *e);

void engine_zero_grads(struct engine *e);
/* Forward + backward of one micro-batch, gradients ACCUMULATED. dloss is
 * the weight of this micro-batch's mean loss in the step's loss (1/accum).
 * Returns the micro-batch's mean loss. */
float engine_forward_backward(struct engine *e, const int32_t *inputs, const int32_t *targets, float dloss);
/* Forward only: mean loss (validation) and logits for sampling. */
float engine_forward(struct engine *e, const int32_t *inputs, const int32_t *targets);

struct step_result {
    double grad_norm;  /* before clipping */
    float lr;
};
/* Clip and update. step is 0-based. */
struct step_result engine_optimizer_step(struct engine *e, int step);

#endif
