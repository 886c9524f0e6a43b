/* Theory of the memory timeline (train/measure/timeline.h, docs/MEMORY.md): the
 * step's phases in the engine's order, each with the bytes in use by the
 * same definition the recorder measures, from the config alone; the peak
 * is the first phase with the largest total. It walks one stage holding
 * the whole model (pp = tp = 1), micro-batches in sequence in one slot,
 * which is the 1F1B schedule on one stage; other layouts are not walked. */
#include "accounting.h"

#include <stdio.h>

#include "layout.h"
#include "shard.h"
#include "zero_stages.h"

/* What a walk of the step needs: the constant part and the sizes of the
 * pieces that come and go. */
struct pieces {
    double states[MEM_NUM_CATEGORIES], scratch;
    double I, R, S, H, one;   /* ids, a residual entry, a layer's tensors, the head's, one-layer buffers */
    double G[UNIT_LAYER + 1]; /* a gathered unit per kind (stage 3) */
    double Bk;                /* a reduce-scatter bucket with its ring receive (stages 2, 3) */
    const struct zero_stage *row; /* include/zero_stages.h */
    int L, k;
    bool overlap;
};

static struct pieces pieces_of(const struct config *c, const struct model_layout *lay, struct rank_place place) {
    int N = place.dp, rank = place.dp_rank;
    struct pieces p = {.L = c->n_layer, .row = zero_stage_row(c->zero), .k = c->grad_accum, .overlap = c->overlap};
    struct state_theory st = theory_trainer_states(c, place);
    for (int i = 0; i < st.n; i++) p.states[st.lines[i].category] += st.lines[i].psi_bytes + st.lines[i].padding_bytes;
    p.scratch = theory_trainer_scratch(c, place).persistent;
    /* cp: the rank's T/cp positions of each sequence */
    double B = c->micro_batch, T = c->seq_len / rank_place_cp(place), C = c->d_model, NH = c->n_head, BT = B * T;
    double e = (double)dtype_size(c->act_dtype), stats = 4 * 4 * BT; /* four fp32 LayerNorm statistics */
    p.I = 4 * BT;
    p.R = C * e * BT;
    /* a layer's tensors besides its input: ln1, qkv, atty, res2, ln2, fch, gelu = 15 C, probabilities NH T;
     * flash: the lse, NH per token, fp32 (in full's fp32 layer), and selective is none (include/gpt.h) */
    bool flash = c->attention == ATTENTION_FLASH;
    enum recompute_mode mode = flash && c->recompute == RECOMPUTE_SELECTIVE ? RECOMPUTE_NONE : c->recompute;
    switch (mode) {
    case RECOMPUTE_NONE: p.S = (15 * C + (flash ? 0 : NH * T)) * e * BT + stats + (flash ? NH * 4 * BT : 0); break;
    case RECOMPUTE_SELECTIVE: p.S = 15 * C * e * BT + stats, p.one = NH * T * 4 * BT; break;
    case RECOMPUTE_FULL: p.one = (15 * C + NH * (flash ? 1 : T)) * 4 * BT + stats; break;
    }
    /* final LN output (e), its two fp32 stats, the logits over Vp (fp32, or bf16 on a GPU's bf16 data path:
     * theory_trainer_logits_bf16), fp32 losses, int32 targets */
    double le = theory_trainer_logits_bf16(c, place) ? sizeof(bf16) : sizeof(float);
    p.H = (C * e + 2 * 4 + le * lay->shape.Vp + 4 + 4) * BT;
    struct shard_layout sh;
    shard_layout_init(&sh, lay, N, rank);
    double w_p = (double)dtype_size(c->param_dtype), w_g = (double)dtype_size(c->grad_dtype);
    if (p.row->params == PARAMS_ALL_GATHER_IN_USE) {
        p.G[UNIT_EMBED] = (double)shard_unit_padded(&sh, layout_embed_unit(lay)) * w_p;
        p.G[UNIT_HEAD] = (double)shard_unit_padded(&sh, layout_head_unit(lay)) * w_p;
        p.G[UNIT_LAYER] = p.L > 0 ? (double)shard_unit_padded(&sh, layout_layer_unit(lay, 0)) * w_p : 0;
    }
    if (p.row->grads == GRADS_REDUCE_SCATTER_UNIT) p.Bk = (double)shard_bucket_elems(&sh) * w_g;
    return p;
}

/* ZeRO-3: gathered units in use during a unit's phase. The unit's own, the
 * embedding's through the forward and during the head's backward, and with
 * overlap the next unit's, whose all-gather is in flight. */
static double gathered_in_use(const struct pieces *p, enum phase_kind kind, int unit_kind, int i) {
    if (p->row->params != PARAMS_ALL_GATHER_IN_USE) return 0;
    const double *G = p->G;
    bool ov = p->overlap;
    double next_fwd = i + 1 < p->L ? G[UNIT_LAYER] : G[UNIT_HEAD]; /* after layer i (or the embedding: i = -1) */
    if (kind == PHASE_FORWARD) {
        if (unit_kind == UNIT_EMBED) return G[UNIT_EMBED] + (ov ? next_fwd : 0);
        if (unit_kind == UNIT_HEAD) return G[UNIT_EMBED] + G[UNIT_HEAD];
        return G[UNIT_EMBED] + G[UNIT_LAYER] + (ov ? next_fwd : 0);
    }
    if (unit_kind == UNIT_HEAD) return G[UNIT_HEAD] + G[UNIT_EMBED] + (ov && p->L > 0 ? G[UNIT_LAYER] : 0);
    if (unit_kind == UNIT_LAYER) return G[UNIT_LAYER] + (ov && i > 0 ? G[UNIT_LAYER] : 0);
    return 0; /* the embedding's backward reads no weights */
}

static double activations_in_use(const struct pieces *p, enum phase_kind kind, int unit_kind, int i) {
    bool fwd = kind == PHASE_FORWARD;
    if (kind != PHASE_FORWARD && kind != PHASE_BACKWARD) return 0;
    if (unit_kind == UNIT_EMBED) return fwd ? p->I + p->R : p->I;
    if (unit_kind == UNIT_HEAD) return p->I + (p->L + 1) * p->R + p->L * p->S + p->H;
    return p->I + (i + (fwd ? 2 : 1)) * p->R + (i + 1) * p->S + p->one;
}

struct walk {
    const struct pieces *p;
    const struct model_layout *lay;
    int pending;   /* buckets whose reduce-scatter is in flight */
    int index;
    struct timeline_theory *out;
    struct timeline_phase *phases; /* NULL, or room for TIMELINE_MAX_PHASES */
};

/* One phase: the buckets' bookkeeping (a unit's backward fills one, which
 * with overlap stays in flight beside the other's), then its bytes. */
static void phase(struct walk *w, enum phase_kind kind, int unit, int unit_kind, int layer, int mb) {
    const struct pieces *p = w->p;
    int buckets = w->pending;
    if (kind == PHASE_BACKWARD && p->row->grads == GRADS_REDUCE_SCATTER_UNIT) {
        buckets = p->overlap ? (w->pending < 2 ? w->pending + 1 : 2) : 1;
        w->pending = p->overlap ? buckets : 0;
    }
    if (kind == PHASE_REDUCE_GRADS) w->pending = 0; /* finished by the reduction; in use during it */
    struct timeline_phase ph = timeline_phase_at(kind, unit, unit_kind, layer, mb);
    ph.index = w->index++;
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) ph.bytes[c] = p->states[c];
    ph.bytes[MEM_SCRATCH] = p->scratch;
    double g = gathered_in_use(p, kind, unit_kind, layer), b = buckets * p->Bk;
    ph.bytes[MEM_ACTIVATIONS] = activations_in_use(p, kind, unit_kind, layer);
    ph.bytes[MEM_COMM] = g + b;
    if (timeline_total(&ph) > timeline_total(&w->out->peak)) {
        w->out->peak = ph;
        w->out->gathered = g;
        w->out->buckets = b;
    }
    if (w->phases && w->out->phases < TIMELINE_MAX_PHASES) w->phases[w->out->phases] = ph;
    w->out->phases++;
}

struct timeline_theory theory_trainer_timeline_peak(const struct config *c, struct rank_place place,
                                                    struct timeline_phase *phases) {
    struct model_layout lay;
    layout_init_whole(&lay, (struct model_shape){.L = c->n_layer, .C = c->d_model, .NH = c->n_head,
                                                .T = c->seq_len, .V = c->vocab_size});
    struct pieces p = pieces_of(c, &lay, place);
    struct timeline_theory t = {.peak = {.kind = -1, .index = -1}, .exact = place.pp == 1 && place.tp == 1};
    struct walk w = {.p = &p, .lay = &lay, .out = &t, .phases = phases};
    int eu = layout_embed_unit(&lay), hu = layout_head_unit(&lay);
    for (int mb = 0; mb < p.k; mb++) { /* 0-based, as the trace and the schedule number them */
        phase(&w, PHASE_FORWARD, eu, UNIT_EMBED, -1, mb);
        for (int l = 0; l < p.L; l++) phase(&w, PHASE_FORWARD, layout_layer_unit(&lay, l), UNIT_LAYER, l, mb);
        phase(&w, PHASE_FORWARD, hu, UNIT_HEAD, -1, mb);
        phase(&w, PHASE_BACKWARD, hu, UNIT_HEAD, -1, mb);
        for (int l = p.L - 1; l >= 0; l--) phase(&w, PHASE_BACKWARD, layout_layer_unit(&lay, l), UNIT_LAYER, l, mb);
        phase(&w, PHASE_BACKWARD, eu, UNIT_EMBED, -1, mb);
    }
    phase(&w, PHASE_REDUCE_GRADS, -1, -1, -1, 0);
    phase(&w, PHASE_UPDATE, -1, -1, -1, 0);
    if (p.row->params == PARAMS_ALL_GATHER_UPDATED) phase(&w, PHASE_GATHER_PARAMS, -1, -1, -1, 0);
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++)
        if (k != MEM_SCRATCH && k != MEM_ACTIVATIONS && k != MEM_COMM) t.states += t.peak.bytes[k];
    t.scratch = t.peak.bytes[MEM_SCRATCH];
    t.activations = t.peak.bytes[MEM_ACTIVATIONS];
    return t;
}
