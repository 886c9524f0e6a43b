#include "segments.h"

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
