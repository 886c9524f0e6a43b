/* Schedules: the order in which one step's micro-batches go through this
 * rank's engine. Today's schedule runs them in sequence, each forward then
 * its backward, in one activation slot (no pipeline: one stage). A pipeline
 * schedule (GPipe, 1F1B) interleaves them across stages with more slots. */
#ifndef SHARDLAB_SCHEDULE_H
#define SHARDLAB_SCHEDULE_H

#include <stdint.h>

#include "engine.h"

/* Where a schedule gets its micro-batches: next() fills (B,T) inputs and
 * targets with the next one. */
struct batch_source {
    void (*next)(void *ctx, int32_t *inputs, int32_t *targets);
    void *ctx;
};

/* One step's forward and backward passes over n_micro micro-batches, each
 * weighted dloss in the loss; inputs, targets: (B,T) buffers the schedule
 * fills. Gradients accumulate in the engine. Returns the sum of the
 * micro-batch losses. */
double schedule_sequential(struct engine *e, int n_micro, float dloss, const struct batch_source *src,
                           int32_t *inputs, int32_t *targets);

#endif
