/* The engine runs one micro-batch's forward and backward over this rank's
 * units (include/layout.h), schedule-agnostic. For every unit it provides
 * fp32 views of the weights (the fp32 params themselves, widened from
 * bf16, or gathered from shards under ZeRO-3) and an fp32 gradient
 * accumulator, and after the unit's backward hands that gradient to the
 * model states (include/zero.h), which keep it where the ZeRO stage says.
 *
 * One call runs one model chunk (include/layout.h) of one micro-batch: a
 * rank of the interleaved schedule holds several, each a virtual stage.
 * Boundaries: forward takes tokens (first stage) or an incoming activation
 * and yields the loss (last stage) or an outgoing activation; backward
 * takes the loss (set up by the forward's dloss) or an incoming gradient
 * and yields the outgoing gradient. Activations and their gradients cross
 * stages as (B,T,C) in act_dtype (with sequence parallelism each tp rank
 * sends its (B,T/tp,C) slice: engine_stage_numel). Which micro-batch runs
 * when is the step's business (parallel/step.c: with one stage, each one's
 * forward then its backward) or the pipeline schedule's (include/schedule.h).
 *
 * Overlap (zero_options.overlap): units are visited in a fixed order
 * (forward: embedding, layers, head; backward: head and embedding, layers
 * from the last, embedding's gradient), and under ZeRO-3 each unit's
 * params are taken before the next unit's all-gather is posted, which then
 * runs while the current unit computes. Between units the engine lets
 * posted collectives progress. */
#ifndef SHARDLAB_ENGINE_H
#define SHARDLAB_ENGINE_H

#include <stdint.h>

#include "collectives.h"
#include "counters.h"
#include "data.h"
#include "gpt.h"
#include "grid.h"
#include "layout.h"
#include "mem.h"
#include "step_hooks.h"
#include "zero.h"

struct engine_options {
    int micro_batch;               /* B */
    int slots;                     /* micro-batches in flight: saved-activation slots (one chunk) */
    int chunk_slots[RANK_MAX_CHUNKS]; /* several chunks (the interleaved schedule): each one's slots;
                                    * all 0: `slots` for the one chunk */
    enum dtype act_dtype;
    enum recompute_mode recompute;
    enum attention_kind attention; /* plain or flash (include/gpt.h) */
    enum dtype gemm_dtype;         /* the layer GEMMs' operands (gpt_init_chunks); 0 is fp32 */
    bool sequence_parallel;        /* Korthikanti et al. 2022 over the tp group (include/gpt.h); tp must
                                    * divide T; a no-op at tp = 1 */
    float init_std;
    struct zero_options zero;      /* .overlap: collectives behind compute (include/zero.h) */
    int micro_batches;             /* backwards per optimizer step (grad_accum x chunks); 0: unknown, so stage 0
                                    * all-reduces at the step rather than during the last backward */
};

struct engine {
    struct engine_options o;
    struct model_layout lay;
    struct model_layout model_lay; /* the model's: lay at this rank's T/cp positions (context parallelism) */
    struct grid *grid;             /* the process grid: its dp, tp, pp and tie groups */
    struct collectives *dp;        /* &grid->dp_comm */
    struct mem_tracker *mem;
    enum mem_space space;
    struct exec_ctx *flops;
    struct zero z;
    struct gpt model;
    /* fp32 unit views per unit kind (NULL when the stored dtype serves):
     * widened weights and gradient accumulators (padded units) */
    float *w32[UNIT_LAYER + 1], *dw32[UNIT_LAYER + 1];
    /* stage < 3: the embedding's and head's widened weights serve every
     * micro-batch until the next update */
    bool w32_fresh[UNIT_LAYER + 1];
    int backwards;  /* since the last engine_zero_grads */
    int micro_batch; /* the one the schedule runs now, 0-based in the step (the phase hook's) */
};

/* One micro-batch's inputs at this rank's boundaries. */
struct mb_input {
    const int32_t *inputs;   /* first stage: (B,T) token ids */
    const int32_t *targets;  /* last stage: (B,T) */
    const void *x_in;        /* other stages: engine_stage_numel values in act_dtype from the previous stage, or
                              * NULL when it was received into engine_stage_input already */
};

/* Where a step gets its micro-batches: the loader's, in order (every
 * stage draws every micro-batch, so the loaders stay in step). hooks: the
 * step's observers (include/step_hooks.h; NULL: none, as in validation),
 * which see each micro-batch's forward and backward compute begin and end
 * (MICRO_BATCH_BEGINS and _ENDS, the micro-batch 0-based within the step
 * and the chunk of a virtual stage); the trace draws them. */
struct batch_source {
    struct data_loader *loader;
    const struct step_hooks *hooks;
};

/* Builds this rank's model and states over the layout `lay` (copied);
 * grid: the process grid (a test's one process: tests/grid_single.h), whose dp
 * group shards the model states and whose tp, pp and tie groups the layout
 * must match. Returns 0,
 * or -1 with a message naming the buffer (and its bytes) that could not be
 * allocated; then engine_free is still the way out. */
int engine_init(struct engine *e, const struct engine_options *o, const struct model_layout *lay,
                struct grid *grid, struct mem_tracker *mem, enum mem_space space, struct exec_ctx *flops,
                char *err, size_t err_len);
void engine_free(struct engine *e);

/* GPT-2 random init, one unit at a time (the same values whatever the
 * layout): each rank draws only what it stores, through a staging buffer
 * of the largest stored part of a unit, tracked, freed on return. */
void engine_init_params(struct engine *e);
/* The largest padded unit in fp32 bytes: the staging a checkpoint needs. */
size_t engine_unit_staging_bytes(const struct engine *e);
/* Unit u's params (and master) from fp32 values of its whole unit. */
void engine_set_unit(struct engine *e, int u, const float *w);
/* After params changed outside the step (load, resume). */
void engine_params_changed(struct engine *e);

/* Slot `slot`'s incoming activation (a stage that is not the first: a
 * pipeline receives into it, then forwards with x_in = NULL) and outgoing
 * one (not the last stage: valid after the forward, until the slot's next
 * forward; a pipeline sends from it and passes x_out = NULL). */
void *engine_stage_input(struct engine *e, int slot);
/* Values of a stage boundary activation (and of its gradient), this rank's:
 * B T C, or B (T/tp) C with sequence parallelism. */
size_t engine_stage_numel(const struct engine *e);
void *engine_stage_output(struct engine *e, int slot);

/* The slot of micro-batch k (0-based in the step) of this rank's chunk c. */
int engine_chunk_slot(const struct engine *e, int chunk, int k);

void engine_zero_grads(struct engine *e);
/* The next micro-batch from src's loader into the (B,T) inputs and
 * targets, as this rank's model reads them: with context parallelism its
 * T/cp positions of each sequence (include/context_parallel.h). */
void engine_next_batch(struct engine *e, const struct batch_source *src, int32_t *inputs, int32_t *targets);
/* Forward of one micro-batch's chunk into slot `slot` (engine_chunk_slot:
 * the slot names the chunk, whose layers run; the embedding only in chunk
 * 0 of the first stage, the head only in the last chunk of the last). dloss: this micro-batch's
 * weight in the step's loss (1/(accum x dp)); 0 for a forward only (no
 * backward follows). Last stage: returns the micro-batch's mean loss;
 * other stages write the outgoing activation to x_out (unless NULL) and
 * return 0. */
float engine_forward(struct engine *e, int slot, const struct mb_input *in, void *x_out, float dloss);
/* Backward of slot `slot`, gradients ACCUMULATED. dx_in: the incoming
 * gradient (B,T,C) in act_dtype (NULL on the last stage); dx_out: where the
 * outgoing one goes (NULL on the first stage). */
void engine_backward(struct engine *e, int slot, const void *dx_in, void *dx_out);
/* engine_forward and engine_backward of micro-batch k (0-based in the
 * step) through chunk c, marked for src's observers (MICRO_BATCH_BEGINS
 * and _ENDS). */
float engine_micro_batch_forward(struct engine *e, const struct batch_source *src, int k, int c, int slot,
                                 const struct mb_input *in, float dloss);
void engine_micro_batch_backward(struct engine *e, const struct batch_source *src, int k, int c, int slot,
                                 const void *dx_in, void *dx_out);
/* The optimizer step's phases over the model states (include/zero.h says
 * what each does), in this order: reduce the gradients, their global
 * norm, clip and update (step 0-based), gather the params. */
void engine_reduce_grads(struct engine *e);
double engine_all_reduce_grad_norm(struct engine *e);
void engine_update(struct engine *e, int step, double grad_norm);
void engine_all_gather_updated(struct engine *e);

#endif
