/* The parts of struct zero (include/zero.h) that only parallel/zero/ calls:
 * the step's reductions (comm.c), the tied embedding's gradient sum
 * (tie.c) and the optimizer states (optstate.c). zero.c puts them
 * together behind include/zero.h. */
#ifndef SHARDLAB_ZERO_PARTS_H
#define SHARDLAB_ZERO_PARTS_H

#include "zero.h"

/* ---- parallel/zero/comm.c: the buffers and bookkeeping of struct zero (include/zero.h), and the
 * step's reductions (zero_reduce_grads calls them): allocation into z (failures
 * left in the tracker), then finishing every posted reduce-scatter and
 * reducing the grads the stage reduces once per step (stage 0: the buckets
 * not yet posted, then all of them waited; stage 1: reduce-scatter). */
void zero_comm_init(struct zero *z);
void zero_comm_free(struct zero *z);
void zero_reduce_step_grads(struct zero *z);

/* ---- the tied embedding across stages (parallel/zero/tie.c; zero_tie_init is in include/zero.h) */
/* A tie group of two ranks is set. */
bool zero_tie_active(const struct zero *z);
/* In zero_reduce_grads, after the dp reduction: the tied copy's reduced gradient
 * summed over the tie group. Collective over dp and the tie group. */
void zero_tie_grads(struct zero *z);

/* ---- optimizer states (parallel/zero/optstate.c) */
void optstate_alloc(struct zero *z);
void optstate_free(struct zero *z);
bool optstate_has(const struct zero *z, enum zero_state which);
/* One segment's update: w (fp32 master or params) and grad point at the
 * segment's first element; params_out at its bf16 params (or NULL). */
void optstate_update(struct zero *z, const struct opt_segment *g, const struct adamw_hparams *h, float *w,
                     const void *grad, bf16 *params_out, int64_t step);
/* Segment g's optimizer state `which` as fp32 values into dst (g->hi -
 * g->lo elements): a copy, or the dequantized codes; and back. */
void optstate_segment_to_fp32(const struct zero *z, enum zero_state which, const struct opt_segment *g, float *dst);
void optstate_segment_from_fp32(struct zero *z, enum zero_state which, const struct opt_segment *g,
                                const float *src);

#endif
