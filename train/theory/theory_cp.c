/* The ring's traffic of context parallelism, from the config alone
 * (train/theory/accounting.h: theory_trainer_cp_comm). */
#include "accounting.h"
#include "theory_rank_parts.h"

struct cp_comm_theory theory_trainer_cp_comm(const struct config *c, struct rank_place p) {
    struct cp_comm_theory t = {0};
    int cp = rank_place_cp(p);
    if (cp <= 1) return t;
    struct model_layout lay;
    rank_place_layout(c, p, &lay);
    /* K and V at the key/value heads' width (GQA: KV of NH heads) */
    double B = c->micro_batch, Tl = (double)(c->seq_len / cp),
           W = (double)(kv_heads(&lay.shape) / lay.rank.tp * (c->d_model / c->n_head));
    double n = rank_layers(&lay.rank), m = c->grad_accum;
    /* K and V travel in the stores' dtype, their gradients in fp32
     * (model/context_parallel/ring.c) */
    t.kv_elem = theory_stores_direct(c, theory_sp_on(c, p)) ? sizeof(bf16) : sizeof(float);
    t.kv = B * Tl * 2 * W * t.kv_elem;
    t.dkv = B * Tl * 2 * W * sizeof(float);
    t.layer_forward = (cp - 1) * t.kv;
    bool full = c->recompute == RECOMPUTE_FULL; /* the backward re-runs the layer's forward, ring and all */
    t.layer_backward = (full ? t.layer_forward : 0) + (cp - 1) * t.kv + cp * t.dkv;
    t.send = t.recv = m * n * (t.layer_forward + t.layer_backward);
    t.calls = m * n * ((full ? 2 : 1) * (cp - 1) + (cp - 1) + cp);
    return t;
}
