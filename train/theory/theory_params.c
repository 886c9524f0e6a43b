/* Parameter counts by part, and the shape/dtype facts the other theory
 * files derive from a config. */
#include "theory.h"

#include "layout.h"

const char *theory_recompute_name(enum recompute_mode r) {
    switch (r) {
    case RECOMPUTE_NONE: return "none";
    case RECOMPUTE_SELECTIVE: return "selective";
    case RECOMPUTE_FULL: return "full";
    }
    return "?";
}

void theory_model_from_config(struct theory_model *m, const struct config *c) {
    bool llama = c->arch == ARCH_LLAMA;
    m->L = c->n_layer;
    m->h = c->d_model;
    m->a = c->n_head;
    m->n_kv = c->n_kv_head > 0 ? c->n_kv_head : c->n_head;
    m->d_h = c->d_model / c->n_head;
    m->F = config_mlp_width(c);
    m->s = c->seq_len;
    m->max_s = c->max_seq_len > 0 ? c->max_seq_len : c->seq_len;
    m->V = c->vocab_size;
    /* Only the gpt2 path pads the embedding rows (llm.c); the padding is
     * reported apart from the parameter count. */
    m->Vp = llama ? c->vocab_size : padded_vocab(c->vocab_size);
    m->arch = c->arch;
    m->swiglu = llama;
    m->rmsnorm = llama;
    m->biases = !llama;
    m->tied_embeddings = !llama;
    m->position_embedding = !llama;
}

/* ZeRO §3.1: mixed-precision Adam keeps 16-bit weights and gradients and an
 * fp32 master copy + m + v (K = 12). With fp32 weights the weights are the
 * master, so K = 8 (THEORY.md 1.1 table). */
struct theory_dtypes theory_dtypes_from_config(const struct config *c) {
    struct theory_dtypes d;
    d.w_p = (double)dtype_size(c->param_dtype);
    d.w_g = (double)dtype_size(c->grad_dtype);
    /* the fp32 master when params are bf16, then the rule's states */
    d.K = (c->param_dtype == DTYPE_FP32 ? 0.0 : 4.0) +
          optim_bytes_per_param(optim_rule(c->optimizer), c->adafactor_beta1);
    d.w_act = (double)dtype_size(c->act_dtype);
    return d;
}

/* The model's shape as the layout reads it (include/layout.h). */
static struct model_shape layout_shape(const struct theory_model *m) {
    return (struct model_shape){.L = m->L, .C = m->h, .NH = m->a, .T = m->s, .maxT = m->max_s, .V = m->V,
                                .Vp = m->Vp, .arch = m->arch, .KV = m->n_kv, .F = m->F};
}

/* Whole-model count: the layout's tensors (layout_param_parts), the one
 * count the trainer allocates by. They are the papers' terms: THEORY.md
 * 4.5 for LLaMA (per layer W_q, W_o h x a d_h, W_k, W_v h x n_kv d_h,
 * gate, up, down 3 h F, two RMSNorm gains; untied embedding and head;
 * matches Megatron's theoretical_memory_usage.py) and Narayanan et al.
 * 2021 eq. 2 for GPT (12 l h^2 (1 + 13/(12h) + (V+s)/(12lh)) plus the
 * final LayerNorm's 2h, which eq. 2 leaves out); tests/test_sizes.c and
 * tests/test_plan.c check them against those formulas. */
struct theory_params theory_param_count(const struct theory_model *m) {
    struct model_shape shape = layout_shape(m);
    struct layout_param_parts parts = layout_param_parts(&shape);
    struct theory_params p;
    p.attention = parts.attention;
    p.ffn = parts.ffn;
    p.norms = parts.norms;
    p.embedding = parts.embedding;
    p.position = parts.position;
    p.total = p.embedding + p.position + p.attention + p.ffn + p.norms;
    p.padding = parts.padding;
    return p;
}

double theory_layer_gemm_weights(const struct theory_model *m) {
    struct model_shape shape = layout_shape(m);
    return layout_param_parts(&shape).layer_gemm;
}
