/* Adafactor over a rank's segments (include/factored.h; the per-piece
 * kernels are include/optim.h's adafactor_*; the plan of which tensors
 * this rank updates is factored_plan.c's): the step in five phases, each
 * over every tensor:
 * the squares' sums, their share over the dp group, the moving averages,
 * the update's squares (the clipping RMS, shared too), the update.
 *
 * In the states' space (z->space): on a GPU the statistics, the sums and
 * the collectives' buffers are device memory, every pass is a kernel of
 * include/optim.h's adafactor_* and every copy a buf_copy, so nothing per
 * parameter crosses to the host; the one host read of a step is the
 * tensors' update squares (doubles), copied once for the scalar
 * all-reduces (z->fac_host_reads counts them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bufops.h"
#include "zero_parts.h"

/* Rank s's elements of tensor e, tensor-local [*a, *b) (empty: a == b). */
static void rank_part(const struct zero *z, const struct factored_tensor *e, int s, size_t *a, size_t *b) {
    const struct tensor_info ti = layout_tensor(z->lay, e->tensor);
    size_t lo = 0, hi = layout_unit_size(z->lay, ti.unit);
    if (z->row->shards_optimizer) shard_owned(&z->sh, ti.unit, s, &lo, &hi);
    const size_t t1 = e->t0 + ti.numel;
    lo = lo > e->t0 ? lo : e->t0;
    hi = hi < t1 ? hi : t1;
    *a = lo < hi ? lo - e->t0 : 0;
    *b = lo < hi ? hi - e->t0 : 0;
}

/* Row `row`'s sum over every rank that holds a part of it into *dst: each
 * put its part of its first and last row into its two slots (0 + the
 * parts in rank order, in the states' space). */
static void shared_row(const struct zero *z, const struct factored_tensor *e, const float *slots, size_t row,
                       float *dst) {
    const size_t m = (size_t)e->ncols;
    bool added = false;
    for (int s = 0; s < z->fac.ranks; s++) {
        size_t a, b;
        rank_part(z, e, s, &a, &b);
        if (a == b) continue;
        const size_t first = a / m, last = (b - 1) / m;
        if (first != row && last != row) continue;
        /* its first row's slot, else its last's (a part in one row fills only the first) */
        adafactor_total(z->space, 1, slots + 2 * (size_t)s + (first == row ? 0 : 1), dst, added);
        added = true;
    }
    if (!added) adafactor_total(z->space, 0, slots, dst, false);
}

/* The moment piece g of tensor e sees (after the averages). */
static struct adafactor_moment moment_of(const struct zero *z, const struct factored_tensor *e,
                                         const struct opt_segment *g, const float *col_total) {
    const float *stat = z->st.s1 + e->stat_at;
    const size_t k = g->lo - e->t0; /* tensor-local */
    if (!e->factored) return (struct adafactor_moment){.v = stat + (k - e->a)};
    return (struct adafactor_moment){.rows = stat, .cols = stat + e->nrows, .col_total = col_total,
                                     .c0 = k - e->r0 * (size_t)e->ncols, .ncols = e->ncols};
}

/* sum(C) of this rank's columns into *dst (the states' space). */
static void own_column_total(const struct zero *z, const struct factored_tensor *e, float *dst) {
    adafactor_total(z->space, (size_t)e->ncols, z->st.s1 + e->stat_at + e->nrows, dst, false);
}

/* Where sum(C) of the whole matrix is, in the states' space: a row-parallel
 * slice's parts added over tp (factored_update leaves it in the tp buffer,
 * after R's rows); else this rank's, summed here into the first of the
 * tensor's row sums (scratch that is free once R moved: between steps, and
 * after the averages within one). NULL for a vector. */
static const float *column_total(const struct zero *z, const struct factored_tensor *e) {
    if (!e->factored) return NULL;
    if (factored_tp_sums(e, z->fac.tp) && e->split == SPLIT_ROW) return z->fac_tpsums + e->tp_at + e->nrows;
    float *at = z->fac_rowsums + e->rowsum_at;
    own_column_total(z, e, at);
    return at;
}

/* 3. over tp: a row-parallel slice's rows (its cut rows already added over
 * dp) and its part of sum(C) after C moved, a column-parallel or
 * vocabulary slice's columns; then R and C move. C of a row-parallel slice
 * is whole on the rank (its columns, every row's part over dp) and moves
 * first. */
static void tp_share(struct zero *z, float *rows, float *slots, float beta2t) {
    const struct factored_plan *p = &z->fac;
    float *buf = z->fac_tpsums;
    const enum mem_space sp = z->space;
    buf_zero(sp, buf, p->tp_floats * sizeof *buf);
    for (int i = 0; i < p->n; i++) {
        const struct factored_tensor *e = &p->t[i];
        if (!factored_tp_sums(e, p->tp)) continue;
        if (e->split == SPLIT_ROW) {
            adafactor_ema(sp, (size_t)e->ncols, z->st.s1 + e->stat_at + e->nrows, slots + e->slot_at, beta2t);
            buf_copy(sp, buf + e->tp_at, rows + e->rowsum_at, e->nrows * sizeof *buf);
            own_column_total(z, e, buf + e->tp_at + e->nrows);
        } else {
            buf_copy(sp, buf + e->tp_at, slots + e->slot_at, (size_t)e->ncols * sizeof *buf);
        }
    }
    struct collectives *tp = z->norm_groups[NORM_OVER_TP];
    tp->all_reduce_sum(tp, buf, p->tp_floats, DTYPE_FP32);
    for (int i = 0; i < p->n; i++) {
        const struct factored_tensor *e = &p->t[i];
        if (!factored_tp_sums(e, p->tp)) continue;
        if (e->split == SPLIT_ROW) buf_copy(sp, rows + e->rowsum_at, buf + e->tp_at, e->nrows * sizeof *buf);
        else buf_copy(sp, slots + e->slot_at, buf + e->tp_at, (size_t)e->ncols * sizeof *buf);
    }
}

/* The tied wte's R and C from the first stage (include/factored.h): its
 * whole R and C assembled over its dp group, then sent over the tie
 * group (added to the last stage's zeros), which takes its rows. */
static void tie_share(struct zero *z) {
    const struct factored_plan *p = &z->fac;
    float *buf = z->fac_tiesums;
    const enum mem_space sp = z->space;
    const size_t m = (size_t)p->tie_cols;
    buf_zero(sp, buf, p->tie_floats * sizeof *buf);
    const struct factored_tensor *e = NULL;
    for (int i = 0; i < p->n; i++)
        if (p->t[i].tensor == p->tie_tensor) e = &p->t[i];
    if (p->tie_first) {
        if (e) {
            const float *stat = z->st.s1 + e->stat_at;
            size_t i0 = 0; /* the rows whose first element is this rank's: [i0, nrows) */
            while (i0 < e->nrows && (e->r0 + i0) * m < e->a) i0++;
            buf_copy(sp, buf + e->r0 + i0, stat + i0, (e->nrows - i0) * sizeof *buf);
            if (e->a == 0) buf_copy(sp, buf + p->tie_rows, stat + e->nrows, m * sizeof *buf);
        }
        z->dp->all_reduce_sum(z->dp, buf, p->tie_floats, DTYPE_FP32);
    }
    z->tie.group->all_reduce_sum(z->tie.group, buf, p->tie_floats, DTYPE_FP32);
    if (p->tie_first || !e) return;
    float *stat = z->st.s1 + e->stat_at;
    buf_copy(sp, stat, buf + e->r0, e->nrows * sizeof *stat);
    buf_copy(sp, stat + e->nrows, buf + p->tie_rows, m * sizeof *stat);
}

/* Each tensor's update squares (doubles) on the host, for the scalar
 * all-reduces: on the host already, or in one copy from the device. */
static double *squares_on_host(struct zero *z) {
    if (z->fac_squares == z->fac_squares_at) return z->fac_squares;
    buf_copy(z->space, z->fac_squares, z->fac_squares_at, (size_t)z->fac.tensors * sizeof *z->fac_squares);
    z->fac_host_reads += 1;
    return z->fac_squares;
}

void factored_update(struct zero *z, const struct adamw_hparams *h, int64_t step) {
    const struct optim_options *o = &z->o.optim;
    const struct factored_plan *p = &z->fac;
    const enum dtype gd = z->o.grad_dtype;
    const enum mem_space sp = z->space;
    const float gs = h->grad_scale, eps1 = o->adafactor_eps, beta2t = adafactor_beta2t(o->adafactor_decay, step + 1);
    float *slots = z->fac_sums, *rows = z->fac_rowsums;
    buf_zero(sp, slots, p->slot_floats * sizeof *slots);
    buf_zero(sp, rows, p->rowsum_floats * sizeof *rows);
    buf_zero(sp, z->fac_squares_at, (size_t)p->tensors * sizeof *z->fac_squares_at);
    /* 1. G^2 + eps1: the matrices' row and column sums, the vectors' averages */
    for (int i = 0; i < p->n; i++) {
        const struct factored_tensor *e = &p->t[i];
        for (int k = e->first_seg; k < e->first_seg + e->n_segs; k++) {
            const struct opt_segment *g = &z->segs.seg[k];
            const size_t n = g->hi - g->lo, at = g->lo - e->t0;
            if (e->factored)
                adafactor_square_sums(sp, n, zero_segment_grad(z, g), gd, gs, eps1, at - e->r0 * (size_t)e->ncols,
                                      e->ncols, rows + e->rowsum_at, slots + e->slot_at);
            else
                adafactor_vector_ema(sp, n, z->st.s1 + e->stat_at + (at - e->a), zero_segment_grad(z, g), gd, gs,
                                     eps1, beta2t);
        }
        if (!e->factored) continue;
        float *mine = slots + e->slot_at + e->ncols + 2 * (size_t)p->rank;
        buf_copy(sp, mine, rows + e->rowsum_at, sizeof *mine);
        if (e->nrows > 1) buf_copy(sp, mine + 1, rows + e->rowsum_at + e->nrows - 1, sizeof *mine);
    }
    /* 2. the columns and the cut rows summed over the ranks that share them */
    if (p->ranks > 1) z->dp->all_reduce_sum(z->dp, slots, p->slot_floats, DTYPE_FP32);
    /* 3. the cut rows whole over dp, the slices' sums over tp; R and C move */
    for (int i = 0; i < p->n; i++) {
        const struct factored_tensor *e = &p->t[i];
        if (!e->factored) continue;
        float *r = rows + e->rowsum_at;
        const float *cut = slots + e->slot_at + e->ncols;
        shared_row(z, e, cut, e->r0, r);
        if (e->nrows > 1) shared_row(z, e, cut, e->r0 + e->nrows - 1, r + e->nrows - 1);
    }
    if (p->tp > 1) tp_share(z, rows, slots, beta2t);
    for (int i = 0; i < p->n; i++) {
        const struct factored_tensor *e = &p->t[i];
        if (!e->factored) continue;
        adafactor_ema(sp, e->nrows, z->st.s1 + e->stat_at, rows + e->rowsum_at, beta2t);
        if (!(factored_tp_sums(e, p->tp) && e->split == SPLIT_ROW)) /* (tp_share moved those) */
            adafactor_ema(sp, (size_t)e->ncols, z->st.s1 + e->stat_at + e->nrows, slots + e->slot_at, beta2t);
    }
    if (p->tie_floats) tie_share(z);
    /* 4. each tensor's update squares, for its RMS */
    for (int i = 0; i < p->n; i++) {
        const struct factored_tensor *e = &p->t[i];
        const float *total = column_total(z, e);
        for (int k = e->first_seg; k < e->first_seg + e->n_segs; k++) {
            const struct opt_segment *g = &z->segs.seg[k];
            const struct adafactor_moment s = moment_of(z, e, g, total);
            adafactor_update_squares(sp, g->hi - g->lo, zero_segment_grad(z, g), gd, gs, &s,
                                     z->fac_squares_at + e->tensor);
        }
    }
    double *squares = squares_on_host(z);
    if (p->ranks > 1) z->dp->all_reduce_scalars(z->dp, squares, p->tensors);
    if (p->tp > 1) { /* the slices' squares added; a replicated tensor's counted once */
        for (int t = 0; t < p->tensors && p->tp_rank != 0; t++)
            if (layout_tensor(z->lay, t).split == SPLIT_REPLICATED) squares[t] = 0.0;
        z->norm_groups[NORM_OVER_TP]->all_reduce_scalars(z->norm_groups[NORM_OVER_TP], squares, p->tensors);
    }
    if (p->tie_floats) { /* the tied wte's squares: the first stage's */
        double w = p->tie_first ? squares[p->tie_tensor] : 0.0;
        z->tie.group->all_reduce_scalars(z->tie.group, &w, 1);
        squares[p->tie_tensor] = w;
    }
    /* 5. the clipped step */
    struct adafactor_hparams ah = {.lr = h->lr, .beta1 = o->adafactor_beta1, .eps1 = eps1, .clip = o->adafactor_clip,
                                   .beta2t = beta2t, .grad_scale = gs};
    for (int i = 0; i < p->n; i++) {
        const struct factored_tensor *e = &p->t[i];
        const double rms = sqrt(squares[e->tensor] / e->whole);
        const float clip_scale = (float)(1.0 / fmax(1.0, rms / o->adafactor_clip));
        const float *total = column_total(z, e);
        for (int k = e->first_seg; k < e->first_seg + e->n_segs; k++) {
            const struct opt_segment *g = &z->segs.seg[k];
            const struct adafactor_moment s = moment_of(z, e, g, total);
            bf16 *params_out;
            float *w = zero_segment_weights(z, g, &params_out);
            struct param_writeback out = {.params = params_out, .rounding = z->o.rounding, .seed = z->o.seed,
                                          .noise_index = (uint64_t)step * z->lay->ref_total + g->global};
            ah.weight_decay = g->decay ? o->weight_decay : 0.0f;
            adafactor_apply(&ah, g->hi - g->lo, w, z->st.s2 ? z->st.s2 + g->state_at : NULL,
                            zero_segment_grad(z, g), gd, &s, clip_scale, &out, z->flops);
        }
    }
}

/* ---- resume states: the second moment per element, V = R C / sum(C) (or
 * v), is the state's fp32 form; any grid re-derives its R and C from it:
 * V is of rank one, so its row sums are R and its column sums C (their
 * total, sum(C), being sum(R)), up to rounding. */

static const struct factored_tensor *tensor_of(const struct zero *z, const struct opt_segment *g) {
    const int k = (int)(g - z->segs.seg);
    for (int i = 0; i < z->fac.n; i++)
        if (k >= z->fac.t[i].first_seg && k < z->fac.t[i].first_seg + z->fac.t[i].n_segs) return &z->fac.t[i];
    return NULL; /* every segment is in the plan */
}

void factored_segment_moment(const struct zero *z, const struct opt_segment *g, float *out) {
    const struct factored_tensor *e = tensor_of(z, g);
    const struct adafactor_moment s = moment_of(z, e, g, column_total(z, e));
    adafactor_moment_values(z->space, g->hi - g->lo, &s, out);
}

/* The resume's per-row and per-column work below is host code: on a GPU
 * it reads and writes host copies of the tensor's part (checkpoint
 * traffic, once per load or save, not a step's). x itself on the host;
 * else n floats copied from the device (`fill`) or left for the caller. */
static float *host_of(const struct zero *z, float *x, size_t n, bool fill) {
    if (z->space == MEM_HOST) return x;
    float *h = malloc(n * sizeof *h + 1);
    if (!h) {
        fprintf(stderr, "error: adafactor resume: no host memory to stage %zu floats\n", n);
        exit(EXIT_FAILURE);
    }
    if (fill) buf_copy(z->space, h, x, n * sizeof *h);
    return h;
}

/* The host copy h of x back (`store`) and gone. */
static void host_done(const struct zero *z, float *h, float *x, size_t n, bool store) {
    if (h == x) return;
    if (store) buf_copy(z->space, x, h, n * sizeof *h);
    free(h);
}

void factored_load_unit(struct zero *z, int u, const float *src) {
    for (int i = 0; i < z->fac.n; i++) {
        const struct factored_tensor *e = &z->fac.t[i];
        const struct tensor_info ti = layout_tensor(z->lay, e->tensor);
        if (ti.unit != u) continue;
        const float *v = src + e->t0; /* the whole tensor's V */
        float *stat = z->st.s1 + e->stat_at;
        if (!e->factored) {
            buf_copy(z->space, stat, v + e->a, (e->b - e->a) * sizeof *stat);
            continue;
        }
        const size_t m = (size_t)e->ncols, rows = ti.numel / m;
        float *hv = host_of(z, (float *)v, ti.numel, true), *hs = host_of(z, stat, e->nrows + m, false);
        for (size_t r = 0; r < e->nrows; r++) {
            double sum = 0.0;
            for (size_t j = 0; j < m; j++) sum += hv[(e->r0 + r) * m + j];
            hs[r] = (float)sum;
        }
        for (size_t j = 0; j < m; j++) {
            double sum = 0.0;
            for (size_t r = 0; r < rows; r++) sum += hv[r * m + j];
            hs[e->nrows + j] = (float)sum;
        }
        host_done(z, hv, (float *)v, ti.numel, false);
        host_done(z, hs, stat, e->nrows + m, true);
    }
}

/* ---- the statistics as they are (zero_parts.h; whether a model can hold
 * them: factored_plan.c): a resume at the same tp takes R, C and v bit for
 * bit. */

void factored_segment_raw(const struct zero *z, const struct opt_segment *g, float *out) {
    const struct factored_tensor *e = tensor_of(z, g);
    float *stat = z->st.s1 + e->stat_at;
    const size_t n = g->hi - g->lo, k0 = g->lo - e->t0; /* tensor-local */
    if (!e->factored) {
        buf_copy(z->space, out, stat + (k0 - e->a), n * sizeof *out);
        return;
    }
    const size_t m = (size_t)e->ncols;
    float *hs = host_of(z, stat, e->nrows + m, true), *ho = host_of(z, out, n, false);
    for (size_t k = 0; k < n; k++) {
        const size_t r = (k0 + k) / m, j = (k0 + k) % m;
        ho[k] = j == 0 ? hs[r - e->r0] : r == 0 ? hs[e->nrows + j] : r == 1 && j == 1 ? hs[e->nrows] : 0.0f;
    }
    host_done(z, hs, stat, e->nrows + m, false);
    host_done(z, ho, out, n, true);
}

void factored_load_raw_unit(struct zero *z, int u, const float *src) {
    for (int i = 0; i < z->fac.n; i++) {
        const struct factored_tensor *e = &z->fac.t[i];
        if (layout_tensor(z->lay, e->tensor).unit != u) continue;
        const float *w = src + e->t0; /* the whole tensor (slice) */
        float *stat = z->st.s1 + e->stat_at;
        if (!e->factored) {
            buf_copy(z->space, stat, w + e->a, (e->b - e->a) * sizeof *stat);
            continue;
        }
        const size_t m = (size_t)e->ncols, numel = layout_tensor(z->lay, e->tensor).numel;
        float *hw = host_of(z, (float *)w, numel, true), *hs = host_of(z, stat, e->nrows + m, false);
        for (size_t r = 0; r < e->nrows; r++) hs[r] = hw[(e->r0 + r) * m];
        hs[e->nrows] = hw[m + 1];
        for (size_t j = 1; j < m; j++) hs[e->nrows + j] = hw[j];
        host_done(z, hw, (float *)w, numel, false);
        host_done(z, hs, stat, e->nrows + m, true);
    }
}

void factored_loaded(struct zero *z, bool as_saved) {
    const struct factored_plan *p = &z->fac;
    if (p->tp == 1) return;
    /* re-derived: a row-parallel slice's row sums and a column-parallel or
     * vocabulary slice's column sums cover its own columns or rows only */
    float *buf = z->fac_tpsums;
    const enum mem_space sp = z->space;
    buf_zero(sp, buf, p->tp_floats * sizeof *buf);
    for (int i = 0; i < p->n; i++) {
        const struct factored_tensor *e = &p->t[i];
        if (!factored_tp_sums(e, p->tp)) continue;
        const float *stat = z->st.s1 + e->stat_at;
        if (e->split == SPLIT_ROW) {
            if (!as_saved) buf_copy(sp, buf + e->tp_at, stat, e->nrows * sizeof *buf);
            own_column_total(z, e, buf + e->tp_at + e->nrows);
        } else if (!as_saved) {
            buf_copy(sp, buf + e->tp_at, stat + e->nrows, (size_t)e->ncols * sizeof *buf);
        }
    }
    struct collectives *tp = z->norm_groups[NORM_OVER_TP];
    struct coll_uncounted quiet = coll_uncounted_begin(tp); /* checkpoint traffic is not a step's */
    tp->all_reduce_sum(tp, buf, p->tp_floats, DTYPE_FP32);
    coll_uncounted_end(quiet);
    for (int i = 0; i < p->n && !as_saved; i++) {
        const struct factored_tensor *e = &p->t[i];
        if (!factored_tp_sums(e, p->tp)) continue;
        float *stat = z->st.s1 + e->stat_at;
        if (e->split == SPLIT_ROW) buf_copy(sp, stat, buf + e->tp_at, e->nrows * sizeof *stat);
        else buf_copy(sp, stat + e->nrows, buf + e->tp_at, (size_t)e->ncols * sizeof *stat);
    }
}
