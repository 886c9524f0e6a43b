/* Where a rank's model states live, by the one rule of include/shard.h
 * (rank r of N owns slice r of every unit):
 *   - the shard layout: each unit padded to a multiple of N; where a unit
 *     starts in a full buffer and this rank's slice in a shard buffer;
 *   - the optimizer's segments (include/segments.h): each tensor's part in
 *     this rank's update range (the whole unit at ZeRO-0, else its slice);
 *   - struct zero's places (zero_parts.h): which states the stage's row
 *     shards, and where element i of a unit, a segment's gradient, its
 *     weights and its fp32 optimizer states sit in the rank's buffers.
 * The first two read the layout alone (train/theory/ builds the same
 * segments to predict the bytes). One file because all three answer the
 * step's and the checkpoints' one question: at which index does this rank
 * keep an element. It calls nothing of zero.c or comm.c, which call it. */
#include "zero_parts.h"

/* ---- the shard layout (include/shard.h) */

void shard_layout_init(struct shard_layout *s, const struct model_layout *lay, int N, int rank) {
    s->lay = lay;
    s->N = N;
    s->rank = rank;
    s->total_padded = 0;
    for (int u = 0; u < lay->n_units; u++) s->total_padded += shard_unit_padded(s, u);
    s->total_shard = s->total_padded / (size_t)N;
}

size_t shard_unit_padded(const struct shard_layout *s, int unit) {
    size_t n = layout_unit_size(s->lay, unit), N = (size_t)s->N;
    return (n + N - 1) / N * N;
}

size_t shard_unit_chunk(const struct shard_layout *s, int unit) { return shard_unit_padded(s, unit) / (size_t)s->N; }

/* Units come in kind order (embedding, head, layers) and the layers are
 * all one size, so a unit's offset has a closed form. */
size_t shard_padded_offset(const struct shard_layout *s, int unit) {
    size_t off = 0;
    int e = layout_embed_unit(s->lay), h = layout_head_unit(s->lay);
    if (e >= 0 && unit > e) off += shard_unit_padded(s, e);
    if (h >= 0 && unit > h) off += shard_unit_padded(s, h);
    int first_layer = (e >= 0) + (h >= 0);
    if (unit > first_layer) off += (size_t)(unit - first_layer) * shard_unit_padded(s, first_layer);
    return off;
}

size_t shard_max_unit_padded(const struct shard_layout *s) {
    size_t mx = 0;
    int n = s->lay->n_units < 3 ? s->lay->n_units : 3; /* embedding, head, one layer cover every size */
    for (int u = 0; u < n; u++) mx = shard_unit_padded(s, u) > mx ? shard_unit_padded(s, u) : mx;
    return mx;
}

size_t shard_bucket_elems(const struct shard_layout *s) {
    size_t unit = shard_max_unit_padded(s);
    return unit + (s->N > 1 ? unit / (size_t)s->N : 0);
}

size_t shard_offset(const struct shard_layout *s, int unit) { return shard_padded_offset(s, unit) / (size_t)s->N; }

void shard_owned(const struct shard_layout *s, int unit, int rank, size_t *lo, size_t *hi) {
    size_t chunk = shard_unit_chunk(s, unit), n = layout_unit_size(s->lay, unit);
    *lo = (size_t)rank * chunk;
    *hi = *lo + chunk;
    if (*hi > n) *hi = n;
    if (*lo > *hi) *lo = *hi;
}

/* ---- the optimizer's segments (include/segments.h) */

static void update_range(const struct model_layout *lay, const struct shard_layout *sh, const struct zero_stage *row,
                         int u, size_t *lo, size_t *hi) {
    if (!row->shards_optimizer) { /* every rank updates every element */
        *lo = 0;
        *hi = layout_unit_size(lay, u);
    } else {
        shard_owned(sh, u, sh->rank, lo, hi);
    }
}

size_t opt_segments_capacity(const struct model_layout *lay) {
    size_t n = 0;
    for (int t = 0; t < layout_num_tensors(lay); t++) n += (size_t)layout_tensor(lay, t).sections;
    return n;
}

void opt_segments_build(struct opt_segments *s, struct opt_segment *table, const struct model_layout *lay,
                        const struct shard_layout *sh, const struct zero_stage *row, const struct optim_options *o) {
    s->n = 0;
    s->n_q = s->n_blocks = s->n_f32 = 0;
    s->seg = table;
    for (int t = 0; t < layout_num_tensors(lay); t++) {
        struct tensor_info ti = layout_tensor(lay, t);
        size_t lo, hi, base = layout_unit_offset(lay, ti.unit), section = ti.numel / (size_t)ti.sections;
        update_range(lay, sh, row, ti.unit, &lo, &hi);
        for (int k = 0; k < ti.sections; k++) {
            size_t a = ti.offset - base + (size_t)k * section, b = a + section;
            if (a < lo) a = lo;
            if (b > hi) b = hi;
            if (a >= b) continue;
            struct opt_segment *g = &s->seg[s->n++];
            size_t state_at = !row->shards_optimizer ? shard_padded_offset(sh, ti.unit) + a
                                         : shard_offset(sh, ti.unit) +
                                               (a - (size_t)sh->rank * shard_unit_chunk(sh, ti.unit));
            *g = (struct opt_segment){.unit = ti.unit, .tensor = t, .lo = a, .hi = b, .state_at = state_at,
                                      .global = layout_ref_index(lay, &ti, a - (ti.offset - base))};
            g->decay = o->decay_targets == DECAY_ALL || tensor_is_matrix(&ti);
            g->tp_replicated = ti.split == SPLIT_REPLICATED;
            g->quantized = optim_rule(o->kind)->quantized && ti.numel >= (size_t)o->min_8bit_size;
            if (g->quantized) {
                g->q_offset = s->n_q;
                g->block_offset = s->n_blocks;
                s->n_q += b - a;
                s->n_blocks += (b - a + OPT8_BLOCK - 1) / OPT8_BLOCK;
            } else {
                g->f32_offset = s->n_f32;
                s->n_f32 += b - a;
            }
        }
    }
}

/* ---- struct zero's places: full or sharded by the row (zero_parts.h) */

bool zero_params_sharded(const struct zero *z) { return z->row->shards_params; }
bool zero_grads_sharded(const struct zero *z) { return z->row->shards_grads; }
bool zero_optim_sharded(const struct zero *z) { return z->row->shards_optimizer; }

size_t zero_psize(const struct zero *z) { return dtype_size(z->o.param_dtype); }
size_t zero_gsize(const struct zero *z) { return dtype_size(z->o.grad_dtype); }

/* element i of unit u in a full padded buffer / in this rank's shard */
size_t zero_full_index(const struct zero *z, int u, size_t i) { return shard_padded_offset(&z->sh, u) + i; }
size_t zero_shard_index(const struct zero *z, int u, size_t i) {
    return shard_offset(&z->sh, u) + (i - (size_t)z->sh.rank * shard_unit_chunk(&z->sh, u));
}
size_t zero_param_index(const struct zero *z, int u, size_t i) {
    return zero_params_sharded(z) ? zero_shard_index(z, u, i) : zero_full_index(z, u, i);
}
size_t zero_state_index(const struct zero *z, int u, size_t i) {
    return zero_optim_sharded(z) ? zero_shard_index(z, u, i) : zero_full_index(z, u, i);
}

/* Index of element i (unit-local, in this rank's update range) in the
 * reduced gradients: full (stage 0), the unit's start (stage 1, after the
 * in-place reduce-scatter), or the shard (stages 2, 3). */
size_t zero_grad_index(const struct zero *z, int u, size_t i) {
    switch (z->row->grads) {
    case GRADS_ALL_REDUCE_BUCKETS: return zero_full_index(z, u, i);
    case GRADS_REDUCE_SCATTER_STEP: return zero_full_index(z, u, i - (size_t)z->sh.rank * shard_unit_chunk(&z->sh, u));
    case GRADS_REDUCE_SCATTER_UNIT: break;
    }
    return zero_shard_index(z, u, i);
}

const void *zero_segment_grad(const struct zero *z, const struct opt_segment *g) {
    return (const char *)z->st.grads + zero_grad_index(z, g->unit, g->lo) * zero_gsize(z);
}

float *zero_segment_weights(struct zero *z, const struct opt_segment *g, bf16 **params_out) {
    size_t pi = zero_param_index(z, g->unit, g->lo);
    *params_out = z->st.master ? (bf16 *)z->st.params + pi : NULL;
    return z->st.master ? z->st.master + g->state_at : (float *)z->st.params + pi;
}

/* Where fp32 optimizer state element lo of segment g lives in s1/s2: by
 * segment under an 8-bit rule (its small tensors), else like the master. */
size_t zero_opt_f32_index(const struct zero *z, const struct opt_segment *g) {
    return optim_rule(z->o.optim.kind)->quantized ? g->f32_offset : g->state_at;
}
