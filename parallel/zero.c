/* Model states under ZeRO stages 0-3: where each lives, how gradients are
 * reduced, the sharded optimizer step, and moving states to and from full
 * buffers for checkpoints. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "optim.h"

/* element i of unit u in a full padded buffer / in this rank's shard */
static size_t full_index(const struct engine *e, int u, size_t i) { return shard_padded_offset(&e->sh, u) + i; }
static size_t shard_index(const struct engine *e, int u, size_t i) {
    return shard_offset(&e->sh, u) + (i - (size_t)e->sh.rank * shard_unit_chunk(&e->sh, u));
}

static bool params_sharded(const struct engine *e) { return e->stage >= 3; }
static bool grads_sharded(const struct engine *e) { return e->stage >= 2; }
static bool optim_sharded(const struct engine *e) { return e->stage >= 1; }

void optstate_alloc(struct engine *e);
void optstate_update(struct engine *e, const struct opt_segment *g, const struct adamw_hparams *h, float *w,
                     const void *grad, bf16 *params_out, int64_t step);
void optstate_to_fp32(const struct engine *e, enum engine_state which, float *dst);
void optstate_from_fp32(struct engine *e, enum engine_state which, const float *src);
bool optstate_has(const struct engine *e, enum engine_state which);

/* Element i of unit u in the master weights and fp32 optimizer states. */
size_t zero_state_index(const struct engine *e, int u, size_t i) {
    return optim_sharded(e) ? shard_index(e, u, i) : full_index(e, u, i);
}

void zero_alloc_states(struct engine *e) {
    const struct config *c = e->cfg;
    size_t full = e->sh.total_padded, shard = e->sh.total_shard;
    struct mem_tracker *mem = e->mem;
    size_t np = params_sharded(e) ? shard : full, ng = grads_sharded(e) ? shard : full;
    size_t no = optim_sharded(e) ? shard : full;
    e->st.params = mem_alloc(mem, MEM_PARAMS, params_sharded(e) ? "params (shard)" : "params",
                             np * dtype_size(c->param_dtype));
    if (c->param_dtype == DTYPE_BF16)
        e->st.master = mem_alloc(mem, MEM_MASTER, optim_sharded(e) ? "master (fp32, shard)" : "master (fp32)", no * 4);
    e->st.grads = mem_alloc(mem, MEM_GRADS, grads_sharded(e) ? "grads (shard)" : "grads", ng * dtype_size(c->grad_dtype));
    optstate_alloc(e);
}

bool engine_has_state(const struct engine *e, enum engine_state which) {
    if (which == STATE_MASTER) return e->st.master != NULL;
    return which == STATE_PARAMS || optstate_has(e, which);
}

/* The array of `which` indexed like a full or shard buffer (for optimizer
 * states: an fp32 copy made by the caller), its element size, and whether
 * it is sharded. */
static void *state_buffer(const struct engine *e, enum engine_state which, size_t *elem, bool *sharded) {
    *elem = 4;
    *sharded = optim_sharded(e);
    if (which == STATE_PARAMS) {
        *elem = dtype_size(e->cfg->param_dtype);
        *sharded = params_sharded(e);
        return e->st.params;
    }
    return which == STATE_MASTER ? e->st.master : NULL;
}

static float *opt_copy(const struct engine *e) {
    return malloc((optim_sharded(e) ? e->sh.total_shard : e->sh.total_padded) * sizeof(float));
}

void engine_scatter_state(struct engine *e, enum engine_state which, const void *full) {
    size_t elem;
    bool sharded;
    bool opt = which == STATE_OPT1 || which == STATE_OPT2;
    char *dst = opt ? (char *)opt_copy(e) : state_buffer(e, which, &elem, &sharded);
    if (opt) state_buffer(e, which, &elem, &sharded);
    for (int u = 0; u < e->lay.n_units; u++) {
        size_t lo = 0, hi = layout_unit_size(&e->lay, u);
        if (sharded) shard_owned(&e->sh, u, e->sh.rank, &lo, &hi);
        size_t at = sharded ? shard_index(e, u, lo) : full_index(e, u, lo);
        memcpy(dst + at * elem, (const char *)full + (layout_unit_offset(&e->lay, u) + lo) * elem, (hi - lo) * elem);
    }
    if (opt) {
        optstate_from_fp32(e, which, (const float *)dst);
        free(dst);
    }
    if (which == STATE_PARAMS) e->embed_w_fresh = false;
}

void engine_gather_state(struct engine *e, enum engine_state which, void *full) {
    size_t elem;
    bool sharded;
    bool opt = which == STATE_OPT1 || which == STATE_OPT2;
    float *copy = NULL;
    const char *src = state_buffer(e, which, &elem, &sharded);
    if (opt) {
        copy = opt_copy(e);
        optstate_to_fp32(e, which, copy);
        src = (const char *)copy;
    }
    enum dtype dt = elem == 2 ? DTYPE_BF16 : DTYPE_FP32;
    struct comm_counters step_counts = e->dp->counters; /* checkpoint traffic is not a step's */
    for (int u = 0; u < e->lay.n_units; u++) {
        size_t n = layout_unit_size(&e->lay, u), chunk = shard_unit_chunk(&e->sh, u);
        char *dst = (char *)full + layout_unit_offset(&e->lay, u) * elem;
        if (!sharded) {
            if (e->sh.rank == 0) memcpy(dst, src + full_index(e, u, 0) * elem, n * elem);
            continue;
        }
        char *tmp = calloc(shard_unit_padded(&e->sh, u), elem);
        memcpy(tmp + (size_t)e->sh.rank * chunk * elem, src + shard_offset(&e->sh, u) * elem, chunk * elem);
        e->dp->all_gather(e->dp, tmp, chunk, dt);
        if (e->sh.rank == 0) memcpy(dst, tmp, n * elem);
        free(tmp);
    }
    free(copy);
    e->dp->counters = step_counts;
}

/* Stage 2/3: unit u's backward is done; reduce-scatter its fp32 gradient
 * (as grad_dtype on the wire) and add the owned slice into the grad shard. */
void zero_reduce_unit_grads(struct engine *e, int u, const float *acc) {
    enum dtype gd = e->cfg->grad_dtype;
    size_t padded = shard_unit_padded(&e->sh, u), chunk = shard_unit_chunk(&e->sh, u);
    if (gd == DTYPE_FP32) {
        memcpy(e->bucket, acc, padded * sizeof(float));
    } else {
        bf16 *b = e->bucket;
#pragma omp parallel for
        for (size_t i = 0; i < padded; i++) b[i] = f32_to_bf16(acc[i]);
    }
    e->dp->reduce_scatter_sum(e->dp, e->bucket, chunk, gd);
    size_t at = shard_offset(&e->sh, u);
    if (gd == DTYPE_FP32) {
        float *g = (float *)e->st.grads + at;
        const float *r = e->bucket;
        for (size_t i = 0; i < chunk; i++) g[i] += r[i];
    } else {
        bf16 *g = (bf16 *)e->st.grads + at;
        const bf16 *r = e->bucket;
        for (size_t i = 0; i < chunk; i++) g[i] = f32_to_bf16(bf16_to_f32(g[i]) + bf16_to_f32(r[i]));
    }
}

/* Stages 0 and 1 reduce once per step, after the last micro-batch. */
static void reduce_step_grads(struct engine *e) {
    enum dtype gd = e->cfg->grad_dtype;
    if (e->stage == 0) {
        e->dp->all_reduce_sum(e->dp, e->st.grads, e->sh.total_padded, gd);
    } else if (e->stage == 1) {
        /* in place per unit: the owned slice lands at the unit's start */
        for (int u = 0; u < e->lay.n_units; u++)
            e->dp->reduce_scatter_sum(e->dp, (char *)e->st.grads + full_index(e, u, 0) * dtype_size(gd),
                                      shard_unit_chunk(&e->sh, u), gd);
    }
}

/* Index of element i (unit-local, in this rank's update range) in the
 * reduced gradients: full (stage 0), the unit's start (stage 1, after the
 * in-place reduce-scatter), or the shard (stages 2, 3). */
static size_t grad_index(const struct engine *e, int u, size_t i) {
    if (e->stage == 0) return full_index(e, u, i);
    if (e->stage == 1) return full_index(e, u, i - (size_t)e->sh.rank * shard_unit_chunk(&e->sh, u));
    return shard_index(e, u, i);
}

/* Sum of squares of the reduced gradients this rank updates: its segments
 * partition exactly the elements it owns (every unit at stage 0). */
static double local_grad_sum_squares(const struct engine *e) {
    double s = 0.0;
    size_t gsize = dtype_size(e->cfg->grad_dtype);
    for (int k = 0; k < e->segs.n; k++) {
        const struct opt_segment *g = &e->segs.seg[k];
        s += grad_sum_squares((const char *)e->st.grads + grad_index(e, g->unit, g->lo) * gsize, e->cfg->grad_dtype,
                              g->hi - g->lo);
    }
    return s;
}

/* The update of every segment this rank owns (include/segments.h). */
static void update_segments(struct engine *e, const struct adamw_hparams *h, int step) {
    const struct config *c = e->cfg;
    size_t gsize = dtype_size(c->grad_dtype);
    for (int k = 0; k < e->segs.n; k++) {
        const struct opt_segment *g = &e->segs.seg[k];
        size_t pi = params_sharded(e) ? shard_index(e, g->unit, g->lo) : full_index(e, g->unit, g->lo);
        float *w = e->st.master ? e->st.master + zero_state_index(e, g->unit, g->lo) : (float *)e->st.params + pi;
        bf16 *out = e->st.master ? (bf16 *)e->st.params + pi : NULL;
        const char *grad = (const char *)e->st.grads + grad_index(e, g->unit, g->lo) * gsize;
        optstate_update(e, g, h, w, grad, out, step);
    }
}

struct step_result engine_optimizer_step(struct engine *e, int step) {
    const struct config *c = e->cfg;
    reduce_step_grads(e);
    double sq = local_grad_sum_squares(e);
    if (e->stage > 0) e->dp->all_reduce_scalars(e->dp, &sq, 1);
    struct step_result r = {.grad_norm = sqrt(sq), .lr = lr_at(c, step)};
    struct adamw_hparams h = {.lr = r.lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
                              .grad_scale = clip_scale(r.grad_norm, c->grad_clip), .t = (int64_t)step + 1};
    update_segments(e, &h, step);
    /* stages 1 and 2: every rank needs every updated param for the next forward */
    if (e->stage == 1 || e->stage == 2)
        for (int u = 0; u < e->lay.n_units; u++)
            e->dp->all_gather(e->dp, (char *)e->st.params + full_index(e, u, 0) * dtype_size(c->param_dtype),
                              shard_unit_chunk(&e->sh, u), c->param_dtype);
    e->embed_w_fresh = false;
    return r;
}
