/* The single-process engine: model states, per-unit fp32 views, the step. */
#include "engine.h"

#include <math.h>
#include <string.h>

#include "optim.h"

static size_t unit_off(const struct engine *e, int u) { return layout_unit_offset(&e->lay, u); }
static size_t unit_len(const struct engine *e, int u) { return layout_unit_size(&e->lay, u); }

void engine_init(struct engine *e, const struct config *cfg, struct mem_tracker *mem, struct flop_counter *flops) {
    memset(e, 0, sizeof *e);
    e->cfg = cfg;
    e->mem = mem;
    e->flops = flops;
    struct model_shape shape = {.L = cfg->n_layer, .C = cfg->d_model, .NH = cfg->n_head, .T = cfg->seq_len,
                                .V = cfg->vocab_size};
    layout_init(&e->lay, shape);
    size_t psi = e->lay.total;
    bool bf16_params = cfg->param_dtype == DTYPE_BF16, bf16_grads = cfg->grad_dtype == DTYPE_BF16;
    e->st.params = mem_alloc(mem, MEM_PARAMS, "params", psi * dtype_size(cfg->param_dtype));
    if (bf16_params) e->st.master = mem_alloc(mem, MEM_MASTER, "master weights (fp32)", psi * 4);
    e->st.grads = mem_alloc(mem, MEM_GRADS, "grads", psi * dtype_size(cfg->grad_dtype));
    e->st.adam_m = mem_alloc(mem, MEM_OPTIMIZER, "adam m (fp32)", psi * 4);
    e->st.adam_v = mem_alloc(mem, MEM_OPTIMIZER, "adam v (fp32)", psi * 4);
    if (bf16_params) {
        e->embed_w = mem_alloc(mem, MEM_SCRATCH, "unit 0 weights (fp32)", e->lay.embed_size * 4);
        e->layer_w = mem_alloc(mem, MEM_SCRATCH, "layer weights (fp32)", e->lay.layer_size * 4);
    }
    if (bf16_grads) {
        e->embed_dw = mem_alloc(mem, MEM_SCRATCH, "unit 0 grad accumulator (fp32)", e->lay.embed_size * 4);
        e->layer_dw = mem_alloc(mem, MEM_SCRATCH, "layer grad accumulator (fp32)", e->lay.layer_size * 4);
    }
    gpt_init(&e->model, &e->lay, cfg->micro_batch, cfg->act_dtype, mem, flops);
}

void engine_free(struct engine *e) {
    gpt_free(&e->model, e->mem);
    void *bufs[] = {e->st.params, e->st.master, e->st.grads, e->st.adam_m, e->st.adam_v,
                    e->embed_w,   e->layer_w,   e->embed_dw, e->layer_dw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(e->mem, bufs[i]);
}

static void round_params_from(struct engine *e, const float *w) {
    bf16 *p = e->st.params;
#pragma omp parallel for
    for (size_t i = 0; i < e->lay.total; i++) p[i] = f32_to_bf16(w[i]);
}

void engine_init_params(struct engine *e) {
    float *w = e->st.master ? e->st.master : (float *)e->st.params;
    gpt_init_weights(&e->lay, w, e->cfg->init_std, (uint64_t)e->cfg->seed);
    if (e->st.master) round_params_from(e, w);
    e->embed_w_fresh = false;
}

void engine_sync_master_from_params(struct engine *e) {
    if (!e->st.master) return;
    const bf16 *p = e->st.params;
    for (size_t i = 0; i < e->lay.total; i++) e->st.master[i] = bf16_to_f32(p[i]);
    e->embed_w_fresh = false;
}

/* fp32 weights of unit u. Unit 0 is widened once per parameter update: it
 * serves the embedding, the tied head and every micro-batch. */
static const float *unit_weights(struct engine *e, int u) {
    size_t off = unit_off(e, u), n = unit_len(e, u);
    if (!e->st.master) return (const float *)e->st.params + off;
    if (u == EMBED_UNIT && e->embed_w_fresh) return e->embed_w;
    float *dst = u == EMBED_UNIT ? e->embed_w : e->layer_w;
    const bf16 *src = (const bf16 *)e->st.params + off;
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
    if (u == EMBED_UNIT) e->embed_w_fresh = true;
    return dst;
}

/* fp32 gradient accumulator for unit u: the grads themselves when fp32. */
static float *unit_grads_begin(struct engine *e, int u) {
    if (e->cfg->grad_dtype == DTYPE_FP32) return (float *)e->st.grads + unit_off(e, u);
    float *acc = u == EMBED_UNIT ? e->embed_dw : e->layer_dw;
    memset(acc, 0, unit_len(e, u) * sizeof(float));
    return acc;
}

/* The unit's backward is complete: add its fp32 gradient into bf16 grads
 * (one rounding per micro-batch, as a bf16 gradient buffer implies). */
static void unit_grads_end(struct engine *e, int u, const float *acc) {
    if (e->cfg->grad_dtype == DTYPE_FP32) return;
    bf16 *g = (bf16 *)e->st.grads + unit_off(e, u);
    size_t n = unit_len(e, u);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) g[i] = f32_to_bf16(bf16_to_f32(g[i]) + acc[i]);
}

void engine_zero_grads(struct engine *e) {
    memset(e->st.grads, 0, e->lay.total * dtype_size(e->cfg->grad_dtype));
}

static float forward(struct engine *e, const int32_t *inputs, const int32_t *targets, float dloss) {
    gpt_embed_forward(&e->model, unit_weights(e, EMBED_UNIT), inputs);
    for (int l = 0; l < e->lay.shape.L; l++) gpt_layer_forward(&e->model, l, unit_weights(e, 1 + l));
    return gpt_head_forward(&e->model, unit_weights(e, EMBED_UNIT), targets, dloss);
}

float engine_forward(struct engine *e, const int32_t *inputs, const int32_t *targets) {
    return forward(e, inputs, targets, 0.0f);
}

float engine_forward_backward(struct engine *e, const int32_t *inputs, const int32_t *targets, float dloss) {
    int BT = e->cfg->micro_batch * e->cfg->seq_len;
    float loss = forward(e, inputs, targets, dloss / (float)BT);
    const float *w0 = unit_weights(e, EMBED_UNIT);
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

struct step_result engine_optimizer_step(struct engine *e, int step) {
    const struct config *c = e->cfg;
    struct step_result r;
    r.grad_norm = sqrt(grad_sum_squares(e->st.grads, c->grad_dtype, e->lay.total));
    r.lr = lr_at(c, step);
    struct adamw_hparams h = {.lr = r.lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
                              .grad_scale = clip_scale(r.grad_norm, c->grad_clip), .t = (int64_t)step + 1};
    float *w = e->st.master ? e->st.master : (float *)e->st.params;
    size_t gsize = dtype_size(c->grad_dtype);
    /* tensor by tensor: decay applies to matrices only (unless configured) */
    for (int i = 0; i < layout_num_tensors(&e->lay); i++) {
        struct tensor_info t = layout_tensor(&e->lay, i);
        h.weight_decay = (c->decay_targets == DECAY_ALL || tensor_is_matrix(&t)) ? c->weight_decay : 0.0f;
        struct param_writeback out = {
            .params = e->st.master ? (bf16 *)e->st.params + t.offset : NULL,
            .rounding = c->rounding,
            .seed = (uint64_t)c->seed,
            .noise_index = (uint64_t)step * e->lay.total + t.offset,
        };
        adamw_update(&h, t.numel, w + t.offset, e->st.adam_m + t.offset, e->st.adam_v + t.offset,
                     (const char *)e->st.grads + t.offset * gsize, c->grad_dtype, &out, e->flops);
    }
    e->embed_w_fresh = false;
    return r;
}
