/* Theory of the memory timeline (train/measure/timeline.h, docs/MEMORY.md): the
 * step's phases in the engine's order, each with the bytes in use by the
 * same definition the recorder (train/measure/measure_timeline.c)
 * measures, from the config alone; the peak is the first phase with the
 * largest total. It walks this rank's own layout (its tp slice, its pp
 * stage's layers and chunks, its cp positions), its schedule's order of
 * forwards and backwards (include/schedule.h: schedule_op), the saved
 * activations of every micro-batch in flight, and ZeRO's gathered units
 * and buckets as parallel/zero/comm.c posts, waits for and finishes them
 * (a small model of its state: which all_gather and reduce-scatter is in
 * flight, which gathered layer buffer is in use). */
#include "accounting.h"

#include <stdio.h>

#include "layout.h"
#include "schedule.h"
#include "shard.h"
#include "theory_rank_parts.h"
#include "zero_stages.h"

enum { NO_UNIT = -1, BUCKETS = 2, LAYER_BUFFERS = 2 };

/* What a walk of the step needs: the constant part and the sizes of the
 * pieces that come and go, all of this rank's. */
struct pieces {
    double states[MEM_NUM_CATEGORIES], scratch;
    double I, R, S, H, one;   /* ids, a residual entry, a layer's tensors, the head's, one-layer buffers */
    double G[UNIT_LAYER + 1]; /* a gathered unit per kind (stage 3; 0 where the rank has none) */
    double Bk;                /* a reduce-scatter bucket with its ring receive (stages 2, 3) */
    const struct zero_stage *row; /* include/zero_stages.h */
    const struct model_layout *lay;
    bool overlap;
};

static struct pieces pieces_of(const struct config *c, const struct model_layout *lay, struct rank_place place) {
    struct pieces p = {.row = zero_stage_row(c->zero), .overlap = c->overlap, .lay = lay};
    struct state_theory st = theory_trainer_states(c, place);
    for (int i = 0; i < st.n; i++) p.states[st.lines[i].category] += st.lines[i].psi_bytes + st.lines[i].padding_bytes;
    p.scratch = theory_trainer_scratch(c, place).persistent;
    /* the slot's pieces as model/gpt.c allocates them (theory_acts.c): the
     * rank's T/cp positions, its tp slice, with sp its T/tp of the stream */
    struct activation_theory a = theory_trainer_activations(c, place);
    struct config local = theory_at_rank_positions(c, place);
    bool sp = theory_sp_on(c, place);
    double B = c->micro_batch, T = local.seq_len, BTs = sp ? B * (double)(local.seq_len / lay->rank.tp) : B * T;
    p.I = lay->rank.has_embed ? sizeof(int32_t) * B * T : 0;
    p.R = c->d_model * (double)dtype_size(c->act_dtype) * BTs;
    p.S = a.per_layer - p.R;          /* per_layer holds the layer's input entry besides its tensors */
    p.H = lay->rank.has_head ? a.head - p.R - p.I : 0; /* head: the stage's output, the head's, the ids */
    p.one = a.recompute_buffers;
    struct shard_layout sh;
    shard_layout_init(&sh, lay, place.dp, place.dp_rank);
    double w_p = (double)dtype_size(c->param_dtype), w_g = (double)dtype_size(c->grad_dtype);
    if (p.row->params == PARAMS_ALL_GATHER_IN_USE)
        for (int k = 0; k <= UNIT_LAYER; k++) {
            int u = layout_kind_unit(lay, (enum unit_kind)k);
            p.G[k] = u >= 0 ? (double)shard_unit_padded(&sh, u) * w_p : 0;
        }
    if (p.row->grads == GRADS_REDUCE_SCATTER_UNIT) p.Bk = (double)shard_bucket_elems(&sh) * w_g;
    return p;
}

/* The micro-batches in flight on this rank: forward begun, backward not
 * ended, by chunk (a slot of that chunk each). */
struct in_flight {
    int mb[GPT_MAX_SLOTS], chunk[GPT_MAX_SLOTS];
    int n;
};

struct walk {
    const struct pieces *p;
    /* parallel/zero/comm.c's state: the all_gather in flight per kind
     * (unit, buffer), the gathered layer buffer in use, the reduce-scatter
     * in flight per bucket, the next bucket */
    int gather_unit[UNIT_LAYER + 1], gather_buf[UNIT_LAYER + 1], layer_in_use;
    int scatter_unit[BUCKETS], next_bucket;
    struct in_flight live;
    int mb, chunk;  /* the operation being walked */
    int index;
    struct timeline_theory *out;
    struct timeline_phase *phases; /* NULL, or room for TIMELINE_MAX_PHASES */
};

static bool stage3(const struct walk *w) { return w->p->row->params == PARAMS_ALL_GATHER_IN_USE; }
static enum unit_kind kind_of(const struct walk *w, int u) { return layout_unit(w->p->lay, u).kind; }

/* zero_all_gather_ahead: with overlap, the next unit's all_gather posted
 * into the free buffer of its kind, unless one of its kind is in flight. */
static void ahead(struct walk *w, int u) {
    if (u < 0 || !stage3(w) || !w->p->overlap) return;
    enum unit_kind k = kind_of(w, u);
    if (w->gather_unit[k] >= 0) return;
    w->gather_unit[k] = u;
    w->gather_buf[k] = k == UNIT_LAYER ? 1 - w->layer_in_use : 0;
}

/* zero_all_gather: unit u gathered and waited for (one posted ahead for
 * another unit is finished unused); a layer's buffer is then in use. */
static void gather(struct walk *w, int u) {
    if (!stage3(w)) return;
    enum unit_kind k = kind_of(w, u);
    if (w->gather_unit[k] != u) w->gather_buf[k] = k == UNIT_LAYER ? w->layer_in_use : 0;
    w->gather_unit[k] = NO_UNIT;
    if (k == UNIT_LAYER) w->layer_in_use = w->gather_buf[k];
}

/* zero_reduce_scatter: ZeRO-2/3 post unit u's reduce-scatter into the next
 * bucket, after finishing the one still in it; without overlap it is
 * finished at once. */
static void reduce_scatter(struct walk *w, int u) {
    if (w->p->row->grads != GRADS_REDUCE_SCATTER_UNIT) return;
    int b = w->next_bucket;
    w->scatter_unit[b] = w->p->overlap ? u : NO_UNIT;
    if (w->p->overlap) w->next_bucket = 1 - b;
}

/* Bytes of the saved activations of chunk c's slot, full. */
static double slot_full(const struct pieces *p, int c) {
    const struct rank_desc *r = &p->lay->rank;
    int n = r->chunk[c].l1 - r->chunk[c].l0;
    double I = c == 0 ? p->I : 0, H = c == r->n_chunks - 1 ? p->H : 0;
    return I + (n + 1) * p->R + n * p->S + H;
}

/* Activations in use at a unit's phase: every other micro-batch in flight
 * holds its full slot; the phase's own slot is filled up to the phase
 * (layer i's input is residual entry i; the forward also writes its
 * output), with the one-layer recompute buffers during a layer. */
static double activations_in_use(const struct walk *w, enum phase_kind kind, int unit_kind, int layer) {
    const struct pieces *p = w->p;
    double others = 0;
    for (int k = 0; k < w->live.n; k++)
        if (w->live.mb[k] != w->mb || w->live.chunk[k] != w->chunk) others += slot_full(p, w->live.chunk[k]);
    bool fwd = kind == PHASE_FORWARD;
    if (unit_kind == UNIT_EMBED) return others + (fwd ? p->I + p->R : p->I); /* its backward reads the ids only */
    if (unit_kind == UNIT_HEAD) return others + slot_full(p, w->chunk);
    int i = layer - p->lay->rank.chunk[w->chunk].l0; /* the layer within its chunk */
    double I = w->chunk == 0 ? p->I : 0;
    return others + I + (i + (fwd ? 2 : 1)) * p->R + (i + 1) * p->S + p->one;
}

/* Communication buffers in use at a phase (train/measure/timeline.h), each
 * counted once: the unit's gathered params while it reads them, the
 * embedding's while it or a tied head reads it (timeline_embed_in_use),
 * every all_gather and reduce-scatter in flight, and the bucket a
 * backward's gradient went through. */
static void comm_in_use(const struct walk *w, enum phase_kind kind, int unit_kind, double *gathered,
                        double *buckets) {
    const struct pieces *p = w->p;
    bool in_use[UNIT_LAYER + 1][LAYER_BUFFERS] = {{false}}, bucket[BUCKETS] = {false};
    bool unit_phase = kind == PHASE_FORWARD || kind == PHASE_BACKWARD;
    if (stage3(w)) {
        if (unit_phase && !(kind == PHASE_BACKWARD && unit_kind == UNIT_EMBED))
            in_use[unit_kind][unit_kind == UNIT_LAYER ? w->layer_in_use : 0] = true;
        if (timeline_embed_in_use(shape_tied(&p->lay->shape), kind, unit_kind)) in_use[UNIT_EMBED][0] = true;
        for (int k = 0; k <= UNIT_LAYER; k++)
            if (w->gather_unit[k] >= 0) in_use[k][w->gather_buf[k]] = true;
    }
    for (int b = 0; b < BUCKETS; b++) bucket[b] = w->scatter_unit[b] >= 0;
    if (kind == PHASE_BACKWARD && p->row->grads == GRADS_REDUCE_SCATTER_UNIT)
        bucket[p->overlap ? 1 - w->next_bucket : 0] = true;
    *gathered = *buckets = 0;
    for (int k = 0; k <= UNIT_LAYER; k++)
        for (int i = 0; i < LAYER_BUFFERS; i++) *gathered += in_use[k][i] ? p->G[k] : 0;
    for (int b = 0; b < BUCKETS; b++) *buckets += bucket[b] ? p->Bk : 0;
}

/* One phase's bytes, at its boundary. */
static void phase(struct walk *w, enum phase_kind kind, int unit, int layer) {
    const struct pieces *p = w->p;
    int unit_kind = unit >= 0 ? (int)kind_of(w, unit) : -1;
    struct timeline_phase ph = timeline_phase_at(kind, unit, unit_kind, layer, w->mb);
    ph.index = w->index++;
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) ph.bytes[c] = p->states[c];
    ph.bytes[MEM_SCRATCH] = p->scratch;
    double g = 0, b = 0;
    comm_in_use(w, kind, unit_kind, &g, &b);
    ph.bytes[MEM_ACTIVATIONS] = unit >= 0 ? activations_in_use(w, kind, unit_kind, layer) : 0;
    ph.bytes[MEM_COMM] = g + b;
    if (timeline_total(&ph) > timeline_total(&w->out->peak)) {
        w->out->peak = ph;
        w->out->gathered = g;
        w->out->buckets = b;
    }
    if (w->phases && w->out->phases < TIMELINE_MAX_PHASES) w->phases[w->out->phases] = ph;
    w->out->phases++;
}

/* The units chunk c runs: its layers, the embedding (chunk 0 of the first
 * stage), the head (the last chunk of the last stage); parallel/engine.c. */
struct chunk_units {
    int l0, l1, eu, hu;
};

static struct chunk_units chunk_units(const struct model_layout *lay, int c) {
    const struct rank_desc *r = &lay->rank;
    return (struct chunk_units){.l0 = r->chunk[c].l0, .l1 = r->chunk[c].l1,
                                .eu = c == 0 ? layout_embed_unit(lay) : NO_UNIT,
                                .hu = c == r->n_chunks - 1 ? layout_head_unit(lay) : NO_UNIT};
}

/* engine_forward's collectives and phases, in its order. */
static void forward(struct walk *w, struct chunk_units cu) {
    const struct model_layout *lay = w->p->lay;
    if (w->live.n < GPT_MAX_SLOTS) /* the trainer refuses more slots than that */
        w->live.mb[w->live.n] = w->mb, w->live.chunk[w->live.n] = w->chunk, w->live.n++;
    int first = cu.l0 < cu.l1 ? layout_layer_unit(lay, cu.l0) : cu.hu;
    if (cu.eu >= 0) gather(w, cu.eu);
    ahead(w, first);
    if (cu.eu >= 0) phase(w, PHASE_FORWARD, cu.eu, -1);
    for (int l = cu.l0; l < cu.l1; l++) {
        gather(w, layout_layer_unit(lay, l));
        ahead(w, l + 1 < cu.l1 ? layout_layer_unit(lay, l + 1) : cu.hu);
        phase(w, PHASE_FORWARD, layout_layer_unit(lay, l), l);
    }
    if (cu.hu < 0) return;
    gather(w, cu.hu);
    phase(w, PHASE_FORWARD, cu.hu, -1);
}

/* engine_backward's; the micro-batch's slot is free after its last phase. */
static void backward(struct walk *w, struct chunk_units cu) {
    const struct model_layout *lay = w->p->lay;
    int last = cu.l0 < cu.l1 ? layout_layer_unit(lay, cu.l1 - 1) : NO_UNIT;
    if (cu.hu >= 0) {
        int teu = shape_tied(&lay->shape) ? cu.eu : NO_UNIT; /* the tied head's wte, the embedding's */
        ahead(w, cu.hu);
        ahead(w, teu);
        gather(w, cu.hu);
        if (teu >= 0) gather(w, teu);
        ahead(w, last);
        reduce_scatter(w, cu.hu);
        phase(w, PHASE_BACKWARD, cu.hu, -1);
    } else {
        ahead(w, last);
    }
    for (int l = cu.l1 - 1; l >= cu.l0; l--) {
        int u = layout_layer_unit(lay, l);
        gather(w, u);
        ahead(w, l > cu.l0 ? layout_layer_unit(lay, l - 1) : NO_UNIT);
        reduce_scatter(w, u);
        phase(w, PHASE_BACKWARD, u, l);
    }
    if (cu.eu >= 0) {
        reduce_scatter(w, cu.eu);
        phase(w, PHASE_BACKWARD, cu.eu, -1);
    }
    for (int k = 0; k < w->live.n; k++)
        if (w->live.mb[k] == w->mb && w->live.chunk[k] == w->chunk) {
            w->live.mb[k] = w->live.mb[w->live.n - 1], w->live.chunk[k] = w->live.chunk[w->live.n - 1];
            w->live.n--;
            break;
        }
}

struct timeline_theory theory_trainer_timeline_peak(const struct config *c, struct rank_place place,
                                                    struct timeline_phase *phases) {
    struct model_layout lay;
    bool own = rank_layout(c, place, &lay) == 0; /* else the whole model stands in */
    if (!own) layout_init_whole(&lay, trainer_model_shape(c));
    struct pieces p = pieces_of(c, &lay, place);
    int v = lay.rank.n_chunks, m = c->grad_accum;
    /* exact where the recorder's definition is this walk's: it counts an
     * interleaved rank's slots by its first chunk (measure_timeline.c) */
    struct timeline_theory t = {.peak = {.kind = -1, .index = -1}, .exact = own};
    struct walk w = {.p = &p, .out = &t, .phases = phases, .gather_unit = {NO_UNIT, NO_UNIT, NO_UNIT},
                     .scatter_unit = {NO_UNIT, NO_UNIT}};
    /* a layout or schedule the trainer refuses: the whole model's order stands in */
    enum schedule_kind sk = c->schedule;
    int pp = own ? place.pp : 1, stage = own ? place.pp_rank : 0;
    if (!schedule_runs(sk, pp, m, v)) t.exact = false, sk = SCHEDULE_1F1B, pp = 1, stage = 0, v = 1;
    for (int i = 0; i < 2 * m * v; i++) {
        struct pipe_op op = schedule_op(sk, pp, stage, m, v, i);
        w.mb = op.micro_batch, w.chunk = op.chunk;
        if (op.kind == PIPE_FORWARD) forward(&w, chunk_units(&lay, op.chunk));
        else backward(&w, chunk_units(&lay, op.chunk));
    }
    w.mb = -1;
    phase(&w, PHASE_REDUCE_GRADS, -1, -1); /* before the reduction: what is in flight is still held */
    w.scatter_unit[0] = w.scatter_unit[1] = NO_UNIT;
    phase(&w, PHASE_UPDATE, -1, -1);
    if (p.row->params == PARAMS_ALL_GATHER_UPDATED) phase(&w, PHASE_GATHER_PARAMS, -1, -1);
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++)
        if (k != MEM_SCRATCH && k != MEM_ACTIVATIONS && k != MEM_COMM) t.states += t.peak.bytes[k];
    t.scratch = t.peak.bytes[MEM_SCRATCH];
    t.activations = t.peak.bytes[MEM_ACTIVATIONS];
    return t;
}
