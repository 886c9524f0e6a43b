/* Recording the memory timeline (train/measure/timeline.h): at each phase
 * boundary, the bytes in use, read off the engine: which gathered buffers
 * hold a unit being read or an all-gather in flight, which buckets a
 * reduce-scatter, how many layers' saved tensors the step still needs; each
 * buffer counted at its tracked (allocated) size. */
#include "timeline.h"

#include <stdio.h>
#include <string.h>

#include "engine.h"

static const char *const kind_names[PHASE_NUM_KINDS] = {
    [PHASE_FORWARD] = "forward", [PHASE_BACKWARD] = "backward", [PHASE_REDUCE_GRADS] = "optimizer: reduce grads",
    [PHASE_UPDATE] = "optimizer: update", [PHASE_GATHER_PARAMS] = "optimizer: all-gather params"};

static const char *const unit_kind_names[] = {[UNIT_EMBED] = "embedding", [UNIT_HEAD] = "head",
                                              [UNIT_LAYER] = "layer"};

double timeline_total(const struct timeline_phase *p) {
    double s = 0;
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) s += p->bytes[c];
    return s;
}

void timeline_phase_name(const struct timeline_phase *p, char *buf, size_t len) {
    if (p->unit < 0) {
        snprintf(buf, len, "%s", kind_names[p->kind]);
        return;
    }
    if (p->unit_kind == UNIT_LAYER)
        snprintf(buf, len, "micro-batch %d %s layer %d", p->micro_batch, kind_names[p->kind], p->layer);
    else snprintf(buf, len, "micro-batch %d %s %s", p->micro_batch, kind_names[p->kind], unit_kind_names[p->unit_kind]);
}

struct timeline_phase timeline_phase_at(enum phase_kind kind, int unit, int unit_kind, int layer, int micro_batch) {
    return (struct timeline_phase){.kind = kind, .unit = unit, .unit_kind = unit_kind, .layer = layer,
                                   .micro_batch = unit < 0 ? -1 : micro_batch};
}

/* The tracked size of the buffer at p (NULL or untracked: 0); *cat its category. */
static size_t tracked(const struct mem_tracker *m, const void *p, enum mem_category *cat) {
    for (int i = 0; p && i < m->n_records; i++)
        if (m->records[i].ptr == p) {
            if (cat) *cat = m->records[i].category;
            return m->records[i].bytes;
        }
    return 0;
}

/* One slot's part of a per-slot buffer (slot 0 points at its start). */
static double per_slot(const struct engine *e, const void *p) {
    return (double)tracked(e->mem, p, NULL) / e->model.n_slots;
}

/* A one-layer buffer counted as an activation only where it is one (the
 * bf16 working copy of a layer is scratch, counted whole anyway). */
static double one_layer(const struct engine *e, const void *p) {
    enum mem_category cat = MEM_SCRATCH;
    size_t b = tracked(e->mem, p, &cat);
    return cat == MEM_ACTIVATIONS ? (double)b : 0.0;
}

/* Saved activations in use during a phase: the phase's own micro-batch's
 * slot, filled up to the phase, and the full slot of each other
 * micro-batch in flight on this stage (`others`: forward begun, backward
 * not ended; 1F1B and GPipe keep several, the sequential schedule none). A
 * slot holds: token ids I (first stage), residual-stream entries R (layer
 * i's input is entry i), the tensors S of each layer, the head's H. Under
 * the interleaved schedule the walk counts slot 0's chunk. */
static double activations_in_use(const struct engine *e, const struct timeline_phase *p, int others) {
    const struct gpt *m = &e->model;
    const struct gpt_slot *s = &m->slot[0];
    int n = s->n_layers; /* slot 0's chunk (the one chunk but for the interleaved schedule) */
    double I = per_slot(e, s->inputs), R = per_slot(e, s->resid) / (n + 1);
    double S = n > 0 ? (per_slot(e, s->layer_acts) + per_slot(e, s->layer_stats) + per_slot(e, s->layer_lse)) / n
                     : 0.0;
    double H = per_slot(e, s->lnf) + per_slot(e, s->lnf_stats) + per_slot(e, s->logits) + per_slot(e, s->losses) +
               per_slot(e, s->targets);
    double one = one_layer(e, m->work_acts) + one_layer(e, m->full_stats) + one_layer(e, m->att_recompute);
    int i = p->layer - s->l0; /* the layer within slot 0's chunk */
    bool fwd = p->kind == PHASE_FORWARD;
    if (p->kind != PHASE_FORWARD && p->kind != PHASE_BACKWARD) return 0.0;
    double full = I + (n + 1) * R + n * S + H, in_flight = others * full;
    switch (p->unit_kind) {
    case UNIT_EMBED: return in_flight + (fwd ? I + R : I); /* its backward reads the token ids only */
    case UNIT_HEAD: return in_flight + full;
    default: /* a layer: its input, its tensors; the forward also writes its output */
        return in_flight + I + (i + (fwd ? 2 : 1)) * R + (i + 1) * S + one;
    }
}

/* The chunk of the rank that runs unit u (layout_unit's layer, or the
 * embedding's chunk 0, the head's last). */
static int chunk_of(const struct model_layout *lay, const struct timeline_phase *p) {
    const struct rank_desc *r = &lay->rank;
    if (p->unit_kind == UNIT_EMBED) return 0;
    if (p->unit_kind == UNIT_HEAD) return r->n_chunks - 1;
    for (int c = 0; c < r->n_chunks; c++)
        if (r->chunk[c].l0 <= p->layer && p->layer < r->chunk[c].l1) return c;
    return 0;
}

/* Several chunks (interleaved): a slot of chunk c holds c's layers, the
 * token ids only in chunk 0, the head's tensors only in the last chunk
 * (model/gpt.c's per_slot); per-layer and per-slot sizes from the tracked
 * totals over the slots that hold them. The phase's own slot is filled up
 * to the phase, every other pass in flight holds its chunk's full slot. */
static double chunk_activations(const struct mem_timeline *t, const struct timeline_phase *p) {
    const struct engine *e = t->engine;
    const struct gpt *m = &e->model;
    const struct gpt_slot *s0 = &m->slot[0];
    int v = e->lay.rank.n_chunks, layers = 0, entries = 0;
    for (int s = 0; s < m->n_slots; s++) layers += m->slot[s].n_layers, entries += m->slot[s].n_layers + 1;
    double R = entries ? (double)tracked(e->mem, s0->resid, NULL) / entries : 0.0;
    double S = layers ? (double)(tracked(e->mem, s0->layer_acts, NULL) + tracked(e->mem, s0->layer_stats, NULL) +
                                 tracked(e->mem, s0->layer_lse, NULL)) / layers
                      : 0.0;
    double I = (double)tracked(e->mem, s0->inputs, NULL) / m->chunk_slots[0];
    double H = (double)(tracked(e->mem, s0->lnf, NULL) + tracked(e->mem, s0->lnf_stats, NULL) +
                        tracked(e->mem, s0->logits, NULL) + tracked(e->mem, s0->losses, NULL) +
                        tracked(e->mem, s0->targets, NULL)) / m->chunk_slots[v - 1];
    double one = one_layer(e, m->work_acts) + one_layer(e, m->full_stats) + one_layer(e, m->att_recompute);
    int c = chunk_of(&e->lay, p);
    double others = 0;
    for (int k = 0; k < t->n_live; k++) {
        int ck = t->live_chunk[k], n = e->lay.rank.chunk[ck].l1 - e->lay.rank.chunk[ck].l0;
        if (t->live_mb[k] != p->micro_batch || ck != c)
            others += (ck == 0 ? I : 0) + (n + 1) * R + n * S + (ck == v - 1 ? H : 0);
    }
    int n = e->lay.rank.chunk[c].l1 - e->lay.rank.chunk[c].l0, i = p->layer - e->lay.rank.chunk[c].l0;
    double Ic = c == 0 ? I : 0, Hc = c == v - 1 ? H : 0;
    bool fwd = p->kind == PHASE_FORWARD;
    switch (p->unit_kind) {
    case UNIT_EMBED: return others + (fwd ? I + R : I);
    case UNIT_HEAD: return others + Ic + (n + 1) * R + n * S + Hc;
    default: return others + Ic + (i + (fwd ? 2 : 1)) * R + (i + 1) * S + one;
    }
}

/* A chunk's pass ends at its last backward unit: the embedding (chunk 0
 * of the first stage), else its first layer, else the head. */
static bool ends_pass(const struct model_layout *lay, const struct timeline_phase *p, int c) {
    const struct layer_range *r = &lay->rank.chunk[c];
    if (c == 0 && lay->rank.has_embed) return p->unit_kind == UNIT_EMBED;
    if (r->l0 < r->l1) return p->unit_kind == UNIT_LAYER && p->layer == r->l0;
    return p->unit_kind == UNIT_HEAD;
}

static void chunk_pass(struct mem_timeline *t, const struct timeline_phase *p, bool after) {
    const struct model_layout *lay = &t->engine->lay;
    int c = chunk_of(lay, p);
    if (!after && p->kind == PHASE_FORWARD && (p->micro_batch != t->forward_mb || c != t->forward_chunk)) {
        t->forward_mb = p->micro_batch, t->forward_chunk = c;
        if (t->n_live < TIMELINE_MAX_LIVE) t->live_mb[t->n_live] = p->micro_batch, t->live_chunk[t->n_live++] = c;
    }
    if (after && p->kind == PHASE_BACKWARD && ends_pass(lay, p, c))
        for (int k = 0; k < t->n_live; k++)
            if (t->live_mb[k] == p->micro_batch && t->live_chunk[k] == c) {
                t->live_mb[k] = t->live_mb[--t->n_live], t->live_chunk[k] = t->live_chunk[t->n_live];
                break;
            }
}

/* Adds buf to the set (once). */
static void add(const void **set, int *n, const void *buf) {
    if (!buf) return;
    for (int i = 0; i < *n; i++)
        if (set[i] == buf) return;
    set[(*n)++] = buf;
}

static const void *gathered(const struct zero *z, int kind, int i) {
    if (kind == UNIT_LAYER && i == 1) return z->gathered_layer2;
    return z->gathered[kind];
}

/* Communication buffers in use during a phase (see train/measure/timeline.h). */
static double comm_in_use(const struct engine *e, const struct timeline_phase *p) {
    const struct zero *z = &e->z;
    const void *set[8];
    int n = 0;
    bool unit_phase = p->kind == PHASE_FORWARD || p->kind == PHASE_BACKWARD;
    if (z->row->params == PARAMS_ALL_GATHER_IN_USE) {
        if (unit_phase && !(p->kind == PHASE_BACKWARD && p->unit_kind == UNIT_EMBED)) /* the unit's params, read */
            add(set, &n, gathered(z, p->unit_kind, p->unit_kind == UNIT_LAYER ? z->layer_in_use : 0));
        if (timeline_embed_in_use(shape_tied(&e->lay.shape), (enum phase_kind)p->kind, p->unit_kind))
            add(set, &n, z->gathered[UNIT_EMBED]);
        for (int k = 0; k <= UNIT_LAYER; k++)
            if (z->gather[k].unit >= 0) add(set, &n, gathered(z, k, z->gather[k].buf)); /* in flight */
    }
    for (int b = 0; b < 2; b++)
        if (z->scatter[b].unit >= 0) add(set, &n, z->bucket[b]); /* a reduce-scatter in flight */
    if (p->kind == PHASE_BACKWARD && z->o.stage >= 2) /* the bucket this unit's gradient went through */
        add(set, &n, z->bucket[z->o.overlap ? 1 - z->next_bucket : 0]);
    double bytes = 0;
    for (int i = 0; i < n; i++) bytes += (double)tracked(e->mem, set[i], NULL);
    return bytes;
}

static void record(struct mem_timeline *t, const struct timeline_phase *p) {
    if (timeline_total(p) > timeline_total(&t->peak)) t->peak = *p;
    if (t->n < TIMELINE_MAX_PHASES) t->phase[t->n++] = *p;
    else t->dropped++;
}

/* The unit whose backward is a micro-batch's last on this rank: the
 * embedding, else the first layer (of the first chunk), else the head. */
static int last_backward_unit(const struct model_layout *lay) {
    if (lay->rank.has_embed) return layout_embed_unit(lay);
    int first = rank_layer_at(&lay->rank, 0);
    return first >= 0 ? layout_layer_unit(lay, first) : layout_head_unit(lay);
}

/* A phase at this point of the step, its states and scratch as they are
 * live now (whole); the caller fills activations and comm. */
static struct timeline_phase phase_now(const struct mem_timeline *t, enum phase_kind kind, int unit, int micro_batch) {
    const struct engine *e = t->engine;
    int unit_kind = -1, layer = -1;
    if (unit >= 0) {
        struct unit_info ui = layout_unit(&e->lay, unit);
        unit_kind = (int)ui.kind;
        layer = ui.layer;
    }
    struct timeline_phase p = timeline_phase_at(kind, unit, unit_kind, layer, micro_batch);
    p.index = t->n + t->dropped;
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) p.bytes[c] = (double)e->mem->live[c];
    return p;
}

/* at() for a rank of several chunks (interleaved). */
static void chunks_at(struct mem_timeline *t, enum phase_kind kind, int unit, int micro_batch) {
    const struct engine *e = t->engine;
    struct timeline_phase p = phase_now(t, kind, unit, micro_batch);
    if (unit >= 0) chunk_pass(t, &p, false);
    p.bytes[MEM_ACTIVATIONS] = unit >= 0 ? chunk_activations(t, &p) : 0.0;
    p.bytes[MEM_COMM] = comm_in_use(e, &p);
    record(t, &p);
    if (unit >= 0) chunk_pass(t, &p, true);
}

static void at(void *ctx, enum phase_kind kind, int unit, int micro_batch) {
    struct mem_timeline *t = ctx;
    if (!t->active) return;
    const struct engine *e = t->engine;
    if (e->lay.rank.n_chunks > 1) {
        chunks_at(t, kind, unit, micro_batch);
        return;
    }
    /* a micro-batch's forward begins at its first unit's phase */
    if (kind == PHASE_FORWARD && micro_batch != t->forward_mb) t->started++, t->forward_mb = micro_batch;
    struct timeline_phase p = phase_now(t, kind, unit, micro_batch);
    int others = t->started - t->done - (unit >= 0 ? 1 : 0);
    p.bytes[MEM_ACTIVATIONS] = activations_in_use(e, &p, others > 0 ? others : 0);
    p.bytes[MEM_COMM] = comm_in_use(e, &p);
    record(t, &p);
    /* the micro-batch's last backward here ends it (the hook comes before
     * its slot is reused) */
    if (kind == PHASE_BACKWARD && unit == last_backward_unit(&e->lay)) t->done++;
}

/* The step's points the timeline samples (include/step_hooks.h): it
 * records from a step's start to its optimizer's end. */
static void timeline_see(void *self, const struct step_event *ev) {
    struct mem_timeline *t = self;
    if (ev->at == STEP_BEGINS) timeline_begin_step(t, ev->step);
    else if (ev->at == OPTIMIZER_ENDS) timeline_end_step(t);
    else if (ev->at == PHASE_DONE) at(t, ev->phase, ev->unit, ev->micro_batch);
}

struct step_observer timeline_observer(struct mem_timeline *t, const struct engine *e) {
    t->engine = e;
    return (struct step_observer){.see = timeline_see, .self = t};
}

void timeline_begin_step(struct mem_timeline *t, int step) {
    t->active = true;
    t->step = step;
    t->forward_mb = -1;
    t->started = t->done = 0;
    t->n_live = 0, t->forward_chunk = -1;
    t->n = t->dropped = 0;
    t->peak = (struct timeline_phase){.kind = -1, .index = -1};
}

void timeline_end_step(struct mem_timeline *t) { t->active = false; }
