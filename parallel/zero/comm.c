/* The collectives of a step by the stage's row (include/zero_stages.h):
 * ZeRO-3's all_gather of a unit and its release, ZeRO-2/3's reduce_scatter
 * of a unit's gradient, DDP's all_reduce of gradient buckets, ZeRO-1's
 * reduce_scatter once per step, and the tied embedding's all_reduce over
 * the first and last pipeline stage (last, below). Every collective of the
 * units is posted non-blocking; with overlap off it is waited at once,
 * with overlap on it is waited when its result or its buffer is next
 * needed. Both paths post the same calls on the same buffers in the same
 * order, so their numbers are bitwise equal and only the waiting moves. */
#include <stdio.h>
#include <stdlib.h>

#include "bufops.h"
#include "conversions.h"
#include "zero_parts.h"

static enum unit_kind kind_of(const struct zero *z, int u) { return layout_unit(z->lay, u).kind; }

/* The collective calls between moves and moved carry unit u: the trace
 * tags them with it (an all_gather posted ahead or a late wait runs while
 * the engine works on another unit). */
static void moves(const struct zero *z, int u) { step_hook(z->o.hooks, (struct step_event){.at = UNIT_MOVES, .unit = u}); }
static void moved(const struct zero *z, int u) { step_hook(z->o.hooks, (struct step_event){.at = UNIT_MOVED, .unit = u}); }

/* A wait that fails is a broken group: the MPI table has already reported
 * it (and, by default, ended every rank); say where it happened. */
static void wait_or_report(struct zero *z, struct coll_request r, const char *what) {
    if (z->dp->wait(z->dp, r) != 0)
        fprintf(stderr, "zero: rank %d of %d: waiting for %s failed\n", z->dp->rank, z->dp->size, what);
}

/* ---- DDP's buckets: units in the backward's order (head, layers from
 * the last, embedding: the order the engine finishes them), grouped while
 * they stay contiguous in the grads and within ddp_bucket_bytes. A unit
 * larger than that is a bucket alone. */

static int backward_order(const struct model_layout *lay, int *order) {
    int n = 0;
    if (lay->rank.has_head) order[n++] = layout_head_unit(lay);
    for (int i = rank_layers(&lay->rank) - 1; i >= 0; i--) order[n++] = layout_layer_unit(lay, rank_layer_at(&lay->rank, i));
    if (lay->rank.has_embed) order[n++] = layout_embed_unit(lay);
    return n;
}

static void ddp_buckets_build(struct zero *z, const int *order, int n) {
    size_t cap = z->o.ddp_bucket_bytes / zero_gsize(z);
    for (int i = 0; i < n; i++) {
        int u = order[i];
        size_t lo = shard_padded_offset(&z->sh, u), hi = lo + shard_unit_padded(&z->sh, u);
        struct ddp_bucket *b = z->n_ddp > 0 ? &z->ddp[z->n_ddp - 1] : NULL;
        bool joins = b && (b->lo == hi || b->hi == lo) && (b->hi - b->lo) + (hi - lo) <= cap;
        if (!joins) {
            b = &z->ddp[z->n_ddp++];
            *b = (struct ddp_bucket){.lo = lo, .hi = hi};
        }
        b->lo = lo < b->lo ? lo : b->lo;
        b->hi = hi > b->hi ? hi : b->hi;
        b->units++;
    }
    for (int k = 0; k < z->n_ddp; k++) z->ddp[k].left = z->ddp[k].units;
}

static int ddp_bucket_of(const struct zero *z, int u) {
    size_t at = shard_padded_offset(&z->sh, u);
    for (int k = 0; k < z->n_ddp; k++)
        if (z->ddp[k].lo <= at && at < z->ddp[k].hi) return k;
    return -1;
}

static void ddp_wait_next(struct zero *z) {
    struct ddp_bucket *b = &z->ddp[z->ddp_waited++];
    wait_or_report(z, b->req, "a gradient bucket's all-reduce");
}

/* At most this many buckets in flight: the request table is shared and
 * bounded (COLL_MAX_REQUESTS), and a model may have hundreds of units. */
enum { DDP_MAX_IN_FLIGHT = 8 };

/* Posts bucket k (the next in order), waiting first for the oldest if
 * too many are in flight. */
static void ddp_post(struct zero *z) {
    int k = z->ddp_posted++;
    struct ddp_bucket *b = &z->ddp[k];
    while (k - z->ddp_waited >= DDP_MAX_IN_FLIGHT) ddp_wait_next(z);
    b->req = z->dp->iall_reduce_sum(z->dp, (char *)z->st.grads + b->lo * zero_gsize(z), b->hi - b->lo, z->o.grad_dtype);
    if (!z->o.overlap) ddp_wait_next(z);
}

/* Buckets are posted in their order on every rank (MPI's rule for
 * collectives), each once all its units are done. */
static void ddp_post_ready(struct zero *z) {
    while (z->ddp_posted < z->n_ddp && z->ddp[z->ddp_posted].left == 0) ddp_post(z);
}

/* ---- buffers */

void zero_comm_init(struct zero *z) {
    struct mem_tracker *mem = z->mem;
    static const char *const gathered_names[] = {
        [UNIT_EMBED] = "gathered embedding (params)", [UNIT_HEAD] = "gathered head (params)",
        [UNIT_LAYER] = "gathered layer (params)"};
    for (int k = 0; k <= UNIT_LAYER; k++) z->gather[k] = (struct zero_pending){.unit = -1};
    for (int k = 0; k <= UNIT_LAYER; k++) z->holds[k][0] = z->holds[k][1] = -1;
    for (int b = 0; b < 2; b++) z->scatter[b] = (struct zero_pending){.unit = -1};
    if (z->row->params == PARAMS_ALL_GATHER_IN_USE)
        for (int kind = 0; kind <= UNIT_LAYER; kind++) {
            int u = layout_kind_unit(z->lay, (enum unit_kind)kind);
            if (u < 0) continue;
            enum unit_kind k = (enum unit_kind)kind;
            size_t bytes = shard_unit_padded(&z->sh, u) * zero_psize(z);
            z->gathered[k] = mem_alloc(mem, z->space, MEM_COMM, gathered_names[k], bytes);
            if (k == UNIT_LAYER && z->o.overlap)
                z->gathered_layer2 = mem_alloc(mem, z->space, MEM_COMM, "gathered next layer (params)", bytes);
        }
    if (z->row->grads == GRADS_REDUCE_SCATTER_UNIT)
        for (int b = 0; b < (z->o.overlap ? 2 : 1); b++)
            z->bucket[b] = mem_alloc(mem, z->space, MEM_COMM,
                                     b == 0 ? "reduce-scatter bucket+ring (grads)"
                                            : "reduce-scatter bucket 2+ring (grads)",
                                     shard_bucket_elems(&z->sh) * zero_gsize(z));
    if (z->row->grads == GRADS_ALL_REDUCE_BUCKETS) {
        int n = z->lay->n_units;
        int *order = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, "backward order (stage 0 buckets)", (size_t)n * sizeof *order);
        z->ddp = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, "all-reduce buckets (stage 0)", (size_t)n * sizeof *z->ddp);
        if (order && z->ddp) ddp_buckets_build(z, order, backward_order(z->lay, order));
        mem_free(mem, order);
    }
}

void zero_comm_free(struct zero *z) {
    void *bufs[] = {z->gathered[UNIT_EMBED], z->gathered[UNIT_HEAD], z->gathered[UNIT_LAYER], z->gathered_layer2,
                    z->bucket[0], z->bucket[1], z->ddp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(z->mem, bufs[i]);
}

/* ---- ZeRO-3: a unit's all_gather before use, its release after */

static void *layer_buffer(struct zero *z, int i) { return i == 0 ? z->gathered[UNIT_LAYER] : z->gathered_layer2; }

static void *gather_buffer(struct zero *z, enum unit_kind k, int i) {
    return k == UNIT_LAYER ? layer_buffer(z, i) : z->gathered[k];
}

/* Gathered buffer i of kind k now holds unit u (-1: released, free). A
 * gather into a buffer whose unit was not released would overwrite
 * params the model may still read: a bug of the caller, stopped here. */
static void set_holder(struct zero *z, enum unit_kind k, int i, int u) {
    int *h = &z->holds[k][i];
    if (u >= 0 && *h >= 0 && *h != u) {
        fprintf(stderr, "zero: rank %d: all_gather of unit %d into the buffer of unit %d, which was not released\n",
                z->dp->rank, u, *h);
        abort();
    }
    *h = u;
}

/* Posts unit u's all_gather into buffer i of its kind: this rank's slice
 * copied to its place first. */
static struct zero_pending post_all_gather(struct zero *z, int u, int i) {
    enum unit_kind k = kind_of(z, u);
    char *buf = gather_buffer(z, k, i);
    set_holder(z, k, i, u);
    size_t chunk = shard_unit_chunk(&z->sh, u);
    buf_copy(z->space, buf + (size_t)z->sh.rank * chunk * zero_psize(z),
             (const char *)z->st.params + shard_offset(&z->sh, u) * zero_psize(z), chunk * zero_psize(z));
    moves(z, u);
    struct zero_pending p = {.unit = u, .buf = i, .req = z->dp->iall_gather(z->dp, buf, chunk, z->o.param_dtype)};
    moved(z, u);
    return p;
}

/* Waits for the all-gather or reduce-scatter p of its unit, tagged with it. */
static void wait_pending(struct zero *z, const struct zero_pending *p, const char *what) {
    moves(z, p->unit);
    wait_or_report(z, p->req, what);
    moved(z, p->unit);
}

void zero_all_gather_ahead(struct zero *z, int u) {
    if (u < 0 || z->row->params != PARAMS_ALL_GATHER_IN_USE || !z->o.overlap) return;
    enum unit_kind k = kind_of(z, u);
    if (z->gather[k].unit >= 0) return; /* one in flight per kind: the next zero_all_gather gathers u itself */
    z->gather[k] = post_all_gather(z, u, k == UNIT_LAYER ? 1 - z->layer_in_use : 0);
}

/* Below ZeRO-3 the params are resident: unit u's place in them. ZeRO-3:
 * unit u gathered whole and used in place until zero_release; the next
 * gather of its kind then lands in its buffer (layers alternate between
 * two under overlap, so the all_gather of the next never touches the one
 * in use). */
const void *zero_all_gather(struct zero *z, int u) {
    if (z->row->params != PARAMS_ALL_GATHER_IN_USE)
        return (const char *)z->st.params + shard_padded_offset(&z->sh, u) * zero_psize(z);
    enum unit_kind k = kind_of(z, u);
    struct zero_pending *p = &z->gather[k];
    if (p->unit >= 0 && p->unit != u) { /* posted ahead for another unit: finish it unused, gather u below */
        wait_pending(z, p, "an all-gather posted ahead");
        set_holder(z, k, p->buf, -1);
        p->unit = -1;
    }
    if (p->unit < 0) *p = post_all_gather(z, u, k == UNIT_LAYER ? z->layer_in_use : 0);
    wait_pending(z, p, "an all-gather of params");
    p->unit = -1;
    if (k == UNIT_LAYER) z->layer_in_use = p->buf;
    return gather_buffer(z, k, p->buf);
}

void zero_release(struct zero *z, int u) {
    if (z->row->params != PARAMS_ALL_GATHER_IN_USE || u < 0) return;
    enum unit_kind k = kind_of(z, u);
    for (int i = 0; i < 2; i++)
        if (z->holds[k][i] == u) set_holder(z, k, i, -1);
    step_hook(z->o.hooks, (struct step_event){.at = UNIT_RELEASED, .unit = u,
                                              .bytes = (double)(shard_unit_padded(&z->sh, u) * zero_psize(z))});
}

/* ---- gradients */

/* ZeRO-2/3: the reduce_scatter in bucket b is done; add the owned slice
 * into the grad shard. */
static void finish_scatter(struct zero *z, int b) {
    struct zero_pending *p = &z->scatter[b];
    if (p->unit < 0) return;
    wait_pending(z, p, "a reduce-scatter of grads");
    buf_add(z->space, (char *)z->st.grads + shard_offset(&z->sh, p->unit) * zero_gsize(z), z->bucket[b], z->o.grad_dtype,
            shard_unit_chunk(&z->sh, p->unit));
    p->unit = -1;
}

/* DDP and ZeRO-1 keep the full gradients: bf16 grads add the fp32
 * accumulator in (one rounding per micro-batch, as a bf16 gradient buffer
 * implies); fp32 grads were accumulated in place. DDP on the step's last
 * backward: the unit's bucket is all_reduced once all its units are done. */
static void keep_full(struct zero *z, int u, const float *acc) {
    void *grads = (char *)z->st.grads + shard_padded_offset(&z->sh, u) * zero_gsize(z);
    if (z->o.grad_dtype == DTYPE_BF16) conv_accumulate(z->flops, grads, acc, layout_unit_size(z->lay, u));
    int k = z->row->grads == GRADS_ALL_REDUCE_BUCKETS && z->last_backward ? ddp_bucket_of(z, u) : -1;
    if (k >= 0) {
        z->ddp[k].left--;
        ddp_post_ready(z);
    }
}

/* ZeRO-2/3: reduce_scatter the unit's fp32 gradient (as grad_dtype on the
 * wire) and add the owned slice into the grad shard, now or, with overlap,
 * when its bucket comes round again. */
void zero_reduce_scatter(struct zero *z, int u, const float *acc) {
    if (z->row->grads != GRADS_REDUCE_SCATTER_UNIT) {
        keep_full(z, u, acc);
        return;
    }
    enum dtype gd = z->o.grad_dtype;
    int b = z->next_bucket;
    finish_scatter(z, b); /* the unit two back, if still in flight */
    if (gd == DTYPE_BF16) conv_narrow(z->flops, z->bucket[b], acc, shard_unit_padded(&z->sh, u));
    else buf_copy(z->space, z->bucket[b], acc, shard_unit_padded(&z->sh, u) * sizeof *acc);
    char *ring_receive = (char *)z->bucket[b] + shard_max_unit_padded(&z->sh) * zero_gsize(z); /* shard_bucket_elems */
    moves(z, u);
    z->scatter[b] = (struct zero_pending){
        .unit = u,
        .req = z->dp->ireduce_scatter_sum(z->dp, z->bucket[b], ring_receive, shard_unit_chunk(&z->sh, u), gd)};
    moved(z, u);
    if (!z->o.overlap) finish_scatter(z, b);
    else z->next_bucket = 1 - b;
}

void zero_backward_begins(struct zero *z, bool last_of_step) { z->last_backward = last_of_step; }

void zero_progress(struct zero *z) {
    if (z->o.overlap) z->dp->progress(z->dp);
}

void zero_reduce_step_grads(struct zero *z) {
    for (int b = 0; b < 2; b++) finish_scatter(z, (z->next_bucket + b) % 2); /* in posting order */
    if (z->row->grads == GRADS_ALL_REDUCE_BUCKETS) {
        while (z->ddp_posted < z->n_ddp) ddp_post(z);
        while (z->ddp_waited < z->n_ddp) ddp_wait_next(z);
        for (int k = 0; k < z->n_ddp; k++) z->ddp[k].left = z->ddp[k].units;
        z->ddp_posted = z->ddp_waited = 0;
        z->last_backward = false;
    } else if (z->row->grads == GRADS_REDUCE_SCATTER_STEP) {
        /* in place per unit: the owned slice lands at the unit's start */
        for (int u = 0; u < z->lay->n_units; u++) {
            moves(z, u);
            z->dp->reduce_scatter_sum(z->dp, (char *)z->st.grads + shard_padded_offset(&z->sh, u) * zero_gsize(z),
                                      shard_unit_chunk(&z->sh, u), z->o.grad_dtype);
            moved(z, u);
        }
    }
}

/* ---- the tied embedding across pipeline stages (include/zero.h): the first
 * stage's wte and the last stage's copy get their gradients summed over
 * the tie group once per step, after the data-parallel reduction (as
 * Megatron-LM's embedding group does), so both updates see the same
 * gradient and the two copies stay bitwise equal. The sum is linear, so
 * summing after the dp reduction equals summing before it.
 *
 * Where the reduced gradient of the tied unit lives depends on the stage:
 * stage 0 keeps the whole unit reduced in the full grads; stage 1 keeps
 * this rank's chunk at the unit's start of the full grads (the in-place
 * reduce-scatter); stages 2-3 keep it in the grad shard. Each copy is
 * sharded over dp at its own unit's boundaries (the embedding unit also
 * holds wpe, the head unit the final LayerNorm), so at stages >= 1 each
 * rank first all-gathers its unit's reduced chunks into a whole unit,
 * sums the wte range across the pair, and keeps its chunk again: the extra
 * traffic is one all-gather of the unit over dp and one all-reduce of
 * Vp C over the tie group per step. */

void zero_tie_init(struct zero *z, struct collectives *tie, int unit, size_t lo, size_t hi, bool in_norm) {
    z->tie = (struct zero_tie){.group = tie, .unit = unit, .lo = lo, .hi = hi, .in_norm = in_norm};
}

bool zero_tie_active(const struct zero *z) { return z->tie.group && z->tie.group->size > 1; }

void zero_all_reduce_tied_grads(struct zero *z) {
    if (!zero_tie_active(z)) return;
    const struct zero_tie *t = &z->tie;
    enum dtype gd = z->o.grad_dtype;
    size_t gs = zero_gsize(z), unit_at = shard_padded_offset(&z->sh, t->unit);
    if (z->row->grads == GRADS_ALL_REDUCE_BUCKETS) { /* the whole unit is reduced in place */
        t->group->all_reduce_sum(t->group, (char *)z->st.grads + (unit_at + t->lo) * gs, t->hi - t->lo, gd);
        return;
    }
    size_t chunk = shard_unit_chunk(&z->sh, t->unit), mine = (size_t)z->sh.rank * chunk;
    /* stage 1: the unit's own region of the full grads is the work buffer
     * (past the reduced chunk it holds stale partial sums); stages 2-3: the
     * reduce-scatter bucket, idle at the step */
    bool in_place = z->row->grads == GRADS_REDUCE_SCATTER_STEP;
    char *reduced = in_place ? (char *)z->st.grads + unit_at * gs
                                    : (char *)z->st.grads + shard_offset(&z->sh, t->unit) * gs;
    char *work = in_place ? reduced : z->bucket[0];
    if (work + mine * gs != reduced) /* disjoint: mine >= chunk */
        buf_copy(z->space, work + mine * gs, reduced, chunk * gs);
    z->dp->all_gather(z->dp, work, chunk, gd);
    t->group->all_reduce_sum(t->group, work + t->lo * gs, t->hi - t->lo, gd);
    if (work + mine * gs != reduced) buf_copy(z->space, reduced, work + mine * gs, chunk * gs);
}
