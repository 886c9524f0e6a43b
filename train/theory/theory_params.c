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

/* Whole-model count, THEORY.md 4.5 (LLaMA: SwiGLU, GQA, RMSNorm, untied,
 * no biases; matches Megatron's theoretical_memory_usage.py terms) and
 * Narayanan et al. 2021 eq. 2 (GPT: 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh))
 * plus the final LayerNorm's 2h, which eq. 2 leaves out). */
/* W_q and W_o are h x a d_h; W_k and W_v are h x n_kv d_h. */
static double attention_weights(const struct theory_model *m) {
    const double h = m->h, q = (double)m->a * m->d_h, kv = (double)m->n_kv * m->d_h;
    return 2.0 * h * q + 2.0 * h * kv;
}

/* GELU MLP: up h x F and down F x h. SwiGLU: gate, up and down. */
static double ffn_weights(const struct theory_model *m) { return (m->swiglu ? 3.0 : 2.0) * m->h * m->F; }

double theory_layer_gemm_weights(const struct theory_model *m) { return attention_weights(m) + ffn_weights(m); }

struct theory_params theory_param_count(const struct theory_model *m) {
    const double L = m->L, h = m->h, F = m->F;
    const double q = (double)m->a * m->d_h;     /* query width a d_h (= h for GPT) */
    const double kv = (double)m->n_kv * m->d_h; /* key/value width n_kv d_h */
    const double norm = m->rmsnorm ? h : 2.0 * h;
    const double head_copies = m->tied_embeddings ? 1.0 : 2.0;
    struct theory_params p;

    /* GPT adds the qkv bias (q + 2kv) and the output-projection bias (h),
     * and the MLP's biases F and h; LLaMA has none. */
    p.attention = L * (attention_weights(m) + (m->biases ? q + 2.0 * kv + h : 0.0));
    p.ffn = L * (ffn_weights(m) + (m->biases ? F + h : 0.0));
    p.norms = L * 2.0 * norm + norm;
    p.embedding = head_copies * (double)m->V * h;
    p.position = m->position_embedding ? (double)(m->max_s > 0 ? m->max_s : m->s) * h : 0.0;
    p.total = p.embedding + p.position + p.attention + p.ffn + p.norms;
    p.padding = head_copies * (double)(m->Vp - m->V) * h;
    return p;
}
