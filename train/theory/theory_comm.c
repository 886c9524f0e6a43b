/* Communication volumes: bytes each rank sends (and receives) per step,
 * from ring collectives (NVIDIA nccl-tests' PERFORMANCE.md,
 * https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md;
 * docs/THEORY.md 7). */
#include "theory.h"

/* nccl-tests PERFORMANCE.md: with M the full buffer in bytes and N ranks,
 * all-reduce moves 2(N-1)/N M per rank, reduce-scatter and all-gather
 * (N-1)/N M each (ring all-reduce = reduce-scatter + all-gather). */
double theory_allreduce_bytes(double M, int N) { return N > 1 ? 2.0 * (N - 1) / N * M : 0.0; }
double theory_reduce_scatter_bytes(double M, int N) { return N > 1 ? (double)(N - 1) / N * M : 0.0; }
double theory_allgather_bytes(double M, int N) { return N > 1 ? (double)(N - 1) / N * M : 0.0; }

/* ZeRO §7.1-7.2 with the ring factor restored (THEORY.md 1.3):
 *   DDP:     all-reduce(grads)                  2(N-1)/N Psi w_g, once per step
 *   ZeRO-1:  reduce-scatter(grads) + all-gather(params)
 *   ZeRO-2:  as ZeRO-1, but with only a gradient shard kept the
 *            reduce-scatter runs every micro-batch
 *   ZeRO-3:  all-gather(params) for forward and again for backward +
 *            reduce-scatter(grads), every micro-batch; no gather after the
 *            update (the next forward gathers).
 * Gradient accumulation with DDP/ZeRO-1 is assumed local (no-sync). */
double theory_dp_step_bytes(double psi, double w_p, double w_g, int stage, int N, double accum) {
    const double k = accum >= 1 ? accum : 1.0;
    const double grads = psi * w_g, params = psi * w_p;
    switch (stage) {
    case 0: return theory_allreduce_bytes(grads, N);
    case 1: return theory_reduce_scatter_bytes(grads, N) + theory_allgather_bytes(params, N);
    case 2: return k * theory_reduce_scatter_bytes(grads, N) + theory_allgather_bytes(params, N);
    default:
        return k * (2.0 * theory_allgather_bytes(params, N) + theory_reduce_scatter_bytes(grads, N));
    }
}

/* Megatron TP (Shoeybi et al. 2019 §3, Fig. 4): per layer two all-reduces
 * of a b x s x h activation in the forward (g after each row-parallel
 * projection) and two in the backward (f before each column-parallel
 * GEMM), i.e. 8 b s h (t-1)/t elements (Narayanan et al. 2021 §3.2). Full
 * recomputation re-runs the forward, but only up to the GELU: the MLP's
 * projection output (the layer's output) is never read by the backward,
 * which starts from dL/d(output), so model/gpt.c skips that GEMM and its g.
 * One g is repeated, not two: 5 (counting 6, as "the forward again" would,
 * overstates this code's traffic by a fifth). Selective recomputation of
 * core attention is local to each head shard and adds none. */
int theory_tp_layer_allreduces(enum recompute_mode r) { return r == RECOMPUTE_FULL ? 5 : 4; }

/* Sequence parallelism (Korthikanti et al. 2022 §4.2.2, Fig. 5): each g
 * becomes g-bar (reduce-scatter forward, all-gather backward), each f
 * becomes g (all-gather forward, reduce-scatter backward), together the
 * volume of the all-reduces they replace, as the paper says. gpt.c keeps
 * only its s/t slice of ln1 and ln2, so the backward's weight-gradient
 * GEMMs gather them again: 2 more all-gathers (the paper's "tensor +
 * sequence parallel" activation row assumes the same re-gather). Full
 * recompute's forward up to the GELU adds 2 g and 1 g-bar. The norms'
 * weight and bias gradients of a slice are partial sums: one all-reduce
 * per layer (model/tensor_parallel/conjugates.c). Forward 2 RS + 2 AG; backward 2 RS +
 * 4 AG. */
struct theory_tp_layer_calls theory_tp_layer_collectives(enum recompute_mode r, bool sequence_parallel) {
    bool full = r == RECOMPUTE_FULL;
    if (!sequence_parallel) return (struct theory_tp_layer_calls){.all_reduces = theory_tp_layer_allreduces(r)};
    return (struct theory_tp_layer_calls){.reduce_scatters = full ? 5 : 4, .all_gathers = full ? 8 : 6,
                                          .norm_all_reduces = 1};
}

double theory_tp_norm_grad_bytes(const struct theory_model *m) { return 2.0 * (m->rmsnorm ? 1 : 2) * m->h * 4; }

double theory_tp_layer_bytes(const struct theory_model *m, double b, int t, double w_act, enum recompute_mode r,
                             bool sequence_parallel) {
    const double M = b * m->s * (double)m->h * w_act;
    struct theory_tp_layer_calls k = theory_tp_layer_collectives(r, sequence_parallel);
    return k.all_reduces * theory_allreduce_bytes(M, t) + k.reduce_scatters * theory_reduce_scatter_bytes(M, t) +
           k.all_gathers * theory_allgather_bytes(M, t) +
           k.norm_all_reduces * theory_allreduce_bytes(theory_tp_norm_grad_bytes(m), t);
}

/* Ring attention (model/context_parallel/cp.h): per layer per micro-batch
 * a cp rank sends its keys and values to the next rank cp - 1 times
 * forward, and backward cp - 1 times again beside the cp sends of their
 * gradients; full recompute re-runs the forward's ring. A block, KV, is
 * b (s/cp) positions of 2 n_kv d_h / t values (the rank's kv heads). */
double theory_cp_layer_bytes(const struct theory_model *m, double b, int t, int cp, double w_act,
                             enum recompute_mode r) {
    if (cp <= 1) return 0;
    const double tt = t > 0 ? t : 1;
    const double kv = b * ((double)m->s / cp) * 2.0 * m->n_kv * m->d_h / tt * w_act;
    const double forward = (cp - 1) * kv, backward = (cp - 1) * kv + cp * kv;
    return forward + backward + (r == RECOMPUTE_FULL ? forward : 0);
}

/* Narayanan et al. 2021 §3.2: each micro-batch sends b s h elements forward
 * and its gradient back across a stage boundary: 2 m b s h per step. With
 * sequence parallelism (or the §4.1 scatter/gather) each TP rank sends 1/t. */
double theory_pp_boundary_bytes(const struct theory_model *m, double b, double m_micro, int t,
                                bool sequence_parallel, double w_act) {
    const double tt = sequence_parallel && t > 0 ? t : 1;
    return 2.0 * m_micro * b * m->s * (double)m->h * w_act / tt;
}
