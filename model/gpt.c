/* GPT-2 forward and backward, unit by unit, over saved activations held
 * per micro-batch slot.
 *
 * Mixed precision of activations: every kernel computes in fp32. With
 * act_dtype = bf16 a layer computes into fp32 working buffers, and each
 * saved tensor, right after it is produced, is rounded to bf16 in place
 * (so the forward consumes exactly the values the backward will see) and
 * written to its bf16 store in the same pass (buf_round_narrow). Backward
 * widens a layer back. With act_dtype = fp32 the kernels work on the store
 * directly. On the bf16 data path (acts_direct: bf16 GEMMs on the host, or
 * on a GPU whose backend reads bf16) the kernels themselves load and store
 * bf16 (layers.h: the GEMMs' mixed forms, layernorm_*_bf16,
 * residual_forward_bf16, gelu_*_bf16, the attention's attention_*_bf16
 * and attention_lse_*_bf16), and only the
 * ring attention's (context parallelism) inputs still pass through fp32
 * copies; the values are the same, each rounded once where it is stored.
 * There (without the ring) the activation gradients passed between
 * kernels are bf16 too (acts_direct), which rounds the stream's and the FC
 * features' gradients where the fp32 path kept them fp32.
 *
 * Tensor parallelism (Shoeybi et al. 2019, Figure 3): the QKV and FC GEMMs
 * are column-parallel (this rank's heads, its 4C/tp features), preceded by
 * f; the attention and FC projections are row-parallel (their inputs are
 * this rank's features), followed by g, and their replicated biases are
 * added once, after g's sum. The tied embedding and head are vocabulary-
 * parallel. The model meets f and g, g and g-bar, the vocabulary-parallel
 * cross-entropy and context parallelism only through its two tables of
 * points (model/parallel_points.h): at tp = 1 and cp = 1 its own plain
 * points (the identities and one-rank kernels, at the end of this file),
 * so such a run enters neither model/tensor_parallel/ nor
 * model/context_parallel/, and does the same fp32 operations in the same
 * order as the rooms would. The slots' buffers (gpt_init_chunks' sizes,
 * gpt_free) are model/gpt_acts.c's.
 *
 * Sequence parallelism (m->sp; Korthikanti et al. 2022, section 4.2.2):
 * the residual stream, the LayerNorms (and their saved outputs and
 * statistics), the residual adds, the row-parallel biases and wpe hold
 * this rank's (B, T/tp, C) slice; g (model/tensor_parallel/tp.h) gathers
 * a LayerNorm's output before a column-parallel GEMM, in the forward and
 * again in the backward (the whole tensor is not kept), and g-bar
 * reduce-scatters a row-parallel GEMM's partial sums to the slice. The
 * replicated parameters then get their gradients as follows: the
 * row-parallel biases and wpe from the gathered (whole) stream gradient,
 * alike on every rank; the LayerNorms' from this slice's tokens only, so
 * those are all-reduced over the group per micro-batch before they join
 * the accumulator (model/tensor_parallel/tp.h). */
#include "gpt.h"

#include <stddef.h>

#include "bufops.h"
#include "conversions.h"
#include "gpt_acts.h"
#include "layers.h"
#include "parallel_points.h"
#include "unit_tensors.h"

void gpt_init_chunks(struct gpt *m, const struct model_layout *lay, int B, const int *chunk_slots,
                     enum dtype act_dtype, enum dtype gemm_dtype, enum recompute_mode recompute,
                     enum attention_kind attention, bool sequence_parallel, int cp, struct mem_tracker *mem,
                     enum mem_space space, struct exec_ctx *flops) {
    bool sp = sequence_parallel && lay->rank.tp > 1; /* one rank holds the whole sequence: nothing changes */
    struct tp_slice own = tp_rank_slice(lay, sp);
    *m = (struct gpt){.lay = lay, .shape = lay->shape, .B = B, .n_layers = rank_layers(&lay->rank),
                      .NHl = own.heads, .Cl = own.features, .Fl = own.fc, .sp = sp, .Ts = own.positions,
                      .act_dtype = act_dtype, .gemm_dtype = gemm_dtype, .recompute = recompute,
                      .attention = attention, .cp_size = cp, .space = space, .flops = flops,
                      .tpp = lay->rank.tp > 1 ? &TENSOR_PARALLEL_POINTS : &PLAIN_TP_POINTS,
                      .cpp = &PLAIN_CP_POINTS, /* gpt_set_context_parallel: the ring's with cp > 1 */
                      .vocab = own.vocab, .position0 = own.position0};
    m->blocks = &GPT2_BLOCKS;
    for (int c = 0; c < lay->rank.n_chunks; c++) {
        struct layer_range r = lay->rank.chunk[c];
        m->chunk_slot0[c] = m->n_slots;
        m->chunk_slots[c] = chunk_slots[c];
        for (int k = 0; k < chunk_slots[c]; k++)
            m->slot[m->n_slots++] = (struct gpt_slot){.chunk = c, .l0 = r.l0, .n_layers = r.l1 - r.l0};
    }
    if (lay->shape.arch == ARCH_LLAMA) {
        m->blocks = &LLAMA_BLOCKS;
        llama_init_chunks(m, mem);
        return;
    }
    gpt2_init_chunks(m, mem);
}

/* A layer GEMM's input operand: saved tensor a's bf16 store where the GEMMs
 * read it (gemm_reads_store), else its fp32 view, through f for a
 * column-parallel GEMM (with sp: gathered). */
static struct operand gemm_in(struct gpt *m, struct layer_view *v, enum layer_act a, bool column) {
    if (acts_gemm_reads_store(m)) return acts_op_bf16(m, v->store[a]);
    return acts_op_f32(m, column ? m->tpp->column_input(m, v->act[a]) : v->act[a]);
}

/* out (N,OC) = x . w^T (+ bias) on the path the operands ask for: both
 * operands as they are (a bf16 w: the engine's bf16 params, on the host or
 * on a GPU whose backend reads bf16; or a bf16 output, the bf16 data
 * path's), the saved bf16 input with fp32 weights, or fp32 throughout. */
static void gemm_forward(struct gpt *m, struct act_out out, struct operand x, struct operand w, const float *bias,
                         int64_t N, int64_t C, int64_t OC) {
    const char *op = __func__;
    if (operand_is_bf16(w) || act_out_is_bf16(out)) matmul_forward_mixed(out, x, w, bias, N, C, OC, m->flops);
    else if (operand_is_bf16(x))
        matmul_forward_bf16(act_out_as_f32(out, op), operand_as_bf16(x, op), operand_as_f32(w, op), bias, N, C, OC,
                            m->flops);
    else matmul_forward(act_out_as_f32(out, op), operand_as_f32(x, op), operand_as_f32(w, op), bias, N, C, OC,
                        m->flops);
}

/* The same for the backward; dout and dinp bf16 on the bf16 data path's
 * gradients (acts_direct). */
static void gemm_backward(struct gpt *m, struct act_out dinp, float *dweight, float *dbias, struct operand dout,
                          struct operand x, struct operand w, int64_t N, int64_t C, int64_t OC) {
    const char *op = __func__;
    if (operand_is_bf16(w) || act_out_is_bf16(dinp) || operand_is_bf16(dout))
        matmul_backward_mixed(dinp, dweight, dbias, dout, x, w, N, C, OC, m->flops);
    else if (operand_is_bf16(x))
        matmul_backward_bf16(act_out_as_f32(dinp, op), dweight, dbias, operand_as_f32(dout, op), operand_as_bf16(x, op),
                             operand_as_f32(w, op), N, C, OC, m->flops);
    else
        matmul_backward(act_out_as_f32(dinp, op), dweight, dbias, operand_as_f32(dout, op), operand_as_f32(x, op),
                        operand_as_f32(w, op), N, C, OC, m->flops);
}

void gpt_embed_forward(struct gpt *m, int s, struct unit_weights w_embed, const int32_t *inputs) {
    buf_copy(m->space, m->slot[s].inputs, inputs, bt(m) * sizeof *inputs);
    /* acts_direct: computed in dtemp_btc (free in the forward), narrowed
     * into the store: no fp32 copy of the stream is kept */
    float *out = acts_direct(m) ? m->dtemp_btc : acts_resid_view(m, s, 0, m->work_resid_out, false);
    struct vocab_slice v = m->vocab;
    /* vocabulary-parallel: this rank's rows (zero for tokens it does not
     * hold), g sums them to every token's row (with sp g-bar to this
     * rank's slice), then wpe once, at the slice's positions */
    float *rows = m->sp ? m->gathered : out;
    struct operand wte = operand_at(w_embed.params, m->lay->embed_offset[EMB_WTE]);
    if (operand_is_bf16(wte))
        embedding_rows_forward_bf16(rows, m->slot[s].inputs, operand_as_bf16(wte, __func__), v.v0, v.Vl,
                                    (int64_t)bt(m), m->shape.C, m->flops);
    else
        embedding_rows_forward(rows, m->slot[s].inputs, ew(m, w_embed, EMB_WTE), v.v0, v.Vl, (int64_t)bt(m),
                               m->shape.C, m->flops);
    m->tpp->row_output(m, rows, out);
    m->cpp->positions_add(m, out, ew(m, w_embed, EMB_WPE), m->position0, m->Ts); /* with cp: at global positions */
    m->flops->other += (double)btc_l(m);
    if (acts_direct(m)) conv_narrow(m->flops, acts_resid_store(m, s, 0), out, btc_l(m));
    else acts_round_saved(m, out, btc_l(m), acts_resid_store(m, s, 0));
}

size_t gpt_stage_numel(const struct gpt *m) { return btc_l(m); }
void *gpt_stage_input(struct gpt *m, int s) { return acts_resid_at(m, s, 0); }
void *gpt_stage_output(struct gpt *m, int s) { return acts_resid_at(m, s, m->slot[s].n_layers); }
/* The stream's gradient as the blocks keep it: bf16 (GPT-2's data path,
 * dresid16) or fp32 (dresid; LLaMA's always), in the boundary's act_dtype. */
void gpt_stage_grad_in(struct gpt *m, const void *src) {
    if (m->dresid16) buf_copy(m->space, m->dresid16, src, btc_l(m) * sizeof(bf16));
    else buf_to_fp32(m->space, m->dresid, src, m->act_dtype, btc_l(m));
}

void gpt_stage_grad_out(struct gpt *m, void *dst) {
    if (m->dresid16) buf_copy(m->space, dst, m->dresid16, btc_l(m) * sizeof(bf16));
    else buf_from_fp32(m->space, dst, m->act_dtype, m->dresid, btc_l(m));
}

/* Row-parallel GEMM (the projections): out (N,C) = inp (N,in_l) . w^T over
 * this rank's in_l input features, then g sums the partial outputs over
 * the group (with sp g-bar: to this rank's slice, at the start of out),
 * then the replicated bias is added once. */
static void row_parallel_forward(struct gpt *m, float *out, struct layer_view *v, enum layer_act a,
                                 struct operand w, const float *bias, int64_t in_l) {
    int64_t N = (int64_t)bt(m), C = m->shape.C;
    /* alone (tp 1): g is the identity, and the GEMM adds the bias itself
     * (on a GPU in its epilogue: no pass of its own) */
    bool alone = m->lay->rank.tp == 1 && !m->sp;
    const float *gemm_bias = alone ? bias : NULL;
    gemm_forward(m, acts_out_f32(m, out), gemm_in(m, v, a, false), w, gemm_bias, N, in_l, C);
    if (alone) return;
    m->tpp->row_output(m, out, out);
    bias_add(out, bias, (int64_t)bt_l(m), C, m->flops);
}

/* Column-parallel GEMM (QKV, FC): out (N, oc) = f(a) . w^T + bias, from
 * every token's saved LayerNorm output a (f: the identity, or with sp the
 * gather). */
static void column_parallel_forward(struct gpt *m, struct act_out out, struct layer_view *v, enum layer_act a,
                                    struct operand w, const float *bias, int64_t oc) {
    gemm_forward(m, out, gemm_in(m, v, a, true), w, bias, (int64_t)bt(m), m->shape.C, oc);
}

/* A layer GEMM's backward with saved input a (in features): dinp, and
 * dweight and dbias accumulated; a column-parallel input goes through f
 * (with sp: gathered again). */
static void layer_matmul_backward(struct gpt *m, struct act_out dinp, float *dweight, float *dbias,
                                  struct operand dout, struct layer_view *v, enum layer_act a, bool column,
                                  struct operand w, int64_t in, int64_t oc) {
    gemm_backward(m, dinp, dweight, dbias, dout, gemm_in(m, v, a, column), w, (int64_t)bt(m), in, oc);
}

/* LayerNorm of x (an operand: the bf16 store as it is, or an fp32 view)
 * into saved tensor a, rounded where act_dtype asks (acts_direct: once,
 * as it is stored). */
static void layernorm_saved(struct gpt *m, struct layer_view *v, enum layer_act a, float *mean, float *rstd,
                            struct operand x, const float *w, const float *b) {
    int64_t Nl = (int64_t)bt_l(m), C = m->shape.C;
    if (operand_is_bf16(x)) {
        layernorm_forward_bf16(v->store[a], mean, rstd, operand_as_bf16(x, __func__), w, b, Nl, C, m->flops);
        return;
    }
    layernorm_forward(v->act[a], mean, rstd, operand_as_f32(x, __func__), w, b, Nl, C, m->flops);
    acts_round(m, v, a, btc_l(m));
}

/* The stream's gradient as a kernel writes it: dresid16 (acts_direct) or dresid. */
static struct act_out dresid_out(const struct gpt *m) {
    if (acts_direct(m)) return acts_out_bf16(m, m->dresid16);
    return acts_out_f32(m, m->dresid);
}

/* The stream's gradient as the row-parallel GEMMs read it: dresid16 as
 * it is, or through g (with sp gathered). */
static struct operand dresid_in(struct gpt *m) {
    if (acts_direct(m)) return acts_op_bf16(m, m->dresid16);
    return acts_op_f32(m, m->tpp->row_output_grad(m));
}

/* The backward of a LayerNorm whose input was x: dresid += dinp from the
 * gradient at its output (dtemp_btc), its weight's and bias's accumulated. */
static void layernorm_grad(struct gpt *m, float *dw, float *db, struct operand x, const float *w, const float *mean,
                           const float *rstd) {
    int64_t Nl = (int64_t)bt_l(m), C = m->shape.C;
    if (operand_is_bf16(x))
        layernorm_backward_bf16(dresid_out(m), dw, db, m->dtemp_btc, operand_as_bf16(x, __func__), w, mean, rstd,
                                Nl, C, m->flops);
    else layernorm_backward(m->dresid, dw, db, m->dtemp_btc, operand_as_f32(x, __func__), w, mean, rstd, Nl, C,
                            m->flops);
}

/* Where the bf16 attention writes the probabilities, and reads them
 * back: their store, or (selective recompute: not stored) nowhere in the
 * forward and the one-layer fp32 copy in the backward's recompute,
 * rounded to bf16's values as the kernel stores them. */
static struct act_out att_dst(const struct gpt *m, const struct layer_view *v, bool recompute) {
    if (v->store[ACT_ATT]) return acts_out_bf16(m, v->store[ACT_ATT]);
    if (!recompute) return act_out_none();
    return act_out_bf16_values(v->act[ACT_ATT], m->space);
}

static struct operand att_src(const struct gpt *m, const struct layer_view *v) {
    if (v->store[ACT_ATT]) return acts_op_bf16(m, v->store[ACT_ATT]);
    return acts_op_f32(m, v->act[ACT_ATT]);
}

/* Saved tensor a as the LayerNorms read it: the store (acts_direct), else
 * the fp32 view. */
static struct operand saved_in(const struct gpt *m, const struct layer_view *v, enum layer_act a) {
    if (acts_direct(m)) return acts_op_bf16(m, v->store[a]);
    return acts_op_f32(m, v->act[a]);
}

/* The layer's forward from x into the view's tensors; with out, also the
 * layer output (the recompute of full checkpointing needs no output: the
 * backward starts from the saved stream). N tokens in the GEMMs and the
 * attention, Nl (this rank's) in the LayerNorms and residual adds. */
static void layer_forward(struct gpt *m, struct operand x, struct layer_view *v, struct unit_weights w, float *out,
                          bf16 *out_store) {
    int64_t Cl = m->Cl, Fl = m->Fl;
    size_t nl = btc_l(m);
    struct exec_ctx *fc = m->flops;
    float **a = v->act, *tmp = m->dtemp_btc; /* dtemp_btc is free outside the backward's own use */

    layernorm_saved(m, v, ACT_LN1, v->stat[STAT_LN1_MEAN], v->stat[STAT_LN1_RSTD], x, wt(m, w, LAYER_LN1_W),
                    wt(m, w, LAYER_LN1_B));
    /* column-parallel: this rank's heads' q, k, v, from every token's ln1;
     * acts_direct: rounded once as the GEMM stores them */
    struct act_out qkv = acts_direct(m) ? acts_out_bf16(m, v->store[ACT_QKV]) : acts_out_f32(m, a[ACT_QKV]);
    column_parallel_forward(m, qkv, v, ACT_LN1, wop(m, w, LAYER_QKV_W), wt(m, w, LAYER_QKV_B), 3 * Cl);
    if (!acts_direct(m)) acts_round(m, v, ACT_QKV, acts_numel(m, ACT_QKV));
    if (acts_direct(m) && m->cpp->attention_forward_bf16) { /* the ring on the stores: out rounded once; lse fp32 */
        m->cpp->attention_forward_bf16(m, v->store[ACT_ATTY], a[ACT_ATT], v->store[ACT_QKV], m->att_scratch);
    } else if (acts_direct(m) && flash(m)) { /* out rounded as it is stored; the lse stays fp32 */
        attention_lse_forward_bf16(v->store[ACT_ATTY], a[ACT_ATT], v->store[ACT_QKV], m->att_scratch, m->B,
                                   m->shape.T, Cl, m->NHl, fc);
    } else if (acts_direct(m)) { /* out and the stored probabilities rounded as they are written */
        attention_forward_bf16(acts_out_bf16(m, v->store[ACT_ATTY]), att_dst(m, v, false), v->store[ACT_QKV],
                               m->att_scratch, m->B, m->shape.T, Cl, m->NHl, fc);
    } else if (m->cpp->attention_forward) { /* context parallel: every rank's keys, by ring (flash only) */
        m->cpp->attention_forward(m, a[ACT_ATTY], a[ACT_ATT], a[ACT_QKV]);
    } else if (flash(m)) { /* the lse stays fp32 */
        attention_lse_forward(a[ACT_ATTY], a[ACT_ATT], a[ACT_QKV], m->B, m->shape.T, Cl, m->NHl, fc);
    } else {
        attention_forward(a[ACT_ATTY], a[ACT_ATT], a[ACT_QKV], m->B, m->shape.T, Cl, m->NHl, fc);
        acts_round(m, v, ACT_ATT, acts_numel(m, ACT_ATT));
    }
    if (!acts_direct(m)) acts_round(m, v, ACT_ATTY, acts_numel(m, ACT_ATTY));
    row_parallel_forward(m, tmp, v, ACT_ATTY, wop(m, w, LAYER_ATTPROJ_W), wt(m, w, LAYER_ATTPROJ_B), Cl);
    if (operand_is_bf16(x)) { /* res2 and ln2 in one call: the two kernels' bits (one pass on a GPU) */
        residual_layernorm_forward_bf16(v->store[ACT_RES2], v->store[ACT_LN2], v->stat[STAT_LN2_MEAN],
                                        v->stat[STAT_LN2_RSTD], operand_as_bf16(x, __func__), tmp,
                                        wt(m, w, LAYER_LN2_W), wt(m, w, LAYER_LN2_B), (int64_t)bt_l(m), m->shape.C,
                                        fc);
    } else {
        residual_forward(a[ACT_RES2], operand_as_f32(x, __func__), tmp, (int64_t)nl, fc);
        acts_round(m, v, ACT_RES2, nl);
        layernorm_saved(m, v, ACT_LN2, v->stat[STAT_LN2_MEAN], v->stat[STAT_LN2_RSTD], saved_in(m, v, ACT_RES2),
                        wt(m, w, LAYER_LN2_W), wt(m, w, LAYER_LN2_B));
    }
    column_parallel_forward(m, acts_out_f32(m, a[ACT_FCH]), v, ACT_LN2, wop(m, w, LAYER_FC_W), wt(m, w, LAYER_FC_B),
                            Fl);
    if (acts_gemm_reads_store(m)) { /* both kept as bf16 only, in one pass: no fp32 GELU output */
        gelu_forward_bf16(v->store[ACT_FCH_GELU], v->store[ACT_FCH], a[ACT_FCH], (int64_t)acts_numel(m, ACT_FCH),
                          fc);
    } else {
        acts_round(m, v, ACT_FCH, acts_numel(m, ACT_FCH));
        gelu_forward(a[ACT_FCH_GELU], a[ACT_FCH], (int64_t)acts_numel(m, ACT_FCH), fc);
        acts_round(m, v, ACT_FCH_GELU, acts_numel(m, ACT_FCH_GELU));
    }
    if (!out && !out_store) return;
    row_parallel_forward(m, tmp, v, ACT_FCH_GELU, wop(m, w, LAYER_FCPROJ_W), wt(m, w, LAYER_FCPROJ_B), Fl);
    if (operand_is_bf16(x)) {
        residual_forward_bf16(out_store, v->store[ACT_RES2], tmp, (int64_t)nl, fc);
        return;
    }
    residual_forward(out, a[ACT_RES2], tmp, (int64_t)nl, fc);
    acts_round_saved(m, out, nl, out_store);
}

void gpt_layer_forward(struct gpt *m, int s, int l, struct unit_weights w) {
    int i = l - m->slot[s].l0;
    struct operand x = acts_stream_in(m, s, i, m->work_resid_in);
    struct layer_view v = acts_layer_view(m, s, i, false);
    /* acts_direct: the output goes to its store only */
    float *out = acts_direct(m) ? NULL : acts_resid_view(m, s, i + 1, m->work_resid_out, false);
    layer_forward(m, x, &v, w, out, acts_resid_store(m, s, i + 1));
}

/* The head GEMM's input: lnf's bf16 store where the layer GEMMs read
 * theirs (with the bf16 params as they are, or always under acts_direct,
 * which keeps no fp32 lnf), else its fp32 view (widened for the backward:
 * `load`), through f. */
static struct operand head_input(struct gpt *m, int s, struct operand wte, bool load) {
    if ((operand_is_bf16(wte) && acts_gemm_reads_store(m)) || acts_direct(m)) return acts_op_bf16(m, m->slot[s].lnf);
    return acts_op_f32(m, m->tpp->column_input(m, acts_lnf_view(m, s, load)));
}

float gpt_head_forward(struct gpt *m, int s, struct unit_weights w_head, struct operand wte, const int32_t *targets,
                       float dloss) {
    int64_t N = (int64_t)bt(m), C = m->shape.C;
    struct gpt_slot *sl = &m->slot[s];
    struct operand x = acts_stream_in(m, s, m->slot[s].n_layers, m->work_resid_in);
    const float *lnf_w = hw(m, w_head, HEAD_LNF_W), *lnf_b = hw(m, w_head, HEAD_LNF_B);
    if (operand_is_bf16(x)) {
        layernorm_forward_bf16(sl->lnf, sl->lnf_stats, sl->lnf_stats + bt_l(m), operand_as_bf16(x, __func__), lnf_w,
                               lnf_b, (int64_t)bt_l(m), C, m->flops);
    } else {
        float *lnf = acts_lnf_view(m, s, false);
        layernorm_forward(lnf, sl->lnf_stats, sl->lnf_stats + bt_l(m), operand_as_f32(x, __func__), lnf_w, lnf_b,
                          (int64_t)bt_l(m), C, m->flops);
        acts_round_saved(m, lnf, btc_l(m), acts_bf16(m) ? (bf16 *)sl->lnf : NULL);
    }
    /* The LM head is tied to the token embedding: logits = lnf . wte^T,
     * column-parallel over the vocabulary (f: lnf is whole on every rank;
     * with sp g gathers it). */
    struct vocab_slice v = m->vocab;
    struct operand in = head_input(m, s, wte, false);
    bool l16 = acts_logits_bf16(m); /* tp = 1: the slice is the whole padded vocabulary */
    gemm_forward(m, l16 ? acts_out_bf16(m, sl->logits) : acts_out_f32(m, sl->logits), in, wte, NULL, N, C, v.Vl);
    if (targets) gpt_upload_targets(m, s, targets);
    double sum;
    if (l16) {
        sum = crossentropy_forward_backward_bf16(sl->logits, sl->losses, sl->targets, N, v.V, v.Vl, dloss, m->flops);
    } else { /* dtemp_btc (free between layers) holds the rows' sums and target logits */
        sum = m->tpp->crossentropy(m, sl->logits, sl->losses, sl->targets, N, dloss, m->dtemp_btc);
    }
    return (float)(sum / (double)N);
}

void gpt_head_backward(struct gpt *m, int s, struct unit_weights w_head, struct operand wte, float *dw_head,
                       float *dwte) {
    int64_t N = (int64_t)bt(m), C = m->shape.C;
    struct gpt_slot *sl = &m->slot[s];
    struct operand x = acts_stream_in(m, s, m->slot[s].n_layers, m->work_resid_in);
    const struct model_layout *lay = m->lay;
    float *dlnfw = dw_head + lay->head_offset[HEAD_LNF_W], *dlnfb = dw_head + lay->head_offset[HEAD_LNF_B];
    struct operand dlogits = acts_logits_bf16(m) ? acts_op_bf16(m, sl->logits) : acts_op_f32(m, sl->logits);
    gemm_backward(m, acts_out_f32(m, m->dtemp_btc), dwte, NULL, dlogits, head_input(m, s, wte, true), wte, N,
                  C, m->vocab.Vl);
    m->tpp->column_grad(m, m->dtemp_btc); /* dlnf sums over the vocabulary slices */
    struct act_out dres = dresid_out(m);
    buf_zero(m->space, dres.data, btc_l(m) * dtype_size(dres.dtype));
    m->tpp->ln_grads_begin(m);
    layernorm_grad(m, m->tpp->ln_grad(m, dlnfw, 0), m->tpp->ln_grad(m, dlnfb, 1), x, hw(m, w_head, HEAD_LNF_W),
                   sl->lnf_stats, sl->lnf_stats + bt_l(m));
    m->tpp->ln_grads_done(m, (float *const[]){dlnfw, dlnfb}, 2);
}

void gpt_layer_backward(struct gpt *m, int s, int l, struct unit_weights w, float *dw) {
    int64_t C = m->shape.C, Cl = m->Cl, Fl = m->Fl;
    int i = l - m->slot[s].l0;
    struct exec_ctx *fc = m->flops;
    struct operand x = acts_stream_in(m, s, i, m->work_resid_in);
    struct layer_view v = acts_layer_view(m, s, i, true);
    float **a = v.act;
    /* Recompute what was not kept. The kernels are deterministic, so the
     * values equal the forward's bit for bit (rounded alike in bf16). */
    if (m->recompute == RECOMPUTE_FULL) layer_forward(m, x, &v, w, NULL, NULL);
    if (m->recompute == RECOMPUTE_SELECTIVE && !flash(m)) { /* flash: nothing was dropped */
        if (acts_direct(m)) {
            attention_forward_bf16(acts_out_f32(m, m->dtemp_btc), att_dst(m, &v, true), v.store[ACT_QKV],
                                   m->att_scratch, m->B, m->shape.T, Cl, m->NHl, fc);
        } else {
            attention_forward(m->dtemp_btc, a[ACT_ATT], a[ACT_QKV], m->B, m->shape.T, Cl, m->NHl, fc);
            acts_round(m, &v, ACT_ATT, acts_numel(m, ACT_ATT));
        }
    }
    float *ln[4] = {dwt(m, dw, LAYER_LN1_W), dwt(m, dw, LAYER_LN1_B), dwt(m, dw, LAYER_LN2_W),
                    dwt(m, dw, LAYER_LN2_B)};
    m->tpp->ln_grads_begin(m);
    /* On entry dresid holds dL/d(layer output); on exit dL/d(layer input).
     * g's backward is the identity: dresid reaches the row-parallel
     * projections whole; their bias gradients come out alike on every rank
     * (with sp: g-bar gathers it whole first). */
    bool g16 = acts_direct(m);
    struct act_out dfc = g16 ? acts_out_bf16(m, m->dfc16) : acts_out_f32(m, m->dfc);
    struct act_out dtemp = acts_out_f32(m, m->dtemp_btc);
    layer_matmul_backward(m, dfc, dwt(m, dw, LAYER_FCPROJ_W), dwt(m, dw, LAYER_FCPROJ_B), dresid_in(m), &v,
                          ACT_FCH_GELU, false, wop(m, w, LAYER_FCPROJ_W), Fl, C);
    int64_t nf = (int64_t)acts_numel(m, ACT_FCH);
    if (g16) gelu_backward_bf16_grads(m->dfc16, v.store[ACT_FCH], m->dfc16, nf, fc);
    else if (acts_gemm_reads_store(m)) gelu_backward_bf16(m->dfc, v.store[ACT_FCH], m->dfc, nf, fc);
    else gelu_backward(m->dfc, a[ACT_FCH], m->dfc, nf, fc);
    layer_matmul_backward(m, dtemp, dwt(m, dw, LAYER_FC_W), dwt(m, dw, LAYER_FC_B),
                          g16 ? acts_op_bf16(m, m->dfc16) : acts_op_f32(m, m->dfc), &v, ACT_LN2, true,
                          wop(m, w, LAYER_FC_W), C, Fl);
    m->tpp->column_grad(m, m->dtemp_btc); /* f: the partial dln2 of each rank's features sum */
    layernorm_grad(m, m->tpp->ln_grad(m, ln[2], 2), m->tpp->ln_grad(m, ln[3], 3), saved_in(m, &v, ACT_RES2),
                   wt(m, w, LAYER_LN2_W), v.stat[STAT_LN2_MEAN], v.stat[STAT_LN2_RSTD]);
    layer_matmul_backward(m, dtemp, dwt(m, dw, LAYER_ATTPROJ_W), dwt(m, dw, LAYER_ATTPROJ_B), dresid_in(m), &v,
                          ACT_ATTY, false, wop(m, w, LAYER_ATTPROJ_W), Cl, C);
    /* flash: D = rowsum(dout * out) from the saved output (rounded alike
     * to act_dtype, as the rest of the layer's saved tensors) */
    if (m->cpp->attention_backward_bf16 && g16)
        m->cpp->attention_backward_bf16(m, m->dqkv16, m->att_scratch, m->dtemp_btc, v.store[ACT_QKV],
                                        v.store[ACT_ATTY], a[ACT_ATT]);
    else if (m->cpp->attention_backward)
        m->cpp->attention_backward(m, m->dqkv, m->att_scratch, m->dtemp_btc, a[ACT_QKV], a[ACT_ATTY], a[ACT_ATT]);
    else if (acts_direct(m) && flash(m))
        attention_lse_backward_bf16(m->dqkv16, m->att_scratch, m->dtemp_btc, v.store[ACT_QKV], v.store[ACT_ATTY],
                                    a[ACT_ATT], m->B, m->shape.T, Cl, m->NHl, fc);
    else if (acts_direct(m))
        attention_backward_bf16(m->dqkv16, m->dtemp_btc, v.store[ACT_QKV], att_src(m, &v), m->att_scratch, m->B,
                                m->shape.T, Cl, m->NHl, fc);
    else if (flash(m))
        attention_lse_backward(m->dqkv, m->att_scratch, m->dtemp_btc, a[ACT_QKV], a[ACT_ATTY], a[ACT_ATT], m->B,
                               m->shape.T, Cl, m->NHl, fc);
    else
        attention_backward(m->dqkv, m->dtemp_btc, a[ACT_QKV], a[ACT_ATT], m->att_scratch, m->B, m->shape.T, Cl, m->NHl,
                           fc);
    struct operand dqkv = g16 ? acts_op_bf16(m, m->dqkv16) : acts_op_f32(m, m->dqkv);
    layer_matmul_backward(m, dtemp, dwt(m, dw, LAYER_QKV_W), dwt(m, dw, LAYER_QKV_B), dqkv, &v, ACT_LN1, true,
                          wop(m, w, LAYER_QKV_W), C, 3 * Cl);
    m->tpp->column_grad(m, m->dtemp_btc); /* f: dln1 */
    layernorm_grad(m, m->tpp->ln_grad(m, ln[0], 0), m->tpp->ln_grad(m, ln[1], 1), x, wt(m, w, LAYER_LN1_W),
                   v.stat[STAT_LN1_MEAN], v.stat[STAT_LN1_RSTD]);
    m->tpp->ln_grads_done(m, ln, 4);
}

void gpt_embed_backward(struct gpt *m, int s, float *dw_embed) {
    /* each rank accumulates its own vocabulary rows; wpe's gradient whole
     * (replicated; with sp from the gathered gradient, alike on every rank) */
    struct vocab_slice v = m->vocab;
    float *dwte = dw_embed + m->lay->embed_offset[EMB_WTE], *dwpe = dw_embed + m->lay->embed_offset[EMB_WPE];
    /* with cp at global positions; bf16 (no sp): the stream's gradient whole */
    struct operand d = acts_direct(m) ? acts_op_bf16(m, m->dresid16) : acts_op_f32(m, m->tpp->row_output_grad(m));
    m->cpp->embedding_backward(m, dwte, dwpe, d, m->slot[s].inputs, v.v0, v.Vl);
    m->flops->other += 2.0 * (double)btc(m);
}

const struct model_blocks GPT2_BLOCKS = {gpt_embed_forward, gpt_layer_forward, gpt_head_forward,
                                         gpt_head_backward, gpt_layer_backward, gpt_embed_backward};

/* The plain model's points (model/parallel_points.h): one rank in the tp
 * group and in the cp group. f and g are the identities, the
 * cross-entropy runs over the whole vocabulary, wpe's positions are the
 * local ones and every key is local (the attention kernels this file calls). */

static const float *plain_column_input(struct gpt *m, float *ln) {
    (void)m;
    return ln;
}

static void plain_no_sum(struct gpt *m, float *d) { (void)m, (void)d; }

static void plain_row_output(struct gpt *m, float *full, float *out) { (void)m, (void)full, (void)out; }

static const float *plain_row_output_grad(struct gpt *m) { return m->dresid; }

static void plain_ln_grads_begin(struct gpt *m) { (void)m; }

static float *plain_ln_grad(struct gpt *m, float *dw_tensor, int k) {
    (void)m, (void)k;
    return dw_tensor;
}

static void plain_ln_grads_done(struct gpt *m, float *const *dw_tensors, int n) { (void)m, (void)dw_tensors, (void)n; }

static double plain_crossentropy(struct gpt *m, float *logits, float *losses, const int32_t *targets, int64_t N,
                                 float dloss, float *scratch) {
    (void)scratch; /* the fused form: the three passes' bits in one */
    return crossentropy_forward_backward(logits, losses, targets, N, m->vocab.V, m->vocab.Vl, dloss, m->flops);
}

const struct tp_points PLAIN_TP_POINTS = {plain_column_input,   plain_no_sum,         plain_row_output,
                                          plain_row_output_grad, plain_ln_grads_begin, plain_ln_grad,
                                          plain_ln_grads_done,  plain_crossentropy};

static void plain_positions_add(struct gpt *m, float *out, const float *wpe, int t0, int n) {
    positions_add(out, wpe + (size_t)t0 * m->shape.C, m->B, n, m->shape.C, m->flops);
}

static void plain_embedding_backward(struct gpt *m, float *dwte, float *dwpe, struct operand dout,
                                     const int32_t *inputs, int64_t v0, int64_t rows) {
    int64_t B = m->B, T = m->shape.T, C = m->shape.C;
    const char *op = __func__;
    if (operand_is_bf16(dout))
        embedding_rows_backward_bf16(dwte, dwpe, operand_as_bf16(dout, op), inputs, v0, rows, B, T, C, m->flops);
    else embedding_rows_backward(dwte, dwpe, operand_as_f32(dout, op), inputs, v0, rows, B, T, C, m->flops);
}

static void plain_rope_positions(struct gpt *m, int32_t *pos) {
    for (int64_t i = 0; i < (int64_t)m->B * m->shape.T; i++) pos[i] = (int32_t)(i % m->shape.T);
}

const struct cp_points PLAIN_CP_POINTS = {.positions_add = plain_positions_add,
                                          .rope_positions = plain_rope_positions,
                                          .embedding_backward = plain_embedding_backward};
