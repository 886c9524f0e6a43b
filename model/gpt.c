/* GPT-2 forward and backward, unit by unit, over saved activations.
 *
 * Mixed precision of activations: every kernel computes in fp32. With
 * act_dtype = bf16 a layer computes into fp32 working buffers, each saved
 * tensor is rounded to bf16 in place right after it is produced (so the
 * forward consumes exactly the values the backward will see), and the layer
 * is then packed into its bf16 store. Backward widens a layer back. With
 * act_dtype = fp32 the kernels work on the store directly. */
#include "gpt.h"

#include <omp.h>
#include <string.h>

#include "layers.h"

static size_t btc(const struct gpt *m) { return (size_t)m->B * m->shape.T * m->shape.C; }
static size_t bt(const struct gpt *m) { return (size_t)m->B * m->shape.T; }

size_t gpt_layer_act_numel(const struct model_shape *s, int B, enum layer_act a) {
    size_t n = (size_t)B * s->T * s->C;
    switch (a) {
    case ACT_QKV: return 3 * n;
    case ACT_ATT: return (size_t)B * s->NH * s->T * s->T;
    case ACT_FCH:
    case ACT_FCH_GELU: return 4 * n;
    default: return n;
    }
}

/* Selective recompute keeps the probabilities out of the per-layer block. */
static bool in_block(const struct gpt *m, enum layer_act a) {
    return !(m->recompute == RECOMPUTE_SELECTIVE && a == ACT_ATT);
}

static size_t act_offset(const struct gpt *m, enum layer_act a) {
    size_t off = 0;
    for (int i = 0; i < (int)a; i++)
        if (in_block(m, (enum layer_act)i)) off += gpt_layer_act_numel(&m->shape, m->B, (enum layer_act)i);
    return off;
}

static size_t layer_act_total(const struct gpt *m) { return act_offset(m, ACT_NUM); }

static bool acts_bf16(const struct gpt *m) { return m->act_dtype == DTYPE_BF16; }

static void widen(float *dst, const bf16 *src, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

/* Values were already rounded in place, so this conversion is exact. */
static void pack(bf16 *dst, const float *src, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}

/* Rounds a just-computed saved tensor to what act_dtype can hold. */
static void round_saved(const struct gpt *m, float *p, size_t n) {
    if (!acts_bf16(m)) return;
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) p[i] = round_to_bf16(p[i]);
}

/* fp32 view of residual-stream slot i; `work` serves when stored as bf16. */
static float *resid_view(struct gpt *m, int i, float *work, bool load) {
    size_t off = (size_t)i * btc(m);
    if (!acts_bf16(m)) return (float *)m->resid + off;
    if (load) widen(work, (const bf16 *)m->resid + off, btc(m));
    return work;
}

static void resid_commit(struct gpt *m, int i, const float *work) {
    if (acts_bf16(m)) pack((bf16 *)m->resid + (size_t)i * btc(m), work, btc(m));
}

/* fp32 pointers to layer l's saved tensors. Full recompute: the one-layer
 * buffer (filled by the recompute). bf16: the working copy, widened from
 * the store when `load`. fp32: the store itself. */
static struct layer_view layer_view(struct gpt *m, int l, bool load) {
    struct layer_view v;
    bool full = m->recompute == RECOMPUTE_FULL, work = full || acts_bf16(m);
    size_t base = (size_t)l * layer_act_total(m);
    for (int a = 0; a < ACT_NUM; a++) {
        size_t off = act_offset(m, (enum layer_act)a);
        if (!in_block(m, (enum layer_act)a)) v.act[a] = m->att_recompute;
        else v.act[a] = work ? m->work_acts + off : (float *)m->layer_acts + base + off;
    }
    if (!full && acts_bf16(m) && load)
        widen(m->work_acts, (const bf16 *)m->layer_acts + base, layer_act_total(m));
    int slot = full ? 0 : l;
    for (int s = 0; s < STAT_NUM; s++) v.stat[s] = m->layer_stats + ((size_t)slot * STAT_NUM + s) * bt(m);
    return v;
}

static void layer_commit(struct gpt *m, int l) {
    if (m->recompute != RECOMPUTE_FULL && acts_bf16(m))
        pack((bf16 *)m->layer_acts + (size_t)l * layer_act_total(m), m->work_acts, layer_act_total(m));
}

static float *lnf_view(struct gpt *m, bool load) {
    if (!acts_bf16(m)) return (float *)m->lnf;
    if (load) widen(m->work_lnf, (const bf16 *)m->lnf, btc(m));
    return m->work_lnf;
}

void gpt_init(struct gpt *m, const struct model_layout *lay, int B, enum dtype act_dtype,
              enum recompute_mode recompute, struct mem_tracker *mem, struct flop_counter *flops) {
    memset(m, 0, sizeof *m);
    m->lay = lay;
    m->shape = lay->shape;
    m->B = B;
    m->act_dtype = act_dtype;
    m->recompute = recompute;
    m->flops = flops;
    size_t e = dtype_size(act_dtype), n = btc(m), L = (size_t)m->shape.L;
    bool full = recompute == RECOMPUTE_FULL;
    m->resid = mem_alloc(mem, MEM_ACTIVATIONS, "residual stream", (L + 1) * n * e);
    if (full) {
        m->work_acts = mem_alloc(mem, MEM_ACTIVATIONS, "recompute buffer (one layer, fp32)", layer_act_total(m) * 4);
        m->layer_stats = mem_alloc(mem, MEM_ACTIVATIONS, "layernorm stats (one layer, fp32)", STAT_NUM * bt(m) * 4);
    } else {
        m->layer_acts = mem_alloc(mem, MEM_ACTIVATIONS, "layer tensors", L * layer_act_total(m) * e);
        m->layer_stats = mem_alloc(mem, MEM_ACTIVATIONS, "layernorm stats (fp32)", L * STAT_NUM * bt(m) * 4);
        if (acts_bf16(m))
            m->work_acts = mem_alloc(mem, MEM_SCRATCH, "one layer's tensors (fp32)", layer_act_total(m) * 4);
    }
    if (recompute == RECOMPUTE_SELECTIVE)
        m->att_recompute = mem_alloc(mem, MEM_ACTIVATIONS, "attention probabilities (one layer, fp32)",
                                     gpt_layer_act_numel(&m->shape, B, ACT_ATT) * 4);
    m->lnf = mem_alloc(mem, MEM_ACTIVATIONS, "final layernorm out", n * e);
    m->lnf_stats = mem_alloc(mem, MEM_ACTIVATIONS, "final layernorm stats (fp32)", 2 * bt(m) * 4);
    m->logits = mem_alloc(mem, MEM_ACTIVATIONS, "logits (fp32)", bt(m) * (size_t)m->shape.Vp * 4);
    m->losses = mem_alloc(mem, MEM_ACTIVATIONS, "losses (fp32)", bt(m) * 4);
    m->inputs = mem_alloc(mem, MEM_ACTIVATIONS, "token ids", bt(m) * sizeof(int32_t));
    m->targets = mem_alloc(mem, MEM_ACTIVATIONS, "target ids", bt(m) * sizeof(int32_t));
    if (acts_bf16(m)) {
        m->work_resid_in = mem_alloc(mem, MEM_SCRATCH, "residual in (fp32)", n * 4);
        m->work_resid_out = mem_alloc(mem, MEM_SCRATCH, "residual out (fp32)", n * 4);
        m->work_lnf = mem_alloc(mem, MEM_SCRATCH, "final layernorm out (fp32)", n * 4);
    }
    m->dresid = mem_alloc(mem, MEM_SCRATCH, "d residual (fp32)", n * 4);
    m->dbig = mem_alloc(mem, MEM_SCRATCH, "d fc (fp32)", 4 * n * 4);
    m->dqkv = mem_alloc(mem, MEM_SCRATCH, "d qkv (fp32)", 3 * n * 4);
    m->dmid = mem_alloc(mem, MEM_SCRATCH, "d layer temp (fp32)", n * 4);
    m->att_scratch =
        mem_alloc(mem, MEM_SCRATCH, "attention rows (fp32)", (size_t)m->shape.T * (size_t)omp_get_max_threads() * 4);
}

void gpt_free(struct gpt *m, struct mem_tracker *mem) {
    void *bufs[] = {m->resid,   m->layer_acts,    m->layer_stats,    m->att_recompute, m->lnf,
                    m->lnf_stats, m->logits,      m->losses,         m->inputs,        m->targets,
                    m->work_acts, m->work_resid_in, m->work_resid_out, m->work_lnf,    m->dresid,
                    m->dbig,      m->dqkv,        m->dmid,           m->att_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(mem, bufs[i]);
    memset(m, 0, sizeof *m);
}

static const float *wt(const struct gpt *m, const float *w, enum layer_tensor t) {
    return w + m->lay->layer_offset[t];
}

static float *dwt(const struct gpt *m, float *dw, enum layer_tensor t) { return dw + m->lay->layer_offset[t]; }

static const float *ew(const struct gpt *m, const float *w0, enum embed_tensor t) {
    return w0 + m->lay->embed_offset[t];
}

void gpt_embed_forward(struct gpt *m, const float *w0, const int32_t *inputs) {
    memcpy(m->inputs, inputs, bt(m) * sizeof *inputs);
    float *out = resid_view(m, 0, m->work_resid_out, false);
    encoder_forward(out, m->inputs, ew(m, w0, EMB_WTE), ew(m, w0, EMB_WPE), m->B, m->shape.T, m->shape.C);
    m->flops->other += (double)btc(m);
    round_saved(m, out, btc(m));
    resid_commit(m, 0, out);
}

/* The layer's forward from x into the view's tensors; with out, also the
 * layer output (the recompute of full checkpointing needs no output: the
 * backward starts from the saved stream). */
static void layer_forward(struct gpt *m, const float *x, struct layer_view *v, const float *w, float *out) {
    int N = (int)bt(m), C = m->shape.C;
    struct flop_counter *fc = m->flops;
    float **a = v->act, *tmp = m->dmid; /* dmid is free outside the backward's own use */

    layernorm_forward(a[ACT_LN1], v->stat[STAT_LN1_MEAN], v->stat[STAT_LN1_RSTD], x, wt(m, w, LAYER_LN1_W),
                      wt(m, w, LAYER_LN1_B), N, C, fc);
    round_saved(m, a[ACT_LN1], btc(m));
    matmul_forward(a[ACT_QKV], a[ACT_LN1], wt(m, w, LAYER_QKV_W), wt(m, w, LAYER_QKV_B), N, C, 3 * C, fc);
    round_saved(m, a[ACT_QKV], 3 * btc(m));
    attention_forward(a[ACT_ATTY], a[ACT_ATT], a[ACT_QKV], m->B, m->shape.T, C, m->shape.NH, fc);
    round_saved(m, a[ACT_ATT], gpt_layer_act_numel(&m->shape, m->B, ACT_ATT));
    round_saved(m, a[ACT_ATTY], btc(m));
    matmul_forward(tmp, a[ACT_ATTY], wt(m, w, LAYER_ATTPROJ_W), wt(m, w, LAYER_ATTPROJ_B), N, C, C, fc);
    residual_forward(a[ACT_RES2], x, tmp, (int)btc(m), fc);
    round_saved(m, a[ACT_RES2], btc(m));
    layernorm_forward(a[ACT_LN2], v->stat[STAT_LN2_MEAN], v->stat[STAT_LN2_RSTD], a[ACT_RES2],
                      wt(m, w, LAYER_LN2_W), wt(m, w, LAYER_LN2_B), N, C, fc);
    round_saved(m, a[ACT_LN2], btc(m));
    matmul_forward(a[ACT_FCH], a[ACT_LN2], wt(m, w, LAYER_FC_W), wt(m, w, LAYER_FC_B), N, C, 4 * C, fc);
    round_saved(m, a[ACT_FCH], 4 * btc(m));
    gelu_forward(a[ACT_FCH_GELU], a[ACT_FCH], (int)(4 * btc(m)), fc);
    round_saved(m, a[ACT_FCH_GELU], 4 * btc(m));
    if (!out) return;
    matmul_forward(tmp, a[ACT_FCH_GELU], wt(m, w, LAYER_FCPROJ_W), wt(m, w, LAYER_FCPROJ_B), N, 4 * C, C, fc);
    residual_forward(out, a[ACT_RES2], tmp, (int)btc(m), fc);
    round_saved(m, out, btc(m));
}

void gpt_layer_forward(struct gpt *m, int l, const float *w) {
    const float *x = resid_view(m, l, m->work_resid_in, true);
    struct layer_view v = layer_view(m, l, false);
    float *out = resid_view(m, l + 1, m->work_resid_out, false);
    layer_forward(m, x, &v, w, out);
    layer_commit(m, l);
    resid_commit(m, l + 1, out);
}

float gpt_head_forward(struct gpt *m, const float *w0, const int32_t *targets, float dloss) {
    int N = (int)bt(m), C = m->shape.C;
    const float *x = resid_view(m, m->shape.L, m->work_resid_in, true);
    float *lnf = lnf_view(m, false);
    layernorm_forward(lnf, m->lnf_stats, m->lnf_stats + bt(m), x, ew(m, w0, EMB_LNF_W), ew(m, w0, EMB_LNF_B), N,
                      C, m->flops);
    round_saved(m, lnf, btc(m));
    if (acts_bf16(m)) pack((bf16 *)m->lnf, lnf, btc(m));
    /* The LM head is tied to the token embedding: logits = lnf . wte^T. */
    matmul_forward(m->logits, lnf, ew(m, w0, EMB_WTE), NULL, N, C, m->shape.Vp, m->flops);
    memcpy(m->targets, targets, bt(m) * sizeof *targets);
    double sum = crossentropy_forward_backward(m->logits, m->losses, m->targets, N, m->shape.V, m->shape.Vp,
                                               dloss, m->flops);
    return (float)(sum / N);
}

void gpt_head_backward(struct gpt *m, const float *w0, float *dw0) {
    int N = (int)bt(m), C = m->shape.C;
    const float *x = resid_view(m, m->shape.L, m->work_resid_in, true);
    const float *lnf = lnf_view(m, true);
    const struct model_layout *lay = m->lay;
    matmul_backward(m->dmid, dw0 + lay->embed_offset[EMB_WTE], NULL, m->logits, lnf, ew(m, w0, EMB_WTE), N, C,
                    m->shape.Vp, m->flops);
    memset(m->dresid, 0, btc(m) * sizeof(float));
    layernorm_backward(m->dresid, dw0 + lay->embed_offset[EMB_LNF_W], dw0 + lay->embed_offset[EMB_LNF_B], m->dmid,
                       x, ew(m, w0, EMB_LNF_W), m->lnf_stats, m->lnf_stats + bt(m), N, C, m->flops);
}

void gpt_layer_backward(struct gpt *m, int l, const float *w, float *dw) {
    int N = (int)bt(m), C = m->shape.C;
    struct flop_counter *fc = m->flops;
    const float *x = resid_view(m, l, m->work_resid_in, true);
    struct layer_view v = layer_view(m, l, true);
    float **a = v.act;
    /* Recompute what was not kept. The kernels are deterministic, so the
     * values equal the forward's bit for bit (rounded alike in bf16). */
    if (m->recompute == RECOMPUTE_FULL) layer_forward(m, x, &v, w, NULL);
    if (m->recompute == RECOMPUTE_SELECTIVE) {
        attention_forward(m->dmid, a[ACT_ATT], a[ACT_QKV], m->B, m->shape.T, C, m->shape.NH, fc);
        round_saved(m, a[ACT_ATT], gpt_layer_act_numel(&m->shape, m->B, ACT_ATT));
    }
    /* On entry dresid holds dL/d(layer output); on exit dL/d(layer input). */
    matmul_backward(m->dbig, dwt(m, dw, LAYER_FCPROJ_W), dwt(m, dw, LAYER_FCPROJ_B), m->dresid, a[ACT_FCH_GELU],
                    wt(m, w, LAYER_FCPROJ_W), N, 4 * C, C, fc);
    gelu_backward(m->dbig, a[ACT_FCH], m->dbig, (int)(4 * btc(m)), fc);
    matmul_backward(m->dmid, dwt(m, dw, LAYER_FC_W), dwt(m, dw, LAYER_FC_B), m->dbig, a[ACT_LN2],
                    wt(m, w, LAYER_FC_W), N, C, 4 * C, fc);
    layernorm_backward(m->dresid, dwt(m, dw, LAYER_LN2_W), dwt(m, dw, LAYER_LN2_B), m->dmid, a[ACT_RES2],
                       wt(m, w, LAYER_LN2_W), v.stat[STAT_LN2_MEAN], v.stat[STAT_LN2_RSTD], N, C, fc);
    matmul_backward(m->dmid, dwt(m, dw, LAYER_ATTPROJ_W), dwt(m, dw, LAYER_ATTPROJ_B), m->dresid, a[ACT_ATTY],
                    wt(m, w, LAYER_ATTPROJ_W), N, C, C, fc);
    attention_backward(m->dqkv, m->dmid, a[ACT_QKV], a[ACT_ATT], m->att_scratch, m->B, m->shape.T, C,
                       m->shape.NH, fc);
    matmul_backward(m->dmid, dwt(m, dw, LAYER_QKV_W), dwt(m, dw, LAYER_QKV_B), m->dqkv, a[ACT_LN1],
                    wt(m, w, LAYER_QKV_W), N, C, 3 * C, fc);
    layernorm_backward(m->dresid, dwt(m, dw, LAYER_LN1_W), dwt(m, dw, LAYER_LN1_B), m->dmid, x,
                       wt(m, w, LAYER_LN1_W), v.stat[STAT_LN1_MEAN], v.stat[STAT_LN1_RSTD], N, C, fc);
}

void gpt_embed_backward(struct gpt *m, float *dw0) {
    encoder_backward(dw0 + m->lay->embed_offset[EMB_WTE], dw0 + m->lay->embed_offset[EMB_WPE], m->dresid,
                     m->inputs, m->B, m->shape.T, m->shape.C);
    m->flops->other += 2.0 * (double)btc(m);
}

const float *gpt_logits_at(const struct gpt *m, int b, int t) {
    return m->logits + ((size_t)b * m->shape.T + t) * m->shape.Vp;
}
