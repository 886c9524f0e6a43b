/* The step over units: fp32 views in (widened, or gathered under ZeRO-3),
 * gradients out (flushed into grads, or reduce-scattered under ZeRO-2/3). */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

void zero_alloc_states(struct engine *e);
void optstate_free(struct engine *e);
void zero_reduce_unit_grads(struct engine *e, int u, const float *acc);

static size_t max_unit_padded(const struct engine *e) {
    size_t a = shard_unit_padded(&e->sh, EMBED_UNIT), b = e->lay.shape.L > 0 ? shard_unit_padded(&e->sh, 1) : 0;
    return a > b ? a : b;
}

void engine_init(struct engine *e, const struct config *cfg, struct collectives *dp, struct mem_tracker *mem,
                 struct flop_counter *flops) {
    memset(e, 0, sizeof *e);
    e->cfg = cfg;
    e->dp = dp;
    e->stage = cfg->zero;
    e->mem = mem;
    e->flops = flops;
    struct model_shape shape = {.L = cfg->n_layer, .C = cfg->d_model, .NH = cfg->n_head, .T = cfg->seq_len,
                                .V = cfg->vocab_size};
    layout_init(&e->lay, shape);
    shard_layout_init(&e->sh, &e->lay, dp->size, dp->rank);
    zero_alloc_states(e);
    size_t p0 = shard_unit_padded(&e->sh, EMBED_UNIT), p1 = shard_unit_padded(&e->sh, 1);
    size_t wp = dtype_size(cfg->param_dtype), wg = dtype_size(cfg->grad_dtype);
    if (e->stage == 3) {
        e->gather_embed = mem_alloc(mem, MEM_COMM, "gathered unit 0 (params)", p0 * wp);
        e->gather_layer = mem_alloc(mem, MEM_COMM, "gathered layer (params)", p1 * wp);
    }
    if (e->stage >= 2) e->bucket = mem_alloc(mem, MEM_COMM, "reduce-scatter bucket (grads)", max_unit_padded(e) * wg);
    if (cfg->param_dtype == DTYPE_BF16) {
        e->embed_w = mem_alloc(mem, MEM_SCRATCH, "unit 0 weights (fp32)", p0 * 4);
        e->layer_w = mem_alloc(mem, MEM_SCRATCH, "layer weights (fp32)", p1 * 4);
    }
    /* fp32 grads at stages 0-1 accumulate straight into the grads */
    if (cfg->grad_dtype == DTYPE_BF16 || e->stage >= 2) {
        e->embed_dw = mem_alloc(mem, MEM_SCRATCH, "unit 0 grad accumulator (fp32)", p0 * 4);
        e->layer_dw = mem_alloc(mem, MEM_SCRATCH, "layer grad accumulator (fp32)", p1 * 4);
    }
    gpt_init(&e->model, &e->lay, cfg->micro_batch, cfg->act_dtype, cfg->recompute, mem, flops);
}

void engine_free(struct engine *e) {
    gpt_free(&e->model, e->mem);
    optstate_free(e);
    void *bufs[] = {e->st.params, e->st.master, e->st.grads, e->gather_embed, e->gather_layer,
                    e->bucket,    e->embed_w,   e->layer_w,  e->embed_dw,     e->layer_dw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(e->mem, bufs[i]);
}

void engine_set_weights(struct engine *e, const float *full) {
    bool bf16_params = e->cfg->param_dtype == DTYPE_BF16;
    if (bf16_params) {
        engine_scatter_state(e, STATE_MASTER, full);
        bf16 *rounded = malloc(e->lay.total * sizeof *rounded);
        for (size_t i = 0; i < e->lay.total; i++) rounded[i] = f32_to_bf16(full[i]);
        engine_scatter_state(e, STATE_PARAMS, rounded);
        free(rounded);
    } else {
        engine_scatter_state(e, STATE_PARAMS, full);
    }
}

void engine_init_params(struct engine *e) {
    float *w = malloc(e->lay.total * sizeof *w);
    gpt_init_weights(&e->lay, w, e->cfg->init_std, (uint64_t)e->cfg->seed);
    engine_set_weights(e, w);
    free(w);
}

/* Unit u's params in param_dtype, whole: the params themselves, or (stage
 * 3) this rank's slice all-gathered into a unit buffer. */
static const void *unit_params(struct engine *e, int u) {
    size_t wp = dtype_size(e->cfg->param_dtype);
    if (e->stage < 3) return (const char *)e->st.params + shard_padded_offset(&e->sh, u) * wp;
    char *buf = u == EMBED_UNIT ? e->gather_embed : e->gather_layer;
    size_t chunk = shard_unit_chunk(&e->sh, u);
    memcpy(buf + (size_t)e->sh.rank * chunk * wp, (const char *)e->st.params + shard_offset(&e->sh, u) * wp,
           chunk * wp);
    e->dp->all_gather(e->dp, buf, chunk, e->cfg->param_dtype);
    return buf;
}

/* fp32 weights of unit u. Below stage 3, unit 0 is widened once per update:
 * it serves the embedding, the tied head and every micro-batch. */
static const float *unit_weights(struct engine *e, int u) {
    if (u == EMBED_UNIT && e->embed_w_fresh) return e->embed_w;
    const void *p = unit_params(e, u);
    if (e->cfg->param_dtype == DTYPE_FP32) return p;
    float *dst = u == EMBED_UNIT ? e->embed_w : e->layer_w;
    const bf16 *src = p;
    size_t n = layout_unit_size(&e->lay, u);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
    if (u == EMBED_UNIT && e->stage < 3) e->embed_w_fresh = true;
    return dst;
}

/* fp32 gradient accumulator for unit u: the grads themselves when they are
 * fp32 and full, else a zeroed unit buffer. */
static float *unit_grads_begin(struct engine *e, int u) {
    if (e->cfg->grad_dtype == DTYPE_FP32 && e->stage < 2)
        return (float *)e->st.grads + shard_padded_offset(&e->sh, u);
    float *acc = u == EMBED_UNIT ? e->embed_dw : e->layer_dw;
    memset(acc, 0, shard_unit_padded(&e->sh, u) * sizeof(float));
    return acc;
}

/* Unit u's backward is complete: reduce-scatter it (stages 2, 3), or add
 * the fp32 accumulator into bf16 grads (one rounding per micro-batch, as a
 * bf16 gradient buffer implies). */
static void unit_grads_end(struct engine *e, int u, const float *acc) {
    if (e->stage >= 2) {
        zero_reduce_unit_grads(e, u, acc);
        return;
    }
    if (e->cfg->grad_dtype == DTYPE_FP32) return;
    bf16 *g = (bf16 *)e->st.grads + shard_padded_offset(&e->sh, u);
    size_t n = layout_unit_size(&e->lay, u);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) g[i] = f32_to_bf16(bf16_to_f32(g[i]) + acc[i]);
}

void engine_zero_grads(struct engine *e) {
    size_t n = e->stage >= 2 ? e->sh.total_shard : e->sh.total_padded;
    memset(e->st.grads, 0, n * dtype_size(e->cfg->grad_dtype));
}

static float forward(struct engine *e, const int32_t *inputs, const int32_t *targets, float dloss) {
    const float *w0 = unit_weights(e, EMBED_UNIT); /* serves both ends of the forward */
    gpt_embed_forward(&e->model, w0, inputs);
    for (int l = 0; l < e->lay.shape.L; l++) gpt_layer_forward(&e->model, l, unit_weights(e, 1 + l));
    return gpt_head_forward(&e->model, w0, targets, dloss);
}

float engine_forward(struct engine *e, const int32_t *inputs, const int32_t *targets) {
    return forward(e, inputs, targets, 0.0f);
}

float engine_forward_backward(struct engine *e, const int32_t *inputs, const int32_t *targets, float dloss) {
    int BT = e->cfg->micro_batch * e->cfg->seq_len;
    float loss = forward(e, inputs, targets, dloss / (float)BT);
    const float *w0 = unit_weights(e, EMBED_UNIT); /* stage 3: gathered again for the backward */
    float *dw0 = unit_grads_begin(e, EMBED_UNIT);
    gpt_head_backward(&e->model, w0, dw0);
    for (int l = e->lay.shape.L - 1; l >= 0; l--) {
        float *dw = unit_grads_begin(e, 1 + l);
        gpt_layer_backward(&e->model, l, unit_weights(e, 1 + l), dw);
        unit_grads_end(e, 1 + l, dw);
    }
    gpt_embed_backward(&e->model, dw0);
    unit_grads_end(e, EMBED_UNIT, dw0);
    return loss;
}
