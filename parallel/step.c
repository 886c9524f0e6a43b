/* One training step on this rank (include/step.h), top-down:
 *   1. the gradients zeroed;
 *   2. the micro-batches: each one's forward and backward, unit by unit
 *      (parallel/engine.c: under ZeRO-3 each unit all_gathered before it
 *      is used, its gradient reduce_scattered as its backward ends). One
 *      stage runs them as plain gradient accumulation, below, and enters no
 *      pipeline code (nor does its validation); over pp stages (or under
 *      --schedule gpipe) they run in the schedule's order
 *      (parallel/pipeline/schedule.c);
 *   3. the loss summed over the ranks, so that every rank decides alike;
 *   4. the gradients reduced: DDP's all-reduce, ZeRO-1's reduce-scatter,
 *      ZeRO-2/3's in flight finished, the tied wte's over the stages;
 *   5. their global norm: the squares all-reduced over dp, tp and pp;
 *   6. clipped by it, the update of the segments this rank owns;
 *   7. ZeRO-1/2: the updated params all_gathered.
 * A non-finite loss or norm skips 4-7 or 6-7 on every rank. */
#include "step.h"

#include <math.h>

#include "clock.h"

/* With one stage, 1f1b's order is each micro-batch's forward, then its
 * backward, in one slot (include/schedule.h): gradient accumulation. Under
 * gpipe, which the user chose by name, one stage runs the schedule's order
 * (all forwards first, in m slots). */
static bool one_stage(const struct pipeline *p) { return p->pp->size == 1; }

static double accumulate(struct engine *e, int m, float dloss, const struct batch_source *src, int32_t *inputs,
                         int32_t *targets) {
    double loss = 0.0;
    struct mb_input in = {.inputs = inputs, .targets = targets};
    for (int k = 0; k < m; k++) {
        int slot = engine_chunk_slot(e, 0, k);
        engine_next_batch(e, src, inputs, targets);
        loss += engine_micro_batch_forward(e, src, k, 0, slot, &in, dloss);
        engine_micro_batch_backward(e, src, k, 0, slot, NULL, NULL);
    }
    return loss;
}

/* Evaluation on one stage: n forwards, each in the chunk's first slot
 * (no backward follows), as pipeline_forward_only runs them over stages. */
static double forwards_only(struct engine *e, int n, const struct batch_source *src, int32_t *inputs,
                            int32_t *targets) {
    double loss = 0.0;
    struct mb_input in = {.inputs = inputs, .targets = targets};
    for (int k = 0; k < n; k++) {
        engine_next_batch(e, src, inputs, targets);
        loss += engine_micro_batch_forward(e, src, k, 0, engine_chunk_slot(e, 0, 0), &in, 0.0f);
    }
    return loss;
}

/* Every micro-batch's forward and backward: the sum of their losses on the
 * last stage, 0 on the others. */
static double micro_batches(struct pipeline *p, float dloss, const struct batch_source *src, int32_t *inputs,
                            int32_t *targets) {
    if (one_stage(p) && p->kind == SCHEDULE_1F1B) return accumulate(p->e, p->m, dloss, src, inputs, targets);
    return pipeline_step(p, dloss, src, inputs, targets);
}

/* The step's loss lives on the last stage: summed over dp, then over the
 * stages (the others add 0), so every rank holds it. */
static void agree_loss(struct grid *g, double *loss) {
    g->dp_comm.all_reduce_scalars(&g->dp_comm, loss, 1);
    if (g->pp > 1) g->pp_comm.all_reduce_scalars(&g->pp_comm, loss, 1);
}

double step_validate(struct pipeline *p, int n, const struct batch_source *src, int32_t *inputs, int32_t *targets) {
    double sum = one_stage(p) ? forwards_only(p->e, n, src, inputs, targets)
                              : pipeline_forward_only(p, n, src, inputs, targets);
    agree_loss(p->e->grid, &sum);
    return sum;
}

struct step_result step_run(struct pipeline *p, const struct batch_source *src, int step, int32_t *inputs,
                            int32_t *targets) {
    struct engine *e = p->e;
    /* the losses the step's mean is over: accum x dp micro-batches, each cut
     * over cp ranks that each return the mean of their B T/cp tokens */
    int means = p->m * e->grid->dp_comm.size;
    float dloss = 1.0f / (float)means;

    engine_zero_grads(e);
    double loss = micro_batches(p, dloss, src, inputs, targets);
    agree_loss(e->grid, &loss);
    struct step_result r = {.loss = loss / means, .grad_norm = NAN};
    step_hook(src->hooks, (struct step_event){.at = OPTIMIZER_BEGINS});
    double t0 = monotonic_seconds();
    if (isfinite(loss)) { /* a NaN or Inf on one rank made the sum non-finite on all */
        engine_reduce_grads(e);
        r.grad_norm = engine_all_reduce_grad_norm(e);
        if (isfinite(r.grad_norm)) { /* the same on every rank: from all-reduced values */
            engine_update(e, step, r.grad_norm);
            engine_all_gather_updated(e);
            r.updated = true;
        }
    }
    step_hook(src->hooks, (struct step_event){.at = OPTIMIZER_ENDS});
    r.optimizer_s = monotonic_seconds() - t0;
    return r;
}
