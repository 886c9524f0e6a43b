/* Adafactor's plan on a rank (include/factored.h): which tensors it
 * updates a part of, where their statistics and shared sums sit, and
 * whether a model can save the statistics as they are. From the layout and
 * the rank's segments alone, so train/theory/ builds the same plan to
 * count the bytes; the step that runs on it (factored.c) reads struct
 * zero, and nothing here does: include/factored.h's code needs no
 * include/zero.h, which holds the plan. */
#include "factored.h"

/* A matrix's slots: its m columns, then two per rank (first and last row). */
static size_t matrix_slots(const struct tensor_info *ti, int ranks) {
    return tensor_is_matrix(ti) ? (size_t)ti->cols + 2 * (size_t)ranks : 0;
}

/* Padded to a multiple of the ranks, as the ring splits it (and so its
 * volume 2 (N-1)/N x bytes is a whole number of bytes, as the gradients'). */
size_t factored_slot_floats(const struct model_layout *lay, int ranks) {
    size_t n = 0, r = (size_t)ranks;
    for (int t = 0; t < layout_num_tensors(lay); t++) {
        const struct tensor_info ti = layout_tensor(lay, t);
        n += matrix_slots(&ti, ranks);
    }
    return (n + r - 1) / r * r;
}

/* The whole tensor's elements, of which ti is this rank's slice. */
static double whole_numel(const struct model_layout *lay, const struct tensor_info *ti) {
    switch (ti->split) {
    case SPLIT_REPLICATED: return (double)ti->numel;
    case SPLIT_VOCAB: return (double)reference_vocab(&lay->shape) * ti->cols; /* tp pads further: zero rows */
    default: return (double)ti->numel * lay->rank.tp;
    }
}

void factored_plan_build(struct factored_plan *p, struct factored_tensor *table, const struct model_layout *lay,
                         const struct shard_layout *sh, const struct opt_segments *segs, bool sharded) {
    *p = (struct factored_plan){.t = table, .ranks = sharded ? sh->N : 1, .rank = sharded ? sh->rank : 0,
                                .tensors = layout_num_tensors(lay), .tp = lay->rank.tp, .tp_rank = lay->rank.tp_rank};
    int k = 0; /* segments come in tensor order */
    for (int t = 0; t < p->tensors; t++) {
        const struct tensor_info ti = layout_tensor(lay, t);
        const bool matrix = tensor_is_matrix(&ti);
        const size_t slot_at = p->slot_floats;
        p->slot_floats += matrix_slots(&ti, p->ranks);
        if (k >= segs->n || segs->seg[k].tensor != t) continue;
        struct factored_tensor *e = &table[p->n++];
        const size_t t0 = ti.offset - layout_unit_offset(lay, ti.unit);
        *e = (struct factored_tensor){.tensor = t, .first_seg = k, .factored = matrix, .ncols = ti.cols, .t0 = t0,
                                      .a = segs->seg[k].lo - t0, .stat_at = p->stat_floats, .split = ti.split,
                                      .whole = whole_numel(lay, &ti)};
        while (k < segs->n && segs->seg[k].tensor == t) k++;
        e->n_segs = k - e->first_seg;
        e->b = segs->seg[k - 1].hi - t0;
        if (matrix) {
            const size_t m = (size_t)ti.cols;
            e->r0 = e->a / m;
            e->nrows = (e->b - 1) / m - e->r0 + 1;
            e->rowsum_at = p->rowsum_floats;
            e->slot_at = slot_at;
            p->rowsum_floats += e->nrows;
            p->stat_floats += e->nrows + m;
        } else {
            p->stat_floats += e->b - e->a;
        }
        e->tp_at = p->tp_floats;
        p->tp_floats += factored_tp_sums(e, p->tp);
    }
    p->slot_floats = factored_slot_floats(lay, p->ranks);
    p->tp_floats = (p->tp_floats + (size_t)p->tp - 1) / (size_t)p->tp * (size_t)p->tp;
    if (layout_ties(lay) && p->ranks > 1) { /* the tie (include/factored.h) */
        const struct tensor_info w = lay->rank.has_embed ? layout_embed_tensor(lay, EMB_WTE)
                                                         : layout_head_tensor(lay, HEAD_WTE);
        for (int t = 0; t < p->tensors; t++)
            if (layout_tensor(lay, t).offset == w.offset) p->tie_tensor = t;
        p->tie_rows = w.rows, p->tie_cols = w.cols, p->tie_first = lay->rank.has_embed;
        const size_t n = (size_t)w.rows + (size_t)w.cols, r = (size_t)p->ranks;
        p->tie_floats = (n + r - 1) / r * r;
    }
}

bool factored_raw_usable(const struct model_layout *lay) {
    const struct model_shape *s = &lay->shape;
    const size_t tp = (size_t)lay->rank.tp, slice = (size_t)s->Vp / tp;
    return (size_t)s->C >= 2 * tp && shape_pos_rows(s) >= 2 && slice >= 2 &&
           (tp - 1) * slice + 2 <= (size_t)reference_vocab(s);
}
