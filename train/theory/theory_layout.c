/* One TP x CP x PP x DP layout judged from the formulas: memory per device and
 * per-step compute vs communication time; and the smallest device count
 * with a layout that fits. */
#include "theory.h"

#include <math.h>

/* Per-device model states: the t x p model-parallel ranks split Psi evenly
 * (embeddings really sit on the first/last stage; ignored here), and ZeRO
 * shards each rank's part over the d data-parallel ranks.
 * Time model (a roofline, not a simulator):
 *  - compute = executed FLOPs per device / (peak x MFU), where executed
 *    FLOPs include recomputation (theory_hardware_flops_per_token);
 *  - bubble  = compute x (p-1)/m (Narayanan et al. 2021 §2.2, 1F1B):
 *    theory_pipeline_bubble_seconds, the trainer's bubble formula;
 *  - comm    = each group's bytes per device / its link's bandwidth, summed
 *    (the links are not assumed to run at once), assumed to overlap
 *    perfectly with compute. Devices are numbered tp innermost, then cp,
 *    dp, pp (the trainer's grid and Megatron-LM's order), so a group spans
 *    tp: t, cp: t cp, dp: t cp d, pp: every device; a group spanning more
 *    than a node's devices runs at the inter-node bandwidth (its slowest
 *    link bounds the ring), else at the node's link (NVLink);
 *  - step    = max(compute, comm) + bubble; the larger term "bounds" it;
 *    comm beyond compute is the exposed part, so this is compute + exposed
 *    comm + bubble.
 * A step trains m b d whole sequences, m = floor(B / (b d)). */
double theory_pipeline_bubble(int p, double m, int v) { return (double)(p - 1) / ((double)v * m + p - 1); }

/* f / (1 - f) of the work, f the bubble share above */
double theory_pipeline_bubble_seconds(double compute, int p, double m, int v) {
    return compute * (double)(p - 1) / ((double)v * m);
}

struct theory_layout_eval theory_layout_evaluate(const struct theory_model *m, const struct theory_dtypes *dt,
                                                 double psi, double micro_batch, double batch_tokens,
                                                 const struct theory_layout *lay,
                                                 const struct theory_cluster *cl) {
    struct theory_layout_eval e = {0};
    const int t = lay->tp, p = lay->pp, d = lay->dp, cp = lay->cp > 1 ? lay->cp : 1;
    const double devices = (double)t * cp * p * d;
    const double b = micro_batch;
    /* whole sequences and whole micro-batches: a step trains m b d of the
     * B sequences asked for (the rest would not fill a micro-batch on
     * every pipeline); a layout without one is judged at m = 1 */
    e.sequences = floor(batch_tokens / m->s);
    e.micro_batches = floor(e.sequences / (b * d));
    e.batch_ok = e.micro_batches >= 1.0;
    const double mm = fmax(e.micro_batches, 1.0);
    e.step_tokens = mm * b * d * m->s;
    /* a cp rank: s/cp positions of every sequence (ring attention keeps
     * no s x s scores), so its activations and its tp and pp traffic are
     * the model's at s/cp */
    struct theory_model local = *m;
    local.s = m->s / cp;

    e.psi_device = psi / ((double)t * p);
    e.state = theory_model_state_bytes(dt->w_p, dt->w_g, dt->K, e.psi_device, lay->zero_stage, d * cp);
    e.activations = theory_activation_device_bytes(&local, b, t, p, mm, lay->sequence_parallel, lay->recompute);
    e.memory = e.state.total + e.activations;
    e.fits = e.batch_ok && e.memory <= cl->memory;

    const double rate = cl->peak_flops * cl->mfu;
    const double flops = theory_hardware_flops_per_token(m, psi, lay->recompute) * e.step_tokens / devices;
    e.compute_s = rate > 0 ? flops / rate : 0.0;
    e.bubble_s = theory_pipeline_bubble_seconds(e.compute_s, p, mm, 1);

    const double intra = cl->link_bandwidth > 0 ? cl->link_bandwidth : INFINITY;
    const double inter = cl->inter_node_bandwidth > 0 ? cl->inter_node_bandwidth : intra;
    const bool nodes = cl->devices_per_node > 0 && cl->inter_node_bandwidth > 0;
    e.tp_inter = nodes && t > cl->devices_per_node;
    e.cp_inter = nodes && (double)t * cp > cl->devices_per_node;
    e.dp_inter = nodes && (double)t * cp * d > cl->devices_per_node;
    e.pp_inter = nodes && p > 1 && devices > cl->devices_per_node;
    const double layers = ceil((double)m->L / p);
    e.dp_comm_s = theory_dp_step_bytes(e.psi_device, dt->w_p, dt->w_g, lay->zero_stage, d * cp, mm) /
                  (e.dp_inter ? inter : intra);
    e.tp_comm_s = layers * mm * theory_tp_layer_bytes(&local, b, t, dt->w_act, lay->recompute, lay->sequence_parallel) /
                  (e.tp_inter ? inter : intra);
    e.pp_comm_s = p > 1 ? theory_pp_boundary_bytes(&local, b, mm, t, lay->sequence_parallel, dt->w_act) /
                              (e.pp_inter ? inter : intra)
                        : 0.0;
    e.cp_comm_s = layers * mm * theory_cp_layer_bytes(m, b, t, cp, dt->w_act, lay->recompute) /
                  (e.cp_inter ? inter : intra);
    e.comm_s = e.dp_comm_s + e.tp_comm_s + e.pp_comm_s + e.cp_comm_s;
    e.comm_bound = e.comm_s > e.compute_s;
    e.step_s = fmax(e.compute_s, e.comm_s) + e.bubble_s;
    return e;
}

bool theory_pp_searched(const struct theory_model *m, int p) {
    const bool power_of_2 = p > 0 && (p & (p - 1)) == 0;
    return p >= 1 && p <= m->L && p <= THEORY_MAX_PP && (m->L % p == 0 || power_of_2);
}

/* Rule: the smallest n for which some t in {1,2,4,8} (dividing a and n_kv,
 * Megatron's head split), cp in {1,2,4,8,16} (2 cp dividing s), p
 * theory_pp_searched, d = n/(t cp p) with at least one micro-batch per
 * pipeline, has model states + activations <= memory. */
int theory_smallest_fit(const struct theory_model *m, const struct theory_dtypes *dt, double psi,
                        double micro_batch, double batch_tokens, int zero_stage, enum recompute_mode r,
                        double memory, int max_devices, struct theory_layout *best) {
    static const int tps[] = {1, 2, 4, 8};
    const struct theory_cluster cl = {.devices = 1, .memory = memory, .peak_flops = 0, .mfu = 0,
                                      .link_bandwidth = 0, .watts = 0};
    for (int n = 1; n <= max_devices; n++)
        for (int i = 0; i < 4; i++) {
            int t = tps[i];
            if (n % t || m->a % t || m->n_kv % t) continue;
            for (int cp = 1; cp <= THEORY_MAX_CP && cp <= n / t; cp *= 2) {
                if ((n / t) % cp || m->s % (2 * cp)) continue;
                for (int p = 1; p <= m->L && p <= n / (t * cp); p++) {
                    if (!theory_pp_searched(m, p) || (n / (t * cp)) % p) continue;
                    struct theory_layout lay = {.tp = t, .cp = cp, .pp = p, .dp = n / (t * cp * p),
                                                .zero_stage = zero_stage, .recompute = r, .sequence_parallel = true};
                    struct theory_layout_eval e =
                        theory_layout_evaluate(m, dt, psi, micro_batch, batch_tokens, &lay, &cl);
                    if (e.fits) {
                        if (best) *best = lay;
                        return n;
                    }
                }
            }
        }
    return 0;
}
