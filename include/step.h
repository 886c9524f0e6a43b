/* One training step on this rank (parallel/step.c), as the papers order
 * it: the gradients zeroed; every micro-batch's forward and backward, unit
 * by unit (include/engine.h); the loss agreed; the gradients reduced over
 * the data-parallel ranks; their global norm; the clipped, sharded update;
 * the updated params gathered. The trainer (train/run/run_loop.c) times
 * the step and logs what it returns. */
#ifndef SHARDLAB_STEP_H
#define SHARDLAB_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "schedule.h"

struct step_result {
    double loss;        /* the mean over the step's grad_accum x dp micro-batches, on every rank */
    double grad_norm;   /* all-reduced over dp, tp and pp; NaN when the loss was not finite (no norm taken) */
    bool updated;       /* the update ran: the loss and the norm were finite, alike on every rank */
    double optimizer_s; /* seconds from the reductions to the gathers */
};

/* Step `step` (0-based: the LR schedule's) over p's engine and stages,
 * its micro-batches drawn from src into the (B,T) inputs and targets. */
struct step_result step_run(struct pipeline *p, const struct batch_source *src, int step, int32_t *inputs,
                            int32_t *targets);

/* Evaluation: n micro-batches' forwards only, through every stage (one
 * stage: a plain loop; several: pipeline_forward_only). Returns their
 * losses summed over the stages and the data-parallel ranks (n x dp of
 * them), on every rank. */
double step_validate(struct pipeline *p, int n, const struct batch_source *src, int32_t *inputs, int32_t *targets);

#endif
