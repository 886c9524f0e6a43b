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
 * Two paths, as the run's act_dtype says. fp32: every saved tensor and
 * every kernel fp32; the GEMMs on the engine's operands (fp32, or with
 * bf16 GEMMs its bf16 params as they are: matmul_*_mixed). bf16 (the data
 * path): the stream and every saved tensor but
 * the attention's live in bf16 stores, and each kernel reads and writes
 * them as they are (rmsnorm_*_bf16, rope_*_bf16, attention_gqa_*_bf16,
 * swiglu_*_bf16, residual_forward_bf16, the GEMMs' mixed forms), computing
 * in fp32 and rounding once where it stores (include/llama_layers.h states
 * each rounding point); the activation gradients between kernels stay
 * fp32 (dqkv, which the attention stores, bf16). Its GEMMs are the run's:
 * bf16 (the mixed forms read the stores as they are) or, on a CPU without
 * bf16 matrix instructions, fp32 on the stores' values widened, their
 * outputs rounded once into the stores. Either way the attention
 * keeps its probabilities (or the ring's lse) in fp32, beside the block.
 *
 * Sequence parallelism (Korthikanti et al. 2022) as GPT-2's, on the fp32
 * path: the stream, the RMSNorms and their outputs on this rank's T/tp
 * positions, g gathering a norm's output before a column-parallel GEMM
 * (again in the backward), g-bar reduce-scattering a row-parallel GEMM's
 * partial sums; the norms' weight gradients of a slice all-reduced per
 * micro-batch (the points' ln_grad).
 *
 * Recomputation (view's comment): full and selective, as GPT-2's. Plain
 * attention runs at cp = 1, the ring's flash at cp > 1; train/config/
 * config_grid.c refuses the rest, naming it. The model is free of parallel
 * code; data and pipeline parallelism and ZeRO-1/2/3 are the engine's, as
 * for GPT-2. */
#include "gpt.h"

#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "bufops.h"
#include "conversions.h"
#include "gpt_acts.h"
#include "layers.h"
#include "llama_layers.h"
#include "parallel_points.h"
#include "unit_tensors.h"

/* What one layer saves for its backward, in this order in the slot's
 * per-layer block (act_dtype); the attention's fp32 tensor (slot.layer_lse)
 * and the two RMSNorms' rstd (slot.layer_stats) beside it. */
enum llama_act { LA_LN1, LA_QKV, LA_ATTY, LA_RES2, LA_LN2, LA_UP, LA_GATE, LA_SWI, LA_NUM };
enum { LLAMA_STATS = 2 }; /* rstd of rmsnorm1 and rmsnorm2, per token */

static bool direct(const struct gpt *m) { return m->act_dtype == DTYPE_BF16; }

/* This rank's key/value heads, and its qkv row: NHl query heads, then
 * KVl key and KVl value heads. */
static int64_t kv_local(const struct gpt *m) { return kv_heads(&m->shape) / m->lay->rank.tp; }
static size_t qkv_width(const struct gpt *m) { return (size_t)(m->NHl + 2 * kv_local(m)) * head_size(m); }

/* This rank's size of saved tensor a: ln1, res2 and ln2 whole, or with
 * sequence parallelism this rank's T/tp positions of them; the split
 * layers' outputs local (atty C/tp, qkv, up, gate and SwiGLU F/tp). */
static size_t act_numel(const struct gpt *m, enum llama_act a) {
    size_t BT = bt(m), F = (size_t)m->Fl;
    switch (a) {
    case LA_QKV: return BT * qkv_width(m);
    case LA_ATTY: return BT * (size_t)m->Cl;
    case LA_UP:
    case LA_GATE:
    case LA_SWI: return BT * F;
    default: return btc_l(m); /* ln1, res2, ln2 */
    }
}

/* The attention's fp32 tensor: the probabilities of NH/tp heads, or the
 * ring's lse (flash, cp > 1). */
static size_t att_numel(const struct gpt *m) { return bt(m) * (size_t)m->NHl * (flash(m) ? 1 : (size_t)m->shape.T); }

static size_t act_offset(const struct gpt *m, enum llama_act a) {
    size_t off = 0;
    for (int i = 0; i < (int)a; i++) off += act_numel(m, (enum llama_act)i);
    return off;
}

/* Local layer i's saved tensors in slot s: each in its store's dtype
 * (f32 on the fp32 path, b16 on the data path; the other NULL). */
struct llama_view {
    float *f[LA_NUM];
    bf16 *h[LA_NUM];
    float *att, *rstd1, *rstd2;
};

/* Recomputation (Korthikanti et al. 2022 §5): full keeps only each
 * layer's input (the stream) and re-runs the layer's forward, to its
 * SwiGLU, into one layer's buffers before its backward; selective keeps
 * every tensor but the attention's probabilities (plain attention: flash
 * keeps only its lse, nothing to drop) and re-runs the attention's forward
 * into one layer's fp32 buffer. The kernels are deterministic: the values
 * recomputed equal the forward's bit for bit. */
static bool full(const struct gpt *m) { return m->recompute == RECOMPUTE_FULL; }
static bool probs_dropped(const struct gpt *m) { return m->recompute == RECOMPUTE_SELECTIVE && !flash(m); }

static struct llama_view view(struct gpt *m, int s, int i) {
    struct llama_view v = {0};
    size_t e = dtype_size(m->act_dtype);
    /* full recompute: the one layer's buffers, whatever the slot and layer */
    char *block = full(m) ? (char *)m->work_acts : (char *)m->slot[s].layer_acts + (size_t)i * act_offset(m, LA_NUM) * e;
    for (int a = 0; a < LA_NUM; a++) {
        void *p = block + act_offset(m, (enum llama_act)a) * e;
        if (direct(m)) v.h[a] = p;
        else v.f[a] = p;
    }
    v.att = full(m) || probs_dropped(m) ? m->att_recompute : m->slot[s].layer_lse + (size_t)i * att_numel(m);
    v.rstd1 = full(m) ? m->full_stats : m->slot[s].layer_stats + (size_t)i * LLAMA_STATS * bt_l(m);
    v.rstd2 = v.rstd1 + bt_l(m);
    return v;
}

/* Saved tensor a as a kernel reads it and as it writes it. */
static struct operand in(const struct gpt *m, const struct llama_view *v, enum llama_act a) {
    return direct(m) ? acts_op_bf16(m, v->h[a]) : acts_op_f32(m, v->f[a]);
}
static struct act_out out(const struct gpt *m, const struct llama_view *v, enum llama_act a) {
    return direct(m) ? acts_out_bf16(m, v->h[a]) : acts_out_f32(m, v->f[a]);
}

/* Stream entry i of slot s (entry n_layers: the chunk's output). */
static struct act_out stream(struct gpt *m, int s, int i) {
    void *p = (char *)m->slot[s].resid + (size_t)i * btc_l(m) * dtype_size(m->act_dtype);
    return direct(m) ? acts_out_bf16(m, p) : acts_out_f32(m, p);
}
static struct operand stream_in(struct gpt *m, int s, int i) { return act_out_operand(stream(m, s, i)); }

void llama_init_chunks(struct gpt *m, struct mem_tracker *mem) {
    enum mem_space space = m->space;
    size_t n = btc(m), BT = bt(m), e = dtype_size(m->act_dtype), nl = btc_l(m), BTl = bt_l(m); /* l: the stream's part */
    enum mem_category A = MEM_ACTIVATIONS, S = MEM_SCRATCH;
    int head_chunk = m->lay->rank.has_head ? m->lay->rank.n_chunks - 1 : -2;
    int embed_chunk = m->lay->rank.has_embed ? 0 : -2;
    gpt_per_slot(m, mem, A, "residual stream", nl * e, nl * e, GPT_EVERY_CHUNK, offsetof(struct gpt_slot, resid));
    const char *att_name = flash(m) ? "attention lse (fp32)" : "attention probabilities (fp32)";
    if (full(m)) { /* one layer's, recomputed before its backward */
        m->work_acts = mem_alloc(mem, space, A, "recompute buffer (one layer)", act_offset(m, LA_NUM) * e);
        m->att_recompute = mem_alloc(mem, space, A, flash(m) ? "attention lse (one layer, fp32)"
                                                             : "attention probabilities (one layer, fp32)",
                                     att_numel(m) * 4);
        m->full_stats = mem_alloc(mem, space, A, "rmsnorm rstd (one layer, fp32)", LLAMA_STATS * BTl * 4);
    } else {
        gpt_per_slot(m, mem, A, "layer tensors", act_offset(m, LA_NUM) * e, 0, GPT_EVERY_CHUNK,
                     offsetof(struct gpt_slot, layer_acts));
        if (probs_dropped(m))
            m->att_recompute = mem_alloc(mem, space, A, "attention probabilities (one layer, fp32)", att_numel(m) * 4);
        else
            gpt_per_slot(m, mem, A, att_name, att_numel(m) * 4, 0, GPT_EVERY_CHUNK, offsetof(struct gpt_slot, layer_lse));
        gpt_per_slot(m, mem, A, "rmsnorm rstd (fp32)", LLAMA_STATS * BTl * 4, 0, GPT_EVERY_CHUNK,
                     offsetof(struct gpt_slot, layer_stats));
    }
    if (m->lay->rank.has_head) {
        gpt_per_slot(m, mem, A, "final rmsnorm out", 0, nl * e, head_chunk, offsetof(struct gpt_slot, lnf));
        gpt_per_slot(m, mem, A, "final rmsnorm rstd (fp32)", 0, BTl * 4, head_chunk,
                     offsetof(struct gpt_slot, lnf_stats));
        gpt_per_slot(m, mem, A, "logits (fp32)", 0, BT * (size_t)m->vocab.Vl * 4, head_chunk,
                     offsetof(struct gpt_slot, logits));
        gpt_per_slot(m, mem, A, "losses (fp32)", 0, BT * 4, head_chunk, offsetof(struct gpt_slot, losses));
        gpt_per_slot(m, mem, A, "target ids", 0, BT * sizeof(int32_t), head_chunk, offsetof(struct gpt_slot, targets));
    }
    if (m->lay->rank.has_embed)
        gpt_per_slot(m, mem, A, "token ids", 0, BT * sizeof(int32_t), embed_chunk, offsetof(struct gpt_slot, inputs));
    m->dresid = mem_alloc(mem, space, S, "d residual (fp32)", nl * 4);
    if (m->sp) { /* sequence parallelism: g's gathered (B,T,C), a micro-batch's norm weight gradients */
        m->gathered = mem_alloc(mem, space, S, "sequence-parallel gathered (fp32)", n * 4);
        /* the points' buffer (conjugates.c) holds a layer's four norm vectors, GPT-2's; llama fills two */
        m->ln_grads = mem_alloc(mem, space, S, "sequence-parallel rmsnorm grads (fp32)", 4 * (size_t)m->shape.C * 4);
    }
    m->dtemp_btc = mem_alloc(mem, space, S, "d layer temp (fp32)", n * 4);
    m->dtemp2_btc = mem_alloc(mem, space, S, "d layer temp, gate's (fp32)", n * 4);
    m->dfc = mem_alloc(mem, space, S, "d up, d gate (fp32)", 2 * act_numel(m, LA_UP) * 4);
    if (direct(m)) m->dqkv16 = mem_alloc(mem, space, S, "d qkv (bf16)", act_numel(m, LA_QKV) * sizeof(bf16));
    else m->dqkv = mem_alloc(mem, space, S, "d qkv (fp32)", act_numel(m, LA_QKV) * 4);
    if (direct(m) && m->gemm_dtype != DTYPE_BF16) { /* fp32 GEMMs on the stores: gemm_forward */
        size_t in_n = act_numel(m, LA_UP) > n ? act_numel(m, LA_UP) : n;
        size_t out_n = act_numel(m, LA_UP) > act_numel(m, LA_QKV) ? act_numel(m, LA_UP) : act_numel(m, LA_QKV);
        m->gemm_in = mem_alloc(mem, space, S, "a GEMM's input widened (fp32)", in_n * 4);
        m->gemm_out = mem_alloc(mem, space, S, "a GEMM's output or dout in fp32", out_n * 4);
    }
    size_t hs = head_size(m);
    if (flash(m) && direct(m)) /* the ring's on the stores (cp > 1): D, B NH T, and each thread's tiles */
        m->att_scratch = mem_alloc(mem, space, S, "attention D, tiles (fp32)",
                                   attention_lse_bf16_scratch_in(space, m->B, m->shape.T, m->Cl, m->NHl) * 4);
    else if (flash(m)) /* the ring's backward (cp > 1): D, B NH T */
        m->att_scratch = mem_alloc(mem, space, S, "attention D (fp32, B NH T)", BT * (size_t)m->NHl * 4);
    else if (direct(m))
        m->att_scratch = mem_alloc(mem, space, S, "attention tiles (fp32, per thread)",
                                   llama_attention_scratch(m->B, m->shape.T, m->NHl, kv_local(m), (int64_t)hs, true,
                                                           omp_get_max_threads()) * 4);
    else
        m->att_scratch = mem_alloc(mem, space, S, "attention dS (fp32, T x T per KV head group)",
                                   llama_attention_scratch(m->B, m->shape.T, m->NHl, kv_local(m), (int64_t)hs, false,
                                                           omp_get_max_threads()) * 4);
    m->rope_freqs = mem_alloc(mem, space, S, "rope frequencies (fp32)", hs / 2 * 4);
    m->rope_pos = mem_alloc(mem, space, S, "rope positions (int32)", BT * sizeof(int32_t));
    if (mem_failed(mem)) return;
    struct rope_config rc = rope_config_llama3(m->shape.rope_theta, m->shape.rope_scaled);
    rope_freqs(m->rope_freqs, (int64_t)hs, &rc);
    m->cpp->rope_positions(m, m->rope_pos); /* with cp, gpt_set_context_parallel sets the ring's */
}

size_t llama_attention_scratch(int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t hs, bool bf16_stores,
                               int threads) {
    if (!bf16_stores) return attention_gqa_backward_scratch_for(B, T, KV, threads);
    size_t fwd = attention_gqa_forward_bf16_scratch_for(B, T, NH, hs, threads),
           bwd = attention_gqa_backward_bf16_scratch_for(B, T, KV, hs, threads);
    return fwd > bwd ? fwd : bwd;
}

/* The GEMMs on the operands they get. bf16 GEMMs: the mixed forms, which
 * read any bf16 operand (the data path's stores, the engine's bf16 params)
 * as it is. fp32 GEMMs (a CPU without bf16 matrix instructions): a store's
 * values widened into gemm_in (gemm_out for a bf16 dout), an output for a
 * store computed into gemm_out and rounded once as it is stored. */
static bool bf16_gemms(const struct gpt *m, struct operand w) {
    return operand_is_bf16(w) || m->gemm_dtype == DTYPE_BF16;
}

static const float *widened(struct gpt *m, struct operand x, float *tmp, size_t n) {
    if (!operand_is_bf16(x)) return operand_as_f32(x, __func__);
    conv_widen(m->flops, tmp, operand_as_bf16(x, __func__), n);
    return tmp;
}

static void gemm_forward(struct gpt *m, struct act_out o, struct operand x, struct operand w, int64_t C, int64_t OC) {
    int64_t N = (int64_t)bt(m);
    if (bf16_gemms(m, w)) {
        matmul_forward_mixed(o, x, w, NULL, N, C, OC, m->flops);
        return;
    }
    float *of = act_out_is_bf16(o) ? m->gemm_out : act_out_as_f32(o, __func__);
    matmul_forward(of, widened(m, x, m->gemm_in, (size_t)(N * C)), operand_as_f32(w, __func__), NULL, N, C, OC,
                   m->flops);
    if (act_out_is_bf16(o)) conv_narrow(m->flops, act_out_as_bf16(o, __func__), of, (size_t)(N * OC));
}

static void gemm_backward(struct gpt *m, float *dinp, float *dweight, struct operand dout, struct operand x,
                          struct operand w, int64_t C, int64_t OC) {
    int64_t N = (int64_t)bt(m);
    if (bf16_gemms(m, w)) {
        matmul_backward_mixed(acts_out_f32(m, dinp), dweight, NULL, dout, x, w, N, C, OC, m->flops);
        return;
    }
    matmul_backward(dinp, dweight, NULL, widened(m, dout, m->gemm_out, (size_t)(N * OC)),
                    widened(m, x, m->gemm_in, (size_t)(N * C)), operand_as_f32(w, __func__), N, C, OC, m->flops);
}

/* A column-parallel GEMM's input (f): an fp32 view through the point; a
 * bf16 store as it is (sequence parallelism, which would gather it, is
 * refused for llama). */
static struct operand column_in(struct gpt *m, struct operand x) {
    if (operand_is_bf16(x)) return x;
    return acts_op_f32(m, m->tpp->column_input(m, (float *)operand_as_f32(x, __func__)));
}

/* RMSNorm of x into o; its backward accumulates into dresid. */
static void rmsnorm(struct gpt *m, struct act_out o, float *rstd, struct operand x, const float *w) {
    int64_t N = (int64_t)bt_l(m), C = m->shape.C;
    const char *op = __func__;
    if (act_out_is_bf16(o))
        rmsnorm_forward_bf16(act_out_as_bf16(o, op), rstd, operand_as_bf16(x, op), w, m->shape.norm_eps, N, C,
                             m->flops);
    else rmsnorm_forward(act_out_as_f32(o, op), rstd, operand_as_f32(x, op), w, m->shape.norm_eps, N, C, m->flops);
}

static void rmsnorm_grad(struct gpt *m, float *dw, const float *dout, struct operand x, const float *w,
                         const float *rstd) {
    int64_t N = (int64_t)bt_l(m), C = m->shape.C;
    const char *op = __func__;
    if (operand_is_bf16(x))
        rmsnorm_backward_bf16(acts_out_f32(m, m->dresid), dw, dout, operand_as_bf16(x, op), w, rstd, N,
                              C, m->flops);
    else rmsnorm_backward(m->dresid, dw, dout, operand_as_f32(x, op), w, rstd, N, C, m->flops);
}

/* o = a + b (b the fp32 output of a row-parallel GEMM). */
static void residual(struct gpt *m, struct act_out o, struct operand a, const float *b) {
    int64_t n = (int64_t)btc_l(m);
    const char *op = __func__;
    if (act_out_is_bf16(o)) residual_forward_bf16(act_out_as_bf16(o, op), operand_as_bf16(a, op), b, n, m->flops);
    else residual_forward(act_out_as_f32(o, op), operand_as_f32(a, op), b, n, m->flops);
}

/* vocabulary-parallel: this rank's rows (zero for tokens it does not
 * hold), g sums them to every token's row; the data path narrows the sum
 * into the stream's store */
static void llama_embed_forward(struct gpt *m, int s, struct unit_weights w_embed, const int32_t *inputs) {
    buf_copy(m->space, m->slot[s].inputs, inputs, bt(m) * sizeof *inputs);
    struct act_out x0 = stream(m, s, 0);
    float *x32 = act_out_is_bf16(x0) ? NULL : act_out_as_f32(x0, __func__);
    /* the looked-up rows, every token's: into the stream (fp32, whole), else
     * g's gathered buffer (sp: g-bar keeps this rank's slice) or dtemp_btc
     * (bf16: narrowed after), both free in the forward */
    float *rows = m->sp ? m->gathered : x32 ? x32 : m->dtemp_btc;
    int64_t N = (int64_t)bt(m), C = m->shape.C;
    struct operand wte = operand_at(w_embed.params, m->lay->embed_offset[EMB_WTE]);
    if (operand_is_bf16(wte))
        embedding_rows_forward_bf16(rows, m->slot[s].inputs, operand_as_bf16(wte, __func__), m->vocab.v0, m->vocab.Vl,
                                    N, C, m->flops);
    else
        embedding_rows_forward(rows, m->slot[s].inputs, operand_as_f32(wte, __func__), m->vocab.v0, m->vocab.Vl, N, C,
                               m->flops);
    m->tpp->row_output(m, rows, x32 ? x32 : rows);
    if (!x32) conv_narrow(m->flops, act_out_as_bf16(x0, __func__), rows, btc_l(m));
}

/* Row-parallel GEMM: tmp (N,C) = x (N,in_l) . w^T over this rank's input
 * features, summed over the group (g). */
static void row_parallel(struct gpt *m, float *tmp, struct operand x, struct operand w, int64_t in_l) {
    gemm_forward(m, acts_out_f32(m, tmp), x, w, in_l, m->shape.C);
    m->tpp->row_output(m, tmp, tmp);
}

static void attention_forward_of(struct gpt *m, struct llama_view *v) {
    int64_t NH = m->NHl, KV = kv_local(m), hs = (int64_t)head_size(m);
    /* context parallel: every rank's keys by ring, K and V at KV width (the
     * plain points have no ring) */
    if (direct(m) && m->cpp->attention_forward_bf16)
        m->cpp->attention_forward_bf16(m, v->h[LA_ATTY], v->att, v->h[LA_QKV], m->att_scratch);
    else if (!direct(m) && m->cpp->attention_forward)
        m->cpp->attention_forward(m, v->f[LA_ATTY], v->att, v->f[LA_QKV]);
    else if (direct(m))
        attention_gqa_forward_bf16(v->h[LA_ATTY], v->att, v->h[LA_QKV], m->att_scratch, m->B, m->shape.T, NH, KV, hs,
                                   m->flops);
    else
        attention_gqa_forward(v->f[LA_ATTY], v->att, v->f[LA_QKV], m->B, m->shape.T, NH, KV, hs, m->flops);
}

/* The layer's forward from stream entry x into v and the next entry y;
 * without y (full recompute's re-run) it stops at SwiGLU: the down
 * projection's output is the next layer's input, which the stream kept. */
static void layer_forward(struct gpt *m, struct operand x, struct llama_view *v, struct unit_weights w,
                          struct act_out y) {
    int64_t N = (int64_t)bt(m), C = m->shape.C, F = m->Fl, QKV = (int64_t)qkv_width(m), hs = (int64_t)head_size(m);
    int64_t heads = m->NHl + kv_local(m); /* q's and k's, adjacent in each row: one RoPE call rotates both */
    struct exec_ctx *fc = m->flops;
    float *tmp = m->dtemp_btc; /* free outside the backward's own use */
    rmsnorm(m, out(m, v, LA_LN1), v->rstd1, x, wt(m, w, LAYER_LN1_W));
    /* column-parallel (f): this rank's heads' q, k, v from every token's ln1 */
    gemm_forward(m, out(m, v, LA_QKV), column_in(m, in(m, v, LA_LN1)), wop(m, w, LAYER_QKV_W), C, QKV);
    if (direct(m)) rope_forward_bf16(v->h[LA_QKV], v->h[LA_QKV], QKV, m->rope_freqs, m->rope_pos, N, heads, hs, fc);
    else rope_forward(v->f[LA_QKV], v->f[LA_QKV], QKV, m->rope_freqs, m->rope_pos, N, heads, hs, fc);
    attention_forward_of(m, v);
    row_parallel(m, tmp, in(m, v, LA_ATTY), wop(m, w, LAYER_ATTPROJ_W), m->Cl);
    residual(m, out(m, v, LA_RES2), x, tmp);
    rmsnorm(m, out(m, v, LA_LN2), v->rstd2, in(m, v, LA_RES2), wt(m, w, LAYER_LN2_W));
    struct operand ln2 = column_in(m, in(m, v, LA_LN2));
    gemm_forward(m, out(m, v, LA_UP), ln2, wop(m, w, LAYER_FC_W), C, F);
    gemm_forward(m, out(m, v, LA_GATE), ln2, wop(m, w, LAYER_FC2_W), C, F);
    if (direct(m)) swiglu_forward_bf16(v->h[LA_SWI], v->h[LA_UP], v->h[LA_GATE], N * F, fc);
    else swiglu_forward(v->f[LA_SWI], v->f[LA_UP], v->f[LA_GATE], N * F, fc);
    if (!y.data) return;
    row_parallel(m, tmp, in(m, v, LA_SWI), wop(m, w, LAYER_FCPROJ_W), F);
    residual(m, y, in(m, v, LA_RES2), tmp);
}

static void llama_layer_forward(struct gpt *m, int s, int l, struct unit_weights w) {
    int i = l - m->slot[s].l0;
    struct llama_view v = view(m, s, i);
    layer_forward(m, stream_in(m, s, i), &v, w, stream(m, s, i + 1));
}

/* The final RMSNorm's output as stored, and as the head's GEMM reads it. */
static struct act_out lnf_out(struct gpt *m, int s) {
    void *p = m->slot[s].lnf;
    return direct(m) ? acts_out_bf16(m, p) : acts_out_f32(m, p);
}
static struct operand lnf_in(struct gpt *m, int s) { return column_in(m, act_out_operand(lnf_out(m, s))); }

/* The untied LM head: logits = lnf . lm_head^T over this rank's vocabulary
 * rows (column-parallel: f), fp32, and the vocabulary-parallel
 * cross-entropy. */
static float llama_head_forward(struct gpt *m, int s, struct unit_weights w_head, struct operand lm_head,
                                const int32_t *targets, float dloss) {
    int64_t N = (int64_t)bt(m), C = m->shape.C;
    struct gpt_slot *sl = &m->slot[s];
    rmsnorm(m, lnf_out(m, s), sl->lnf_stats, stream_in(m, s, sl->n_layers), hw(m, w_head, HEAD_LNF_W));
    gemm_forward(m, acts_out_f32(m, sl->logits), lnf_in(m, s), lm_head, C, m->vocab.Vl);
    if (targets) gpt_upload_targets(m, s, targets);
    double sum = m->tpp->crossentropy(m, sl->logits, sl->losses, sl->targets, N, dloss, m->dtemp_btc);
    return (float)(sum / (double)N);
}

static void llama_head_backward(struct gpt *m, int s, struct unit_weights w_head, struct operand lm_head,
                                float *dw_head, float *dlm_head) {
    struct gpt_slot *sl = &m->slot[s];
    gemm_backward(m, m->dtemp_btc, dlm_head, acts_op_f32(m, sl->logits), lnf_in(m, s), lm_head, m->shape.C,
                  m->vocab.Vl);
    m->tpp->column_grad(m, m->dtemp_btc); /* dlnf sums over the vocabulary slices */
    buf_zero(m->space, m->dresid, btc_l(m) * sizeof(float));
    float *dlnf = dw_head + m->lay->head_offset[HEAD_LNF_W];
    m->tpp->ln_grads_begin(m);
    rmsnorm_grad(m, m->tpp->ln_grad(m, dlnf, 0), m->dtemp_btc, stream_in(m, s, sl->n_layers), hw(m, w_head, HEAD_LNF_W),
                 sl->lnf_stats);
    m->tpp->ln_grads_done(m, (float *const[]){dlnf}, 1);
}

/* datty (dtemp_btc's first N x C/tp) -> dqkv, through the attention's and
 * RoPE's backward: fp32, or bf16 as the data path's attention stores it. */
static struct operand attention_backward_of(struct gpt *m, struct llama_view *v) {
    int64_t N = (int64_t)bt(m), NH = m->NHl, KV = kv_local(m), QKV = (int64_t)qkv_width(m), hs = (int64_t)head_size(m);
    struct exec_ctx *fc = m->flops;
    if (direct(m)) {
        if (m->cpp->attention_backward_bf16) /* the ring's: dQ, dK, dV rounded once into dqkv16 */
            m->cpp->attention_backward_bf16(m, m->dqkv16, m->att_scratch, m->dtemp_btc, v->h[LA_QKV], v->h[LA_ATTY],
                                            v->att);
        else
            attention_gqa_backward_bf16(m->dqkv16, m->dtemp_btc, v->h[LA_QKV], v->att, m->att_scratch, m->B,
                                        m->shape.T, NH, KV, hs, fc);
        rope_backward_bf16(m->dqkv16, m->dqkv16, QKV, m->rope_freqs, m->rope_pos, N, NH + KV, hs, fc);
        return acts_op_bf16(m, m->dqkv16);
    }
    if (m->cpp->attention_backward)
        m->cpp->attention_backward(m, m->dqkv, m->att_scratch, m->dtemp_btc, v->f[LA_QKV], v->f[LA_ATTY], v->att);
    else
        attention_gqa_backward(m->dqkv, m->dtemp_btc, v->f[LA_QKV], v->att, m->att_scratch, m->B, m->shape.T, NH, KV,
                               hs, fc);
    rope_backward(m->dqkv, m->dqkv, QKV, m->rope_freqs, m->rope_pos, N, NH + KV, hs, fc);
    return acts_op_f32(m, m->dqkv);
}

/* On entry dresid holds dL/d(layer output); on exit dL/d(layer input).
 * g's backward hands the row-parallel GEMMs dresid whole; f's sums the
 * column-parallel GEMMs' input gradients before each RMSNorm's backward
 * (the RMSNorm weights' gradients then come out alike on every rank). */
static void llama_layer_backward(struct gpt *m, int s, int l, struct unit_weights w, float *dw) {
    int64_t N = (int64_t)bt(m), C = m->shape.C, F = m->Fl;
    int i = l - m->slot[s].l0;
    struct exec_ctx *fc = m->flops;
    struct llama_view v = view(m, s, i);
    if (full(m)) layer_forward(m, stream_in(m, s, i), &v, w, act_out_none());
    if (probs_dropped(m)) attention_forward_of(m, &v); /* atty again, the same values; the probabilities */
    float *dup = m->dfc, *dgate = m->dfc + N * F;
    /* the norms' weight gradients: with sp this slice's partial sums,
     * all-reduced over the group at the end (ln_grads_done) */
    float *dln[LLAMA_STATS] = {dwt(m, dw, LAYER_LN1_W), dwt(m, dw, LAYER_LN2_W)};
    m->tpp->ln_grads_begin(m);
    /* the MLP: d swi into d up's room, then SwiGLU's backward in place */
    gemm_backward(m, dup, dwt(m, dw, LAYER_FCPROJ_W), acts_op_f32(m, m->tpp->row_output_grad(m)), in(m, &v, LA_SWI),
                  wop(m, w, LAYER_FCPROJ_W), F, C);
    if (direct(m)) swiglu_backward_bf16(dup, dgate, dup, v.h[LA_UP], v.h[LA_GATE], N * F, fc);
    else swiglu_backward(dup, dgate, dup, v.f[LA_UP], v.f[LA_GATE], N * F, fc);
    /* d ln2 = d up . fc + d gate . fc2, summed over the group once (f) */
    struct operand ln2 = column_in(m, in(m, &v, LA_LN2));
    gemm_backward(m, m->dtemp_btc, dwt(m, dw, LAYER_FC_W), acts_op_f32(m, dup), ln2, wop(m, w, LAYER_FC_W), C, F);
    gemm_backward(m, m->dtemp2_btc, dwt(m, dw, LAYER_FC2_W), acts_op_f32(m, dgate), ln2, wop(m, w, LAYER_FC2_W), C, F);
    residual_forward(m->dtemp_btc, m->dtemp_btc, m->dtemp2_btc, N * C, fc);
    m->tpp->column_grad(m, m->dtemp_btc);
    rmsnorm_grad(m, m->tpp->ln_grad(m, dln[1], 1), m->dtemp_btc, in(m, &v, LA_RES2), wt(m, w, LAYER_LN2_W), v.rstd2);
    /* the attention: dresid now holds dL/d res2; datty in dtemp's first (N, C/tp) */
    gemm_backward(m, m->dtemp_btc, dwt(m, dw, LAYER_ATTPROJ_W), acts_op_f32(m, m->tpp->row_output_grad(m)),
                  in(m, &v, LA_ATTY), wop(m, w, LAYER_ATTPROJ_W), m->Cl, C);
    struct operand dqkv = attention_backward_of(m, &v);
    gemm_backward(m, m->dtemp_btc, dwt(m, dw, LAYER_QKV_W), dqkv, column_in(m, in(m, &v, LA_LN1)),
                  wop(m, w, LAYER_QKV_W), C, (int64_t)qkv_width(m));
    m->tpp->column_grad(m, m->dtemp_btc);
    rmsnorm_grad(m, m->tpp->ln_grad(m, dln[0], 0), m->dtemp_btc, stream_in(m, s, i), wt(m, w, LAYER_LN1_W), v.rstd1);
    m->tpp->ln_grads_done(m, dln, LLAMA_STATS);
}

/* each rank accumulates its own vocabulary rows (no position table) */
static void llama_embed_backward(struct gpt *m, int s, float *dw_embed) {
    embedding_rows_backward(dw_embed + m->lay->embed_offset[EMB_WTE], NULL, m->tpp->row_output_grad(m),
                            m->slot[s].inputs, m->vocab.v0, m->vocab.Vl, m->B, m->shape.T, m->shape.C, m->flops);
    m->flops->other += (double)btc(m);
}

const struct model_blocks LLAMA_BLOCKS = {llama_embed_forward, llama_layer_forward, llama_head_forward,
                                          llama_head_backward, llama_layer_backward, llama_embed_backward};
