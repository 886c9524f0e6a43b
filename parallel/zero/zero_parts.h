/* The parts of struct zero (include/zero.h) that only parallel/zero/ calls:
 * the step's reductions and the tied embedding's gradient sum (comm.c),
 * where a state's elements live (places.c) and Adafactor's step and resume
 * states (factored.c). zero.c and states_io.c put them together behind
 * include/zero.h. */
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

/* ---- the tied embedding across stages (parallel/zero/comm.c; zero_tie_init is in include/zero.h) */
/* A tie group of two ranks is set. */
bool zero_tie_active(const struct zero *z);
/* In zero_reduce_grads, after the dp reduction: the tied copy's reduced gradient
 * summed over the tie group. Collective over dp and the tie group. */
void zero_all_reduce_tied_grads(struct zero *z);

/* ---- where elements live (parallel/zero/places.c) */
/* Which states the stage shards: params (3), grads (2, 3), master and
 * optimizer states (1-3). */
bool zero_params_sharded(const struct zero *z);
bool zero_grads_sharded(const struct zero *z);
bool zero_optim_sharded(const struct zero *z);
size_t zero_psize(const struct zero *z); /* bytes per param / grad element */
size_t zero_gsize(const struct zero *z);
/* Element i of unit u in a full padded buffer, in this rank's shard, in
 * the params, in the master and optimizer states, in the reduced grads
 * (full at stage 0, the unit's start at stage 1 after the in-place
 * reduce-scatter, the shard at stages 2 and 3). */
size_t zero_full_index(const struct zero *z, int u, size_t i);
size_t zero_shard_index(const struct zero *z, int u, size_t i);
size_t zero_param_index(const struct zero *z, int u, size_t i);
size_t zero_state_index(const struct zero *z, int u, size_t i);
size_t zero_grad_index(const struct zero *z, int u, size_t i);
/* Segment g's reduced gradient, and its fp32 weights (the master, or the
 * fp32 params) with where the update writes bf16 params (NULL: none). */
const void *zero_segment_grad(const struct zero *z, const struct opt_segment *g);
float *zero_segment_weights(struct zero *z, const struct opt_segment *g, bf16 **params_out);
/* Where segment g's first fp32 optimizer state element sits in s1 and s2. */
size_t zero_opt_f32_index(const struct zero *z, const struct opt_segment *g);

/* ---- adafactor (parallel/zero/factored.c): the whole step over the
 * rank's segments, collective over dp when the states are sharded. */
void factored_update(struct zero *z, const struct adamw_hparams *h, int64_t step);
/* Resume states: segment g's second moment per element (V = R C / sum(C),
 * or v) into out; and R, C, v of unit u's tensors re-derived from the whole
 * unit's V (src: the unit's elements, fp32): V's row sums and column sums. */
void factored_segment_moment(const struct zero *z, const struct opt_segment *g, float *out);
void factored_load_unit(struct zero *z, int u, const float *src);
/* The statistics as they are (STATE_FACTORED), element by element in the
 * tensor's own (slice's) coordinates: R_r at (r, 0), C_j at (0, j) for j
 * >= 1, C_0 at (1, 1), 0 elsewhere; a vector's v as it is. The rank that
 * holds an element holds the value put there (its rows, all columns). */
void factored_segment_raw(const struct zero *z, const struct opt_segment *g, float *out);
void factored_load_raw_unit(struct zero *z, int u, const float *src);
/* zero_states_loaded's part (collective over tp when tp > 1). */
void factored_loaded(struct zero *z, bool as_saved);

#endif
