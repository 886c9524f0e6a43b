/* LLaMA 3's blocks (llm.c's train_llama3.py, Meta's reference), unit by
 * unit, over the same slots and engine as GPT-2's (include/gpt.h):
 *
 *   embedding  x = wte[token]                          (no position table)
 *   layer      h = x + attproj(attention(rope(qkv(rmsnorm1(x)))))
 *              y = h + fcproj(silu(fc2(rmsnorm2(h))) * fc(rmsnorm2(h)))
 *   head       logits = lm_head(rmsnorm_f(x))          (untied)
 *
 * qkv's rows are q (NH heads), then k and v (KV heads each: grouped-query
 * attention, query head h reading KV head h / (NH / KV)); RoPE rotates q
 * and k at each token's position (one call over the NH + KV heads); fc is
 * SwiGLU's up, fc2 its gate, fcproj its down projection. No biases.
 *
 * Tensor parallelism (Shoeybi et al. 2019) as GPT-2's: qkv, fc and fc2 are
 * column-parallel (this rank's NH/tp query and KV/tp key/value heads, its
 * F/tp of SwiGLU's features), attproj and fcproj row-parallel, wte and
 * lm_head vocabulary-parallel; the model meets f and g only through its
 * table of points (model/parallel_points.h), the plain one at tp = 1.
 *
 * Context parallelism as GPT-2's: ring attention (--attention flash, its
 * lse saved) with K and V at the key/value heads' width, RoPE at each
 * local row's global position (the cp room's rope_positions).
 *
 * What runs: fp32 activations, plain attention (the probabilities saved)
 * or, with cp > 1, the ring; no recompute, no sequence parallelism, the GEMMs on fp32
 * operands (bf16 params widened by the engine): train/config/config_grid.c
 * refuses the rest, naming it. The model is free of parallel code; data
 * and pipeline parallelism and ZeRO-1/2/3 are the engine's, as for GPT-2. */
#include "gpt.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "bufops.h"
#include "gpt_acts.h"
#include "layers.h"
#include "llama_layers.h"
#include "parallel_points.h"

/* What one layer saves for its backward, in this order in the slot's
 * per-layer block (fp32); the two RMSNorms' rstd beside it (slot.layer_stats). */
enum llama_act { LA_LN1, LA_QKV, LA_ATT, LA_ATTY, LA_RES2, LA_LN2, LA_UP, LA_GATE, LA_SWI, LA_NUM };
enum { LLAMA_STATS = 2 }; /* rstd of rmsnorm1 and rmsnorm2, per token */

/* This rank's key/value heads, and its qkv row: NHl query heads, then
 * KVl key and KVl value heads. */
static int64_t kv_local(const struct gpt *m) { return kv_heads(&m->shape) / m->lay->rank.tp; }
static size_t qkv_width(const struct gpt *m) { return (size_t)(m->NHl + 2 * kv_local(m)) * head_size(m); }

/* This rank's size of saved tensor a: ln1, res2 and ln2 whole; the split
 * layers' outputs local (atty C/tp, qkv, the probabilities of NH/tp heads,
 * up, gate and SwiGLU F/tp). */
static size_t act_numel(const struct gpt *m, enum llama_act a) {
    size_t BT = bt(m), C = (size_t)m->shape.C, F = (size_t)m->Fl;
    switch (a) {
    case LA_QKV: return BT * qkv_width(m);
    case LA_ATT: return BT * (size_t)m->NHl * (flash(m) ? 1 : (size_t)m->shape.T); /* flash: the lse */
    case LA_ATTY: return BT * (size_t)m->Cl;
    case LA_UP:
    case LA_GATE:
    case LA_SWI: return BT * F;
    default: return BT * C; /* ln1, res2, ln2 */
    }
}

static size_t act_offset(const struct gpt *m, enum llama_act a) {
    size_t off = 0;
    for (int i = 0; i < (int)a; i++) off += act_numel(m, (enum llama_act)i);
    return off;
}

/* Local layer i's saved tensors in slot s. */
struct llama_view {
    float *act[LA_NUM];
    float *rstd1, *rstd2;
};

static struct llama_view view(struct gpt *m, int s, int i) {
    struct llama_view v;
    float *block = (float *)m->slot[s].layer_acts + (size_t)i * act_offset(m, LA_NUM);
    for (int a = 0; a < LA_NUM; a++) v.act[a] = block + act_offset(m, (enum llama_act)a);
    v.rstd1 = m->slot[s].layer_stats + (size_t)i * LLAMA_STATS * bt(m);
    v.rstd2 = v.rstd1 + bt(m);
    return v;
}

static float *resid(struct gpt *m, int s, int i) { return (float *)m->slot[s].resid + (size_t)i * btc(m); }

void llama_init_chunks(struct gpt *m, struct mem_tracker *mem) {
    enum mem_space space = m->space;
    size_t n = btc(m), BT = bt(m);
    enum mem_category A = MEM_ACTIVATIONS, S = MEM_SCRATCH;
    int head_chunk = m->lay->rank.has_head ? m->lay->rank.n_chunks - 1 : -2;
    int embed_chunk = m->lay->rank.has_embed ? 0 : -2;
    gpt_per_slot(m, mem, A, "residual stream", n * 4, n * 4, GPT_EVERY_CHUNK, offsetof(struct gpt_slot, resid));
    gpt_per_slot(m, mem, A, "layer tensors", act_offset(m, LA_NUM) * 4, 0, GPT_EVERY_CHUNK,
                 offsetof(struct gpt_slot, layer_acts));
    gpt_per_slot(m, mem, A, "rmsnorm rstd (fp32)", LLAMA_STATS * BT * 4, 0, GPT_EVERY_CHUNK,
                 offsetof(struct gpt_slot, layer_stats));
    if (m->lay->rank.has_head) {
        gpt_per_slot(m, mem, A, "final rmsnorm out", 0, n * 4, head_chunk, offsetof(struct gpt_slot, lnf));
        gpt_per_slot(m, mem, A, "final rmsnorm rstd (fp32)", 0, BT * 4, head_chunk,
                     offsetof(struct gpt_slot, lnf_stats));
        gpt_per_slot(m, mem, A, "logits (fp32)", 0, BT * (size_t)m->vocab.Vl * 4, head_chunk,
                     offsetof(struct gpt_slot, logits));
        gpt_per_slot(m, mem, A, "losses (fp32)", 0, BT * 4, head_chunk, offsetof(struct gpt_slot, losses));
        gpt_per_slot(m, mem, A, "target ids", 0, BT * sizeof(int32_t), head_chunk, offsetof(struct gpt_slot, targets));
    }
    if (m->lay->rank.has_embed)
        gpt_per_slot(m, mem, A, "token ids", 0, BT * sizeof(int32_t), embed_chunk, offsetof(struct gpt_slot, inputs));
    m->dresid = mem_alloc(mem, space, S, "d residual (fp32)", n * 4);
    m->dtemp_btc = mem_alloc(mem, space, S, "d layer temp (fp32)", n * 4);
    m->dtemp2_btc = mem_alloc(mem, space, S, "d layer temp, gate's (fp32)", n * 4);
    m->dfc = mem_alloc(mem, space, S, "d up, d gate (fp32)", 2 * act_numel(m, LA_UP) * 4);
    m->dqkv = mem_alloc(mem, space, S, "d qkv (fp32)", act_numel(m, LA_QKV) * 4);
    if (flash(m)) /* the ring's backward (cp > 1): D, B NH T */
        m->att_scratch = mem_alloc(mem, space, S, "attention D (fp32, B NH T)", BT * (size_t)m->NHl * 4);
    else
        m->att_scratch = mem_alloc(mem, space, S, "attention dS (fp32, T x T per KV head group)",
                                   attention_gqa_backward_scratch(m->B, m->shape.T, kv_local(m)) * 4);
    size_t hs = head_size(m);
    m->rope_freqs = mem_alloc(mem, space, S, "rope frequencies (fp32)", hs / 2 * 4);
    m->rope_pos = mem_alloc(mem, space, S, "rope positions (int32)", BT * sizeof(int32_t));
    if (mem_failed(mem)) return;
    struct rope_config rc = rope_config_llama3(m->shape.rope_theta, m->shape.rope_scaled);
    rope_freqs(m->rope_freqs, (int64_t)hs, &rc);
    m->cpp->rope_positions(m, m->rope_pos); /* with cp, gpt_set_context_parallel sets the ring's */
}

static const float *wt(const struct gpt *m, struct operand w, enum layer_tensor t) {
    return w.f32 + m->lay->layer_offset[t];
}

static float *dwt(const struct gpt *m, float *dw, enum layer_tensor t) { return dw + m->lay->layer_offset[t]; }

/* vocabulary-parallel: this rank's rows (zero for tokens it does not
 * hold), g sums them to every token's row */
static void llama_embed_forward(struct gpt *m, int s, struct operand w_embed, const int32_t *inputs) {
    buf_copy(m->space, m->slot[s].inputs, inputs, bt(m) * sizeof *inputs);
    float *out = resid(m, s, 0);
    embedding_rows_forward(out, m->slot[s].inputs, w_embed.f32 + m->lay->embed_offset[EMB_WTE], m->vocab.v0,
                           m->vocab.Vl, (int64_t)bt(m), m->shape.C, m->flops);
    m->tpp->row_output(m, out, out);
}

/* Row-parallel GEMM: out (N,C) = inp (N,in_l) . w^T over this rank's
 * input features, summed over the group (g). */
static void row_parallel(struct gpt *m, float *out, const float *inp, const float *w, int64_t in_l) {
    matmul_forward(out, inp, w, NULL, (int64_t)bt(m), in_l, m->shape.C, m->flops);
    m->tpp->row_output(m, out, out);
}

/* The layer's forward from x into v; out: the layer's output. */
static void layer_forward(struct gpt *m, const float *x, struct llama_view *v, struct operand w, float *out) {
    int64_t N = (int64_t)bt(m), C = m->shape.C, F = m->Fl, QKV = (int64_t)qkv_width(m), hs = (int64_t)head_size(m);
    int64_t NH = m->NHl, KV = kv_local(m);
    struct exec_ctx *fc = m->flops;
    float **a = v->act, *tmp = m->dtemp_btc; /* free outside the backward's own use */
    rmsnorm_forward(a[LA_LN1], v->rstd1, x, wt(m, w, LAYER_LN1_W), m->shape.norm_eps, N, C, fc);
    /* column-parallel (f): this rank's heads' q, k, v from every token's ln1 */
    matmul_forward(a[LA_QKV], m->tpp->column_input(m, a[LA_LN1]), wt(m, w, LAYER_QKV_W), NULL, N, C, QKV, fc);
    /* q's and k's heads are adjacent in each row: one call rotates both */
    rope_forward(a[LA_QKV], a[LA_QKV], QKV, m->rope_freqs, m->rope_pos, N, NH + KV, hs, fc);
    if (m->cpp->attention_forward) /* context parallel: every rank's keys by ring, K and V at KV width */
        m->cpp->attention_forward(m, a[LA_ATTY], a[LA_ATT], a[LA_QKV]);
    else
        attention_gqa_forward(a[LA_ATTY], a[LA_ATT], a[LA_QKV], m->B, m->shape.T, NH, KV, hs, fc);
    row_parallel(m, tmp, a[LA_ATTY], wt(m, w, LAYER_ATTPROJ_W), m->Cl);
    residual_forward(a[LA_RES2], x, tmp, N * C, fc);
    rmsnorm_forward(a[LA_LN2], v->rstd2, a[LA_RES2], wt(m, w, LAYER_LN2_W), m->shape.norm_eps, N, C, fc);
    const float *ln2 = m->tpp->column_input(m, a[LA_LN2]);
    matmul_forward(a[LA_UP], ln2, wt(m, w, LAYER_FC_W), NULL, N, C, F, fc);
    matmul_forward(a[LA_GATE], ln2, wt(m, w, LAYER_FC2_W), NULL, N, C, F, fc);
    swiglu_forward(a[LA_SWI], a[LA_UP], a[LA_GATE], N * F, fc);
    row_parallel(m, tmp, a[LA_SWI], wt(m, w, LAYER_FCPROJ_W), F);
    residual_forward(out, a[LA_RES2], tmp, N * C, fc);
}

static void llama_layer_forward(struct gpt *m, int s, int l, struct operand w) {
    int i = l - m->slot[s].l0;
    struct llama_view v = view(m, s, i);
    layer_forward(m, resid(m, s, i), &v, w, resid(m, s, i + 1));
}

/* The untied LM head: logits = lnf . lm_head^T over this rank's vocabulary
 * rows (column-parallel: f), the vocabulary-parallel cross-entropy. */
static float llama_head_forward(struct gpt *m, int s, struct operand w_head, struct operand lm_head,
                                const int32_t *targets, float dloss) {
    int64_t N = (int64_t)bt(m), C = m->shape.C;
    struct gpt_slot *sl = &m->slot[s];
    rmsnorm_forward(sl->lnf, sl->lnf_stats, resid(m, s, sl->n_layers), w_head.f32 + m->lay->head_offset[HEAD_LNF_W],
                    m->shape.norm_eps, N, C, m->flops);
    matmul_forward(sl->logits, m->tpp->column_input(m, sl->lnf), lm_head.f32, NULL, N, C, m->vocab.Vl, m->flops);
    if (targets) gpt_upload_targets(m, s, targets);
    double sum = m->tpp->crossentropy(m, sl->logits, sl->losses, sl->targets, N, dloss, m->dtemp_btc);
    return (float)(sum / (double)N);
}

static void llama_head_backward(struct gpt *m, int s, struct operand w_head, struct operand lm_head, float *dw_head,
                                float *dlm_head) {
    int64_t N = (int64_t)bt(m), C = m->shape.C;
    struct gpt_slot *sl = &m->slot[s];
    matmul_backward(m->dtemp_btc, dlm_head, NULL, sl->logits, m->tpp->column_input(m, sl->lnf), lm_head.f32, N, C,
                    m->vocab.Vl, m->flops);
    m->tpp->column_grad(m, m->dtemp_btc); /* dlnf sums over the vocabulary slices */
    buf_zero(m->space, m->dresid, btc(m) * sizeof(float));
    rmsnorm_backward(m->dresid, dw_head + m->lay->head_offset[HEAD_LNF_W], m->dtemp_btc, resid(m, s, sl->n_layers),
                     w_head.f32 + m->lay->head_offset[HEAD_LNF_W], sl->lnf_stats, N, C, m->flops);
}

/* On entry dresid holds dL/d(layer output); on exit dL/d(layer input).
 * g's backward hands the row-parallel GEMMs dresid whole; f's sums the
 * column-parallel GEMMs' input gradients before each RMSNorm's backward
 * (the RMSNorm weights' gradients then come out alike on every rank). */
static void llama_layer_backward(struct gpt *m, int s, int l, struct operand w, float *dw) {
    int64_t N = (int64_t)bt(m), C = m->shape.C, F = m->Fl, QKV = (int64_t)qkv_width(m), hs = (int64_t)head_size(m);
    int64_t NH = m->NHl, KV = kv_local(m);
    int i = l - m->slot[s].l0;
    struct exec_ctx *fc = m->flops;
    struct llama_view v = view(m, s, i);
    float **a = v.act, *x = resid(m, s, i), *dup = m->dfc, *dgate = m->dfc + N * F;
    /* the MLP: d swi into d up's room, then SwiGLU's backward in place */
    matmul_backward(dup, dwt(m, dw, LAYER_FCPROJ_W), NULL, m->tpp->row_output_grad(m), a[LA_SWI],
                    wt(m, w, LAYER_FCPROJ_W), N, F, C, fc);
    swiglu_backward(dup, dgate, dup, a[LA_UP], a[LA_GATE], N * F, fc);
    /* d ln2 = d up . fc + d gate . fc2, summed over the group once (f) */
    const float *ln2 = m->tpp->column_input(m, a[LA_LN2]);
    matmul_backward(m->dtemp_btc, dwt(m, dw, LAYER_FC_W), NULL, dup, ln2, wt(m, w, LAYER_FC_W), N, C, F, fc);
    matmul_backward(m->dtemp2_btc, dwt(m, dw, LAYER_FC2_W), NULL, dgate, ln2, wt(m, w, LAYER_FC2_W), N, C, F, fc);
    residual_forward(m->dtemp_btc, m->dtemp_btc, m->dtemp2_btc, N * C, fc);
    m->tpp->column_grad(m, m->dtemp_btc);
    rmsnorm_backward(m->dresid, dwt(m, dw, LAYER_LN2_W), m->dtemp_btc, a[LA_RES2], wt(m, w, LAYER_LN2_W), v.rstd2, N,
                     C, fc);
    /* the attention: dresid now holds dL/d res2; datty in dtemp's first (N, C/tp) */
    matmul_backward(m->dtemp_btc, dwt(m, dw, LAYER_ATTPROJ_W), NULL, m->tpp->row_output_grad(m), a[LA_ATTY],
                    wt(m, w, LAYER_ATTPROJ_W), N, m->Cl, C, fc);
    if (m->cpp->attention_backward)
        m->cpp->attention_backward(m, m->dqkv, m->att_scratch, m->dtemp_btc, a[LA_QKV], a[LA_ATTY], a[LA_ATT]);
    else
        attention_gqa_backward(m->dqkv, m->dtemp_btc, a[LA_QKV], a[LA_ATT], m->att_scratch, m->B, m->shape.T, NH, KV,
                               hs, fc);
    rope_backward(m->dqkv, m->dqkv, QKV, m->rope_freqs, m->rope_pos, N, NH + KV, hs, fc);
    matmul_backward(m->dtemp_btc, dwt(m, dw, LAYER_QKV_W), NULL, m->dqkv, m->tpp->column_input(m, a[LA_LN1]),
                    wt(m, w, LAYER_QKV_W), N, C, QKV, fc);
    m->tpp->column_grad(m, m->dtemp_btc);
    rmsnorm_backward(m->dresid, dwt(m, dw, LAYER_LN1_W), m->dtemp_btc, x, wt(m, w, LAYER_LN1_W), v.rstd1, N, C, fc);
}

/* each rank accumulates its own vocabulary rows (no position table) */
static void llama_embed_backward(struct gpt *m, int s, float *dw_embed) {
    embedding_rows_backward(dw_embed + m->lay->embed_offset[EMB_WTE], NULL, m->tpp->row_output_grad(m),
                            m->slot[s].inputs, m->vocab.v0, m->vocab.Vl, m->B, m->shape.T, m->shape.C, m->flops);
    m->flops->other += (double)btc(m);
}

const struct model_blocks LLAMA_BLOCKS = {llama_embed_forward, llama_layer_forward, llama_head_forward,
                                          llama_head_backward, llama_layer_backward, llama_embed_backward};
