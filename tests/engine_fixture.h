/* Test helpers over the engine's per-micro-batch interface: build an engine
 * for the whole model from a config, run one micro-batch forward and
 * backward in slot 0, and move full fp32/bf16 buffers in and out unit by
 * unit (tests may hold full copies; the trainer never does). */
#ifndef SHARDLAB_TEST_ENGINE_FIXTURE_H
#define SHARDLAB_TEST_ENGINE_FIXTURE_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "../train/run/run.h"

/* n token ids below V from seed, by a fixed LCG (not the library's RNG,
 * so the test data never changes with it). */
static inline void fixture_tokens(int32_t *out, size_t n, uint64_t seed, int32_t V) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        out[i] = (int32_t)((s >> 33) % (uint64_t)V);
    }
}

static inline void fixture_engine_init(struct engine *e, const struct config *c, struct grid *grid,
                                       struct mem_tracker *mem, struct exec_ctx *flops) {
    struct model_layout lay;
    layout_init_whole(&lay, trainer_model_shape(c));
    struct engine_options o = trainer_engine_options(c);
    char err[256];
    if (engine_init(e, &o, &lay, grid, mem, MEM_HOST, flops, err, sizeof err) != 0) {
        fprintf(stderr, "engine_init: %s\n", err);
        abort();
    }
}

static inline float fixture_forward(struct engine *e, const int32_t *inputs, const int32_t *targets) {
    struct mb_input in = {.inputs = inputs, .targets = targets};
    return engine_forward(e, 0, &in, NULL, 0.0f);
}

static inline float fixture_forward_backward(struct engine *e, const int32_t *inputs, const int32_t *targets,
                                             float dloss) {
    struct mb_input in = {.inputs = inputs, .targets = targets};
    float loss = engine_forward(e, 0, &in, NULL, dloss);
    engine_backward(e, 0, NULL, NULL);
    return loss;
}

/* The optimizer step's phases as step_run runs them (parallel/step.c),
 * without its loss check: reduce, norm, and, unless skip_nonfinite meets a
 * NaN or Inf norm, update and gather. */
struct fixture_step {
    double grad_norm;
    bool skipped; /* the update was not applied */
};

static inline struct fixture_step fixture_optimizer_step(struct engine *e, int step, bool skip_nonfinite) {
    engine_reduce_grads(e);
    struct fixture_step r = {.grad_norm = engine_all_reduce_grad_norm(e), .skipped = true};
    if (skip_nonfinite && !isfinite(r.grad_norm)) return r;
    engine_update(e, step, r.grad_norm);
    engine_all_gather_updated(e);
    r.skipped = false;
    return r;
}

/* Params (and master) from a full fp32 buffer in layout order. */
static inline void fixture_set_weights(struct engine *e, const float *full) {
    for (int u = 0; u < e->lay.n_units; u++) engine_set_unit(e, u, full + layout_unit_offset(&e->lay, u));
}

/* State `which` gathered into a full buffer in layout order (valid on dp
 * rank 0). */
static inline void fixture_gather_state(struct engine *e, enum zero_state which, void *full) {
    void *work = malloc(engine_unit_staging_bytes(e));
    size_t elem = dtype_size(zero_state_dtype(&e->z, which));
    for (int u = 0; u < e->lay.n_units; u++) {
        zero_gather_unit(&e->z, which, u, work);
        if (e->z.sh.rank == 0) memcpy((char *)full + layout_unit_offset(&e->lay, u) * elem, work, layout_unit_size(&e->lay, u) * elem);
    }
    free(work);
}

#endif
