/* Bytes per device: model states under ZeRO, activations under TP/SP/PP
 * and recomputation, and the seeds' checkpoint-based estimate. */
#include "schedule.h"
#include "theory.h"
#include "zero_stages.h"

#include <math.h>

/* ZeRO (Rajbhandari et al. 2019) §5.1-5.3 / Fig. 1, general form
 * (THEORY.md 1.2): stage 1 shards the optimizer state, stage 2 also the
 * gradients, stage 3 also the weights, each over N ranks:
 *   DP:     (w_p + w_g + K) Psi
 *   ZeRO-1: (w_p + w_g) Psi + K Psi / N
 *   ZeRO-2: w_p Psi + (w_g + K) Psi / N
 *   ZeRO-3: (w_p + w_g + K) Psi / N
 * Transient buffers (buckets, gathered layers) are not included. */
struct theory_state theory_model_state_bytes(double w_p, double w_g, double K, double psi, int stage, int N) {
    double n = N > 0 ? (double)N : 1.0;
    struct theory_state st;
    const struct zero_stage *row = zero_stage_row(stage);
    st.params = w_p * psi / (row->shards_params ? n : 1.0);
    st.grads = w_g * psi / (row->shards_grads ? n : 1.0);
    st.optimizer = K * psi / (row->shards_optimizer ? n : 1.0);
    st.total = st.params + st.grads + st.optimizer;
    return st;
}

/* Korthikanti et al. 2022 §4.1 eq. 1 and Table 2, bytes per layer per
 * micro-batch with 16-bit activations and 1-byte dropout masks:
 *   sbh (34 + 5 a s / h) unsharded,
 *   TP:                sbh (10 + 24/t + 5as/(ht))
 *   TP + SP:           sbh/t (34 + 5as/h)
 *   selective:         the 5as^2b score term is recomputed, so dropped
 *   full:              only the layer input, 2sbh (2sbh/t with SP).
 * The 34 is itemised (THEORY.md 3): norms 4; attention 11 = QKV input 2,
 * Q 2, K 2, V 2, projection input 2, mask 1; MLP 19 = input 2, GELU input
 * 2F/h, down input 2F/h, mask 1 (F = 4h). We keep that itemisation but let
 * K and V shrink by r = n_kv/a (GQA) and the MLP widen to F, with SwiGLU
 * saving gate, up and product (3 x 2F/h) [derived, not in the paper].
 * The 10 that plain TP leaves replicated is norms 4, QKV input 2, MLP input
 * 2 and the two masks. 16-bit activations are assumed, as in the paper. */
static double korthikanti_layer(const struct theory_model *m, double b, int t, bool sp, enum recompute_mode r) {
    const double s = m->s, h = m->h, a = m->a, tt = t > 0 ? t : 1;
    const double ratio = (double)m->n_kv / m->a;
    const double mlp_wide = (m->swiglu ? 6.0 : 4.0) * m->F / h;
    const double replicated = 10.0;                           /* per sbh */
    const double sharded = 4.0 + 4.0 * ratio + mlp_wide;      /* Q, O, K, V, MLP */
    const double scores = 5.0 * a * s / h;                    /* per sbh: 5 a s^2 b */
    const double sbh = s * b * h;
    if (r == RECOMPUTE_FULL) return 2.0 * sbh / (sp ? tt : 1.0);
    double sc = r == RECOMPUTE_SELECTIVE ? 0.0 : scores;
    if (sp) return sbh / tt * (replicated + sharded + sc);
    return sbh * (replicated + sharded / tt + sc / tt);
}

double theory_activation_layer_bytes(const struct theory_model *m, double b, int t, bool sequence_parallel,
                                     enum recompute_mode r) {
    return korthikanti_layer(m, b, t, sequence_parallel, r);
}

/* Korthikanti §4.3 / Megatron: final-norm input 2sbh + head input 2sbh
 * (sharded by t) + fp32 logits 4sbV / t = 4sbh/t (1 + V/h). */
double theory_activation_output_bytes(const struct theory_model *m, double b, int t) {
    const double tt = t > 0 ? t : 1;
    return 4.0 * m->s * b * m->h / tt * (1.0 + (double)m->V / m->h);
}

/* 1F1B (Narayanan et al. 2021 §2.2.1): stage 0 holds min(m, p) micro-batches
 * of its L/p layers in flight, i.e. about L layers' worth independent of p
 * (Korthikanti §4.2.3). The last stage holds one micro-batch plus the output
 * layer. With full recomputation the backward re-materialises one layer at a
 * time, so one unrecomputed layer is added as working memory. */
double theory_activation_device_bytes(const struct theory_model *m, double b, int t, int p, double m_micro,
                                      bool sequence_parallel, enum recompute_mode r) {
    const int pp = p > 0 ? p : 1;
    const double layers = ceil((double)m->L / pp);
    /* the 1F1B schedule's slots on stage 0, as the trainer allocates them */
    const double in_flight = schedule_slots(SCHEDULE_1F1B, pp, 0, (int)fmin(m_micro, (double)pp));
    const double layer = theory_activation_layer_bytes(m, b, t, sequence_parallel, r);
    const double out = theory_activation_output_bytes(m, b, t);
    double first = layers * in_flight * layer + (pp == 1 ? out : 0.0);
    double last = layers * layer + out;
    double peak = fmax(first, last);
    if (r == RECOMPUTE_FULL)
        peak += theory_activation_layer_bytes(m, b, t, sequence_parallel, RECOMPUTE_NONE);
    return peak;
}

/* The seeds' estimate (LLaMA-3-70B worked problem): weights (w_p Psi) +
 * optimizer state (opt_bytes Psi) + n_ckpt checkpoints of h values of
 * ckpt_bytes each, per layer, for every token of one batch. It counts no
 * gradients and no master copy, so it is a lower bound on what ZeRO counts. */
struct theory_ckpt_estimate theory_checkpoint_estimate(double psi, double w_p, double opt_bytes, double batch_tokens,
                                                       int h, int L, int n_ckpt, double ckpt_bytes) {
    struct theory_ckpt_estimate e;
    e.params = w_p * psi;
    e.optimizer = opt_bytes * psi;
    e.checkpoints = ckpt_bytes * (double)h * batch_tokens * n_ckpt * (double)L;
    e.total = e.params + e.optimizer + e.checkpoints;
    return e;
}
