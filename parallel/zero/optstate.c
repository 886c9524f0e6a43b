/* Optimizer states and the update of one segment, for the three update
 * rules: AdamW (fp32 m, v), 8-bit AdamW (block-wise quantized m, v; small
 * tensors fp32) and SGD with momentum (fp32 buffer). States are full at
 * ZeRO-0 and shards otherwise, like the master weights. */
#include "bufops.h"
#include "zero_parts.h"

static bool sharded(const struct zero *z) { return z->o.stage >= 1; }

/* Allocation failures are left in the tracker (the caller checks). */
void optstate_alloc(struct zero *z) {
    struct mem_tracker *mem = z->mem;
    enum mem_space sp = z->space;
    size_t n = sharded(z) ? z->sh.total_shard : z->sh.total_padded;
    switch (z->o.optim.kind) {
    case OPTIM_ADAMW:
        z->st.s1 = mem_alloc(mem, sp, MEM_OPTIMIZER, sharded(z) ? "adam m (fp32, shard)" : "adam m (fp32)", n * 4);
        z->st.s2 = mem_alloc(mem, sp, MEM_OPTIMIZER, sharded(z) ? "adam v (fp32, shard)" : "adam v (fp32)", n * 4);
        break;
    case OPTIM_SGD:
        z->st.s1 = mem_alloc(mem, sp, MEM_OPTIMIZER, sharded(z) ? "sgd momentum (fp32, shard)" : "sgd momentum (fp32)",
                             n * 4);
        break;
    case OPTIM_ADAMW8BIT: {
        const struct opt_segments *g = &z->segs;
        qmap_dynamic(z->qmap_signed, true);
        qmap_dynamic(z->qmap_unsigned, false);
        /* host memory whatever sp is: the host builds the index and only the
         * CPU's quantizer reads it (the CUDA one searches the map itself) */
        z->qindex_signed = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, "8-bit code search index (m)",
                                     sizeof *z->qindex_signed);
        z->qindex_unsigned = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, "8-bit code search index (v)",
                                       sizeof *z->qindex_unsigned);
        if (z->qindex_signed) qmap_index_build(z->qindex_signed, z->qmap_signed);
        if (z->qindex_unsigned) qmap_index_build(z->qindex_unsigned, z->qmap_unsigned);
        z->st.q1 = mem_alloc(mem, sp, MEM_OPTIMIZER, "adam m (8-bit codes)", g->n_q);
        z->st.q2 = mem_alloc(mem, sp, MEM_OPTIMIZER, "adam v (8-bit codes)", g->n_q);
        z->st.absmax1 = mem_alloc(mem, sp, MEM_OPTIMIZER, "adam m absmax (fp32 per 256)", g->n_blocks * 4);
        z->st.absmax2 = mem_alloc(mem, sp, MEM_OPTIMIZER, "adam v absmax (fp32 per 256)", g->n_blocks * 4);
        if (g->n_f32) {
            z->st.s1 = mem_alloc(mem, sp, MEM_OPTIMIZER, "adam m (fp32, small tensors)", g->n_f32 * 4);
            z->st.s2 = mem_alloc(mem, sp, MEM_OPTIMIZER, "adam v (fp32, small tensors)", g->n_f32 * 4);
        }
        break;
    }
    }
}

void optstate_free(struct zero *z) {
    void *bufs[] = {z->st.s1, z->st.s2, z->st.q1, z->st.q2, z->st.absmax1, z->st.absmax2, z->qindex_signed,
                    z->qindex_unsigned};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(z->mem, bufs[i]);
}

bool optstate_has(const struct zero *z, enum zero_state which) {
    return which != STATE_OPT2 || z->o.optim.kind != OPTIM_SGD;
}

/* Where fp32 state element lo of segment g lives in s1/s2. */
static size_t f32_index(const struct zero *z, const struct opt_segment *g) {
    return z->o.optim.kind == OPTIM_ADAMW8BIT ? g->f32_offset : g->state_at;
}

void optstate_update(struct zero *z, const struct opt_segment *g, const struct adamw_hparams *h, float *w,
                     const void *grad, bf16 *params_out, int64_t step) {
    const struct optim_options *o = &z->o.optim;
    enum dtype gd = z->o.grad_dtype;
    size_t n = g->hi - g->lo;
    struct param_writeback out = {.params = params_out, .rounding = z->o.rounding, .seed = z->o.seed,
                                  .noise_index = (uint64_t)step * z->lay->ref_total + g->global};
    struct adamw_hparams hh = *h;
    hh.weight_decay = g->decay ? o->weight_decay : 0.0f;
    if (o->kind == OPTIM_SGD) {
        struct sgd_hparams sh = {.lr = h->lr, .momentum = o->momentum, .weight_decay = hh.weight_decay,
                                 .grad_scale = h->grad_scale, .nesterov = o->nesterov, .first_step = step == 0};
        sgd_update(&sh, n, w, z->st.s1 + f32_index(z, g), grad, gd, &out, z->flops);
    } else if (g->quantized) {
        adamw8bit_update(&hh, n, w, z->st.q1 + g->q_offset, z->st.q2 + g->q_offset, z->st.absmax1 + g->block_offset,
                         z->st.absmax2 + g->block_offset, z->qmap_signed, z->qmap_unsigned, z->qindex_signed,
                         z->qindex_unsigned, grad, gd, &out, z->flops);
    } else {
        size_t k = f32_index(z, g);
        adamw_update(&hh, n, w, z->st.s1 + k, z->st.s2 + k, grad, gd, &out, z->flops);
    }
}

/* The 8-bit forms go through optim.h's codec (adamw8bit_dequantize /
 * _quantize), which runs in the states' space (z->space); the fp32
 * states through buf_copy. Neither reads state memory here. */
_Static_assert((int)OPT8_BLOCK == (int)ADAMW8BIT_BLOCK, "segments and the 8-bit codec block alike");

void optstate_segment_to_fp32(const struct zero *z, enum zero_state which, const struct opt_segment *g, float *d) {
    bool first = which == STATE_OPT1;
    size_t n = g->hi - g->lo;
    if (!g->quantized) {
        buf_copy(z->space, d, (first ? z->st.s1 : z->st.s2) + f32_index(z, g), n * sizeof *d);
        return;
    }
    adamw8bit_dequantize(z->space, first ? z->qmap_signed : z->qmap_unsigned,
                         (first ? z->st.q1 : z->st.q2) + g->q_offset,
                         (first ? z->st.absmax1 : z->st.absmax2) + g->block_offset, n, d);
}

/* The inverse: copy, or quantize block by block (absmax = max |x|). */
void optstate_segment_from_fp32(struct zero *z, enum zero_state which, const struct opt_segment *g, const float *s) {
    bool first = which == STATE_OPT1;
    size_t n = g->hi - g->lo;
    if (!g->quantized) {
        buf_copy(z->space, (first ? z->st.s1 : z->st.s2) + f32_index(z, g), s, n * sizeof *s);
        return;
    }
    adamw8bit_quantize(z->space, first ? z->qmap_signed : z->qmap_unsigned,
                       first ? z->qindex_signed : z->qindex_unsigned, s, n, (first ? z->st.q1 : z->st.q2) + g->q_offset,
                       (first ? z->st.absmax1 : z->st.absmax2) + g->block_offset);
}
