/* Model states under ZeRO stages 0-3 (include/zero.h): where each lives,
 * the sharded optimizer step, and moving states to and from checkpoints
 * one unit at a time. The step's collectives are in comm.c. */
#include "zero_parts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bufops.h"

int zero_init(struct zero *z, const struct zero_options *o, const struct model_layout *lay, struct collectives *dp,
              struct mem_tracker *mem, enum mem_space space, struct exec_ctx *flops) {
    *z = (struct zero){.o = *o, .row = zero_stage_row(o->stage), .lay = lay, .dp = dp, .mem = mem, .space = space,
                       .flops = flops};
    shard_layout_init(&z->sh, lay, dp->size, dp->rank);
    struct opt_segment *table = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, "optimizer segment table",
                                          opt_segments_capacity(lay) * sizeof *table);
    if (!table) return -1; /* the tracker holds the message */
    opt_segments_build(&z->segs, table, lay, &z->sh, z->row, &o->optim);
    size_t full = z->sh.total_padded, shard = z->sh.total_shard;
    size_t np = zero_params_sharded(z) ? shard : full, ng = zero_grads_sharded(z) ? shard : full;
    size_t no = zero_optim_sharded(z) ? shard : full;
    z->st.params = mem_alloc(mem, space, MEM_PARAMS, zero_params_sharded(z) ? "params (shard)" : "params", np * zero_psize(z));
    if (o->param_dtype == DTYPE_BF16)
        z->st.master = mem_alloc(mem, space, MEM_MASTER, zero_optim_sharded(z) ? "master (fp32, shard)" : "master (fp32)",
                                 no * 4);
    z->st.grads = mem_alloc(mem, space, MEM_GRADS, zero_grads_sharded(z) ? "grads (shard)" : "grads", ng * zero_gsize(z));
    optstate_alloc(z);
    zero_comm_init(z);
    return 0;
}

void zero_free(struct zero *z) {
    optstate_free(z);
    zero_comm_free(z);
    void *bufs[] = {z->st.params, z->st.master, z->st.grads};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(z->mem, bufs[i]);
    mem_free(z->mem, z->segs.seg);
    buf_sumsq_close(z->norm_list);
    z->norm_list = NULL;
}

void *zero_unit_grads(struct zero *z, int u) {
    return zero_grads_sharded(z) ? NULL : (char *)z->st.grads + zero_full_index(z, u, 0) * zero_gsize(z);
}

void zero_zero_grads(struct zero *z) {
    buf_zero(z->space, z->st.grads, (zero_grads_sharded(z) ? z->sh.total_shard : z->sh.total_padded) * zero_gsize(z));
}

/* Whether segment g counts in this rank's sum of squares: its segments
 * partition exactly the elements it owns (every unit at stage 0). Under
 * tensor parallelism a replicated tensor's gradient is the same on every
 * rank of the group, so only tp rank 0 counts it; the split tensors' parts
 * sum over the group (norm_groups). */
static bool norm_counts(const struct zero *z, const struct opt_segment *g) {
    const struct zero_tie *t = &z->tie;
    /* segments never cross a tensor: one inside the uncounted copy is skipped whole */
    if (zero_tie_active(z) && !t->in_norm && g->unit == t->unit && g->lo >= t->lo && g->hi <= t->hi) return false;
    return !(g->tp_replicated && z->lay->rank.tp_rank > 0);
}

/* --gpu_path v2's list of the counted segments, in segment order (the
 * order v1 adds them in); NULL when out of host memory. */
static struct sumsq_list *open_norm_list(const struct zero *z) {
    int n = z->segs.n > 0 ? z->segs.n : 1;
    const void **data = calloc((size_t)n, sizeof *data);
    size_t *len = calloc((size_t)n, sizeof *len);
    struct sumsq_list *l = NULL;
    if (data && len) {
        int k = 0;
        for (int i = 0; i < z->segs.n; i++) {
            const struct opt_segment *g = &z->segs.seg[i];
            if (!norm_counts(z, g)) continue;
            data[k] = zero_segment_grad(z, g);
            len[k++] = g->hi - g->lo;
        }
        l = buf_sumsq_open(z->space, data, z->o.grad_dtype, len, k);
    }
    free(data);
    free(len);
    return l;
}

/* Sum of squares of the reduced gradients this rank updates (norm_counts).
 * v1: a buf_sum_squares per segment (on a GPU a call and a device-to-host
 * copy each). v2 (a GPU under --gpu_path v2): one pass over the list's
 * device table and one copy (buf_sumsq_run; one_pass_norm); the segments'
 * sums added here in the same order. */
static double local_grad_sum_squares(struct zero *z) {
    double s = 0.0;
    if (z->flops && z->flops->device.one_pass_norm) {
        if (!z->norm_list) z->norm_list = open_norm_list(z);
        if (!z->norm_list) {
            fprintf(stderr, "error: the gradient norm's segment list (--gpu_path v2) could not be made: out of memory\n");
            exit(EXIT_FAILURE);
        }
        const double *sums = buf_sumsq_run(z->norm_list);
        for (int k = 0; k < buf_sumsq_count(z->norm_list); k++) s += sums[k];
        return s;
    }
    for (int k = 0; k < z->segs.n; k++) {
        const struct opt_segment *g = &z->segs.seg[k];
        if (norm_counts(z, g)) s += buf_sum_squares(z->space, zero_segment_grad(z, g), z->o.grad_dtype, g->hi - g->lo);
    }
    return s;
}

/* ---- the optimizer step's phases, in order (train/run/run_loop.c: train_step) */

/* The step's phase k is done (include/step_hooks.h: the memory timeline samples it). */
static void phase_done(const struct zero *z, enum phase_kind k) {
    step_hook(z->o.hooks, (struct step_event){.at = PHASE_DONE, .phase = k, .unit = -1, .micro_batch = -1});
}

void zero_reduce_grads(struct zero *z) {
    phase_done(z, PHASE_REDUCE_GRADS); /* before: what is in flight is still held */
    zero_reduce_step_grads(z);
    zero_tie_grads(z);
}

double zero_grad_norm(struct zero *z) {
    double sq = local_grad_sum_squares(z);
    if (z->row->shards_optimizer) z->dp->all_reduce_scalars(z->dp, &sq, 1); /* each rank summed its own segments */
    for (int k = 0; k < NORM_GROUP_NUM; k++)
        if (z->norm_groups[k] && z->norm_groups[k]->size > 1) z->norm_groups[k]->all_reduce_scalars(z->norm_groups[k], &sq, 1);
    return sqrt(sq);
}

void zero_update(struct zero *z, int step, double grad_norm) {
    const struct optim_options *op = &z->o.optim;
    struct adamw_hparams h = {.lr = lr_at(&op->lr, step), .beta1 = op->beta1, .beta2 = op->beta2, .eps = op->eps,
                              .grad_scale = clip_scale(grad_norm, op->grad_clip), .t = (int64_t)step + 1};
    if (op->kind == OPTIM_ADAFACTOR) { /* whole tensors at a time, not segment by segment */
        factored_update(z, &h, step);
    } else {
        for (int k = 0; k < z->segs.n; k++) {
            const struct opt_segment *g = &z->segs.seg[k];
            bf16 *out;
            float *w = zero_segment_weights(z, g, &out);
            optstate_update(z, g, &h, w, zero_segment_grad(z, g), out, step);
        }
    }
    phase_done(z, PHASE_UPDATE);
}

void zero_all_gather_updated(struct zero *z) {
    if (z->row->params != PARAMS_ALL_GATHER_UPDATED) return; /* DDP: every rank updated all; ZeRO-3: gathered in use */
    for (int u = 0; u < z->lay->n_units; u++) {
        step_hook(z->o.hooks, (struct step_event){.at = UNIT_MOVES, .unit = u}); /* the trace names the unit */
        z->dp->all_gather(z->dp, (char *)z->st.params + zero_full_index(z, u, 0) * zero_psize(z), shard_unit_chunk(&z->sh, u),
                          z->o.param_dtype);
        step_hook(z->o.hooks, (struct step_event){.at = UNIT_MOVED, .unit = u});
    }
    phase_done(z, PHASE_GATHER_PARAMS);
}

/* ---- checkpoints and initial values, one unit at a time */

bool zero_has_state(const struct zero *z, enum zero_state which) {
    if (which == STATE_MASTER) return z->st.master != NULL;
    return which == STATE_PARAMS || optstate_has(z, which);
}

enum dtype zero_state_dtype(const struct zero *z, enum zero_state which) {
    return which == STATE_PARAMS ? z->o.param_dtype : DTYPE_FP32;
}

void zero_unit_stored(const struct zero *z, int u, size_t *lo, size_t *hi) {
    *lo = 0;
    *hi = layout_unit_size(z->lay, u);
    if (zero_params_sharded(z)) shard_owned(&z->sh, u, z->sh.rank, lo, hi);
}

/* The part of unit u this rank keeps of state `which`. */
static void kept(const struct zero *z, enum zero_state which, int u, size_t *lo, size_t *hi) {
    *lo = 0;
    *hi = layout_unit_size(z->lay, u);
    bool sharded = which == STATE_PARAMS ? zero_params_sharded(z) : zero_optim_sharded(z);
    if (sharded) shard_owned(&z->sh, u, z->sh.rank, lo, hi);
}

void zero_set_unit(struct zero *z, int u, size_t lo, size_t hi, const float *w) {
    size_t a, b;
    kept(z, STATE_PARAMS, u, &a, &b);
    buf_from_fp32(z->space, (char *)z->st.params + zero_param_index(z, u, a) * zero_psize(z), z->o.param_dtype, w + (a - lo), b - a);
    if (z->st.master) {
        kept(z, STATE_MASTER, u, &a, &b);
        buf_copy(z->space, z->st.master + zero_state_index(z, u, a), w + (a - lo), (b - a) * sizeof *w);
    }
    (void)hi;
}

/* Optimizer state `which` of unit u, this rank's kept part [lo, hi), as
 * fp32 into dst (indexed from lo), segment by segment. */
static void opt_unit_to_fp32(const struct zero *z, enum zero_state which, int u, size_t lo, float *dst) {
    for (int k = 0; k < z->segs.n; k++) {
        const struct opt_segment *g = &z->segs.seg[k];
        if (g->unit == u) optstate_segment_to_fp32(z, which, g, dst + (g->lo - lo));
    }
}

void zero_gather_unit(struct zero *z, enum zero_state which, int u, void *work) {
    size_t lo, hi, chunk = shard_unit_chunk(&z->sh, u);
    kept(z, which, u, &lo, &hi);
    enum dtype dt = zero_state_dtype(z, which);
    size_t elem = dtype_size(dt);
    bool sharded = which == STATE_PARAMS ? zero_params_sharded(z) : zero_optim_sharded(z);
    /* this rank's kept part, in dtype, at its place in the padded unit */
    char *w = work;
    buf_zero(z->space, w, shard_unit_padded(&z->sh, u) * elem);
    char *mine = w + lo * elem;
    if (which == STATE_PARAMS) buf_copy(z->space, mine, (const char *)z->st.params + zero_param_index(z, u, lo) * elem, (hi - lo) * elem);
    else if (which == STATE_MASTER) buf_copy(z->space, mine, z->st.master + zero_state_index(z, u, lo), (hi - lo) * elem);
    else opt_unit_to_fp32(z, which, u, lo, (float *)mine);
    if (sharded) {
        coll_all_gather_uncounted(z->dp, w, chunk, dt); /* checkpoint traffic is not a step's */
    }
}

void zero_scatter_unit(struct zero *z, enum zero_state which, int u, const void *src) {
    size_t lo, hi;
    kept(z, which, u, &lo, &hi);
    size_t elem = dtype_size(zero_state_dtype(z, which));
    const char *s = (const char *)src + lo * elem;
    if (which == STATE_PARAMS) {
        buf_copy(z->space, (char *)z->st.params + zero_param_index(z, u, lo) * elem, s, (hi - lo) * elem);
        return;
    }
    if (which == STATE_MASTER) {
        buf_copy(z->space, z->st.master + zero_state_index(z, u, lo), s, (hi - lo) * elem);
        return;
    }
    if (which == STATE_OPT1 && z->o.optim.kind == OPTIM_ADAFACTOR) { /* whole rows and columns at once */
        factored_load_unit(z, u, src);
        return;
    }
    if (which == STATE_FACTORED) {
        factored_load_raw_unit(z, u, src);
        return;
    }
    for (int k = 0; k < z->segs.n; k++) {
        const struct opt_segment *g = &z->segs.seg[k];
        if (g->unit == u) optstate_segment_from_fp32(z, which, g, (const float *)src + g->lo);
    }
}

/* ---- 8-bit states as they are, one unit at a time */

void zero_states_loaded(struct zero *z, bool as_saved) {
    if (z->o.optim.kind == OPTIM_ADAFACTOR) factored_loaded(z, as_saved);
}

int zero_raw_ranks(const struct zero *z) { return zero_optim_sharded(z) ? z->dp->size : 1; }

static size_t seg_blocks(const struct opt_segment *g) { return (g->hi - g->lo + OPT8_BLOCK - 1) / OPT8_BLOCK; }

/* Adds the absmax count of each unit of segments s into count[u * R + r]. */
static void count_blocks(const struct opt_segments *s, int R, int r, size_t *count) {
    for (int k = 0; k < s->n; k++)
        if (s->seg[k].quantized) count[(size_t)s->seg[k].unit * (size_t)R + (size_t)r] += seg_blocks(&s->seg[k]);
}

int zero_raw_block_table(struct zero *z, size_t *first) {
    const int R = zero_raw_ranks(z), U = z->lay->n_units;
    size_t cells = (size_t)U * (size_t)R;
    for (size_t i = 0; i <= cells; i++) first[i] = 0;
    if (R == 1) {
        count_blocks(&z->segs, 1, 0, first);
    } else {
        /* every rank's segments, as that rank builds them */
        struct opt_segment *table = mem_alloc(z->mem, MEM_HOST, MEM_SCRATCH, "8-bit block table (one rank's segments)",
                                              opt_segments_capacity(z->lay) * sizeof *table);
        if (!table) return -1;
        for (int r = 0; r < R; r++) {
            struct shard_layout sh;
            struct opt_segments segs;
            shard_layout_init(&sh, z->lay, R, r);
            opt_segments_build(&segs, table, z->lay, &sh, z->row, &z->o.optim);
            count_blocks(&segs, R, r, first);
        }
        mem_free(z->mem, table);
    }
    /* counts to starts */
    size_t at = 0;
    for (size_t i = 0; i <= cells; i++) {
        size_t c = i < cells ? first[i] : 0;
        first[i] = at;
        at += c;
    }
    return 0;
}

static uint8_t *codes_of(const struct zero *z, enum zero_state which) { return which == STATE_OPT1 ? z->st.q1 : z->st.q2; }
static float *absmax_of(const struct zero *z, enum zero_state which) {
    return which == STATE_OPT1 ? z->st.absmax1 : z->st.absmax2;
}

/* The gathered rank slots of work compacted in place by memmove, which
 * needs the bytes on the host: done in host, a host mirror of work's
 * first `mirror` bytes when work is device memory (copied there and back:
 * `back` bytes of the result), or work itself. */
static void *compact_begin(const struct zero *z, void *work, void *host, size_t mirror) {
    if (host != work) buf_copy(z->space, host, work, mirror);
    return host;
}
static void compact_end(const struct zero *z, void *work, const void *host, size_t back) {
    if (host != work) buf_copy(z->space, work, host, back);
}

void zero_gather_unit_codes(struct zero *z, enum zero_state which, int u, void *work, void *host) {
    const bool sharded = zero_optim_sharded(z);
    const size_t chunk = shard_unit_chunk(&z->sh, u), R = (size_t)zero_raw_ranks(z);
    /* each rank's slice of bytes in a slot of whole fp32 words, so the
     * all-gather (which moves fp32) carries it unchanged */
    const size_t slot = sharded ? (chunk + 3) / 4 * 4 : shard_unit_padded(&z->sh, u);
    const size_t origin = sharded ? (size_t)z->sh.rank * chunk : 0; /* unit element of the slot's byte 0 */
    unsigned char *w = work, *mine = w + (sharded ? (size_t)z->sh.rank * slot : 0);
    buf_zero(z->space, w, R * slot);
    for (int k = 0; k < z->segs.n; k++) {
        const struct opt_segment *g = &z->segs.seg[k];
        if (g->unit == u && g->quantized) buf_copy(z->space, mine + (g->lo - origin), codes_of(z, which) + g->q_offset, g->hi - g->lo);
    }
    if (!sharded) return;
    coll_all_gather_uncounted(z->dp, w, slot / 4, DTYPE_FP32); /* checkpoint traffic */
    /* slots to slices */
    unsigned char *h = compact_begin(z, work, host, R * slot);
    for (size_t r = 1; r < R; r++) memmove(h + r * chunk, h + r * slot, chunk);
    compact_end(z, work, h, R * chunk);
}

void zero_gather_unit_absmax(struct zero *z, enum zero_state which, int u, const size_t *first, void *work,
                             void *host) {
    const bool sharded = zero_optim_sharded(z);
    const size_t chunk = shard_unit_chunk(&z->sh, u), R = (size_t)zero_raw_ranks(z), row = (size_t)u * R;
    float *w = work, *mine = w + (sharded ? (size_t)z->sh.rank * chunk : 0);
    /* a rank's blocks of the unit are fewer than its elements of it: a slice holds them */
    size_t n = 0;
    for (int k = 0; k < z->segs.n; k++) {
        const struct opt_segment *g = &z->segs.seg[k];
        if (g->unit != u || !g->quantized) continue;
        buf_copy(z->space, mine + n, absmax_of(z, which) + g->block_offset, seg_blocks(g) * sizeof *w);
        n += seg_blocks(g);
    }
    if (!sharded) return;
    coll_all_gather_uncounted(z->dp, w, chunk, DTYPE_FP32); /* checkpoint traffic */
    float *h = compact_begin(z, work, host, R * chunk * sizeof *w);
    for (size_t r = 1; r < R; r++)
        memmove(h + (first[row + r] - first[row]), h + r * chunk, (first[row + r + 1] - first[row + r]) * sizeof *h);
    compact_end(z, work, h, (first[row + R] - first[row]) * sizeof *h);
}

void zero_scatter_unit_codes(struct zero *z, enum zero_state which, int u, const void *src) {
    const unsigned char *s = src;
    for (int k = 0; k < z->segs.n; k++) {
        const struct opt_segment *g = &z->segs.seg[k];
        if (g->unit == u && g->quantized) buf_copy(z->space, codes_of(z, which) + g->q_offset, s + g->lo, g->hi - g->lo);
    }
}

void zero_scatter_unit_absmax(struct zero *z, enum zero_state which, int u, const size_t *first, const void *src) {
    const size_t R = (size_t)zero_raw_ranks(z), row = (size_t)u * R, r = R == 1 ? 0 : (size_t)z->sh.rank;
    const float *s = (const float *)src + (first[row + r] - first[row]);
    for (int k = 0; k < z->segs.n; k++) {
        const struct opt_segment *g = &z->segs.seg[k];
        if (g->unit != u || !g->quantized) continue;
        buf_copy(z->space, absmax_of(z, which) + g->block_offset, s, seg_blocks(g) * sizeof *s);
        s += seg_blocks(g);
    }
}
