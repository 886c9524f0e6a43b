/* Optimizer states and the update of one segment, for every update rule
 * of include/optim.h's table: one or two per-element states, fp32 (AdamW's
 * m, v; SGD's and Lion's momentum) or block-wise 8-bit codes with an fp32
 * maximum per block (their 8-bit forms; tensors under min_8bit_size keep
 * fp32 states). States are full at ZeRO-0 and shards otherwise, like the
 * master weights. State 1 uses the signed map, state 2 (AdamW's v) the
 * unsigned one. */
#include <stdio.h>

#include "bufops.h"
#include "zero_parts.h"

static bool sharded(const struct zero *z) { return z->row->shards_optimizer; }
static const struct optim_rule *rule(const struct zero *z) { return optim_rule(z->o.optim.kind); }

/* Adafactor: its plan (include/factored.h), statistics, the first moment
 * when asked, and the step's sums (scratch in the states' space, where
 * the step runs). */
static void factored_alloc(struct zero *z) {
    struct mem_tracker *mem = z->mem;
    const bool sh = sharded(z);
    struct factored_tensor *table = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, "adafactor tensor table",
                                              factored_capacity(&z->segs) * sizeof *table);
    if (!table) return;
    factored_plan_build(&z->fac, table, z->lay, &z->sh, &z->segs, sh);
    const struct factored_plan *p = &z->fac;
    z->st.s1 = mem_alloc(mem, z->space, MEM_OPTIMIZER, sh ? "adafactor R, C of own rows, v (fp32, shard)"
                                                          : "adafactor R, C, v (fp32)", p->stat_floats * 4);
    if (z->o.optim.adafactor_beta1 > 0.0f)
        z->st.s2 = mem_alloc(mem, z->space, MEM_OPTIMIZER, sh ? "adafactor m (fp32, shard)" : "adafactor m (fp32)",
                             (sh ? z->sh.total_shard : z->sh.total_padded) * 4);
    const enum mem_space sp = z->space; /* the step runs there (factored.c) */
    z->fac_sums = mem_alloc(mem, sp, MEM_SCRATCH, "adafactor column and cut-row sums (fp32)", p->slot_floats * 4);
    z->fac_rowsums = mem_alloc(mem, sp, MEM_SCRATCH, "adafactor row sums (fp32)", p->rowsum_floats * 4);
    if (p->tp_floats)
        z->fac_tpsums = mem_alloc(mem, sp, MEM_SCRATCH, "adafactor slices' sums over tp (fp32)", p->tp_floats * 4);
    if (p->tie_floats)
        z->fac_tiesums = mem_alloc(mem, sp, MEM_SCRATCH, "adafactor tied wte's R and C (fp32)", p->tie_floats * 4);
    const size_t squares = (size_t)p->tensors * sizeof *z->fac_squares;
    z->fac_squares = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, "adafactor update squares (fp64 per tensor)", squares);
    z->fac_squares_at = sp == MEM_HOST ? z->fac_squares
                                       : mem_alloc(mem, sp, MEM_SCRATCH, "adafactor update squares (device)", squares);
}

/* Allocation failures are left in the tracker (the caller checks). */
void optstate_alloc(struct zero *z) {
    struct mem_tracker *mem = z->mem;
    enum mem_space sp = z->space;
    const struct optim_rule *r = rule(z);
    if (z->o.optim.kind == OPTIM_ADAFACTOR) {
        factored_alloc(z);
        return;
    }
    float **f32[2] = {&z->st.s1, &z->st.s2};
    char name[MEM_NAME_LEN];
    if (!r->quantized) {
        size_t n = sharded(z) ? z->sh.total_shard : z->sh.total_padded;
        for (int k = 0; k < r->states; k++) {
            snprintf(name, sizeof name, "%s (fp32%s)", r->state_name[k], sharded(z) ? ", shard" : "");
            *f32[k] = mem_alloc(mem, sp, MEM_OPTIMIZER, name, n * 4);
        }
        return;
    }
    const struct opt_segments *g = &z->segs;
    uint8_t **codes[2] = {&z->st.q1, &z->st.q2};
    float **absmax[2] = {&z->st.absmax1, &z->st.absmax2};
    struct qmap_index **index[2] = {&z->qindex_signed, &z->qindex_unsigned};
    float *map[2] = {z->qmap_signed, z->qmap_unsigned};
    for (int k = 0; k < r->states; k++) {
        qmap_dynamic(map[k], k == 0);
        /* host memory whatever sp is: the host builds the index and only the
         * CPU's quantizer reads it (the CUDA one searches the map itself) */
        snprintf(name, sizeof name, "8-bit code search index (%s)", r->state_name[k]);
        *index[k] = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, name, sizeof **index[k]);
        if (*index[k]) qmap_index_build(*index[k], map[k]);
        snprintf(name, sizeof name, "%s (8-bit codes)", r->state_name[k]);
        *codes[k] = mem_alloc(mem, sp, MEM_OPTIMIZER, name, g->n_q);
        snprintf(name, sizeof name, "%s absmax (fp32 per 256)", r->state_name[k]);
        *absmax[k] = mem_alloc(mem, sp, MEM_OPTIMIZER, name, g->n_blocks * 4);
        if (g->n_f32) {
            snprintf(name, sizeof name, "%s (fp32, small tensors)", r->state_name[k]);
            *f32[k] = mem_alloc(mem, sp, MEM_OPTIMIZER, name, g->n_f32 * 4);
        }
    }
}

void optstate_free(struct zero *z) {
    void *bufs[] = {z->st.s1,        z->st.s2,          z->st.q1,        z->st.q2,       z->st.absmax1,
                    z->st.absmax2,   z->qindex_signed,  z->qindex_unsigned, z->fac.t,    z->fac_sums,
                    z->fac_rowsums,  z->fac_tpsums,     z->fac_tiesums, z->fac_squares,
                    z->fac_squares_at != z->fac_squares ? z->fac_squares_at : NULL};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(z->mem, bufs[i]);
}

bool optstate_has(const struct zero *z, enum zero_state which) {
    /* adafactor: its second moment per element (V, factored_segment_moment),
     * and its first moment when it keeps one */
    const bool adafactor = z->o.optim.kind == OPTIM_ADAFACTOR;
    if (which == STATE_OPT1) return rule(z)->states >= 1 || adafactor;
    if (which == STATE_OPT2) return rule(z)->states == 2 || (adafactor && z->o.optim.adafactor_beta1 > 0.0f);
    if (which == STATE_FACTORED) return adafactor;
    return true;
}

/* Where fp32 state element lo of segment g lives in s1/s2. */
static size_t f32_index(const struct zero *z, const struct opt_segment *g) {
    return rule(z)->quantized ? g->f32_offset : g->state_at;
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
    const struct sgd_hparams sh = {.lr = h->lr, .momentum = o->momentum, .weight_decay = hh.weight_decay,
                                   .grad_scale = h->grad_scale, .nesterov = o->nesterov, .first_step = step == 0};
    const struct lion_hparams lh = {.lr = h->lr, .beta1 = h->beta1, .beta2 = h->beta2,
                                    .weight_decay = hh.weight_decay, .grad_scale = h->grad_scale};
    const size_t k = f32_index(z, g);
    /* (no offsets on the NULL of a state the rule does not have) */
    const bool q = g->quantized, two = rule(z)->states == 2;
    uint8_t *q1 = q ? z->st.q1 + g->q_offset : NULL, *q2 = q && two ? z->st.q2 + g->q_offset : NULL;
    float *a1 = q ? z->st.absmax1 + g->block_offset : NULL, *a2 = q && two ? z->st.absmax2 + g->block_offset : NULL;
    /* a quantized rule's small tensors run its 32-bit twin on the fp32 states */
    enum optimizer_kind kind = q || !rule(z)->quantized ? o->kind : rule(z)->twin;
    switch (kind) {
    case OPTIM_ADAMW: adamw_update(&hh, n, w, z->st.s1 + k, z->st.s2 + k, grad, gd, &out, z->flops); break;
    case OPTIM_ADAMW8BIT:
        adamw8bit_update(&hh, n, w, q1, q2, a1, a2, z->qmap_signed, z->qmap_unsigned, z->qindex_signed,
                         z->qindex_unsigned, grad, gd, &out, z->flops);
        break;
    case OPTIM_SGD: sgd_update(&sh, n, w, z->st.s1 + k, grad, gd, &out, z->flops); break;
    case OPTIM_SGD8BIT:
        sgd8bit_update(&sh, n, w, q1, a1, z->qmap_signed, z->qindex_signed, grad, gd, &out, z->flops);
        break;
    case OPTIM_LION: lion_update(&lh, n, w, z->st.s1 + k, grad, gd, &out, z->flops); break;
    case OPTIM_LION8BIT:
        lion8bit_update(&lh, n, w, q1, a1, z->qmap_signed, z->qindex_signed, grad, gd, &out, z->flops);
        break;
    case OPTIM_ADAFACTOR: /* zero_update runs it whole (factored.c) */
    case OPTIM_NUM_KINDS: break;
    }
}

/* The 8-bit forms go through optim.h's codec (adamw8bit_dequantize /
 * _quantize), which runs in the states' space (z->space); the fp32
 * states through buf_copy. Neither reads state memory here. */
_Static_assert((int)OPT8_BLOCK == (int)ADAMW8BIT_BLOCK, "segments and the 8-bit codec block alike");

void optstate_segment_to_fp32(const struct zero *z, enum zero_state which, const struct opt_segment *g, float *d) {
    bool first = which == STATE_OPT1;
    size_t n = g->hi - g->lo;
    if (which == STATE_FACTORED) {
        factored_segment_raw(z, g, d);
        return;
    }
    if (first && z->o.optim.kind == OPTIM_ADAFACTOR) {
        factored_segment_moment(z, g, d);
        return;
    }
    if (!g->quantized) {
        buf_copy(z->space, d, (first ? z->st.s1 : z->st.s2) + f32_index(z, g), n * sizeof *d);
        return;
    }
    adamw8bit_dequantize(z->space, first ? z->qmap_signed : z->qmap_unsigned,
                         (first ? z->st.q1 : z->st.q2) + g->q_offset,
                         (first ? z->st.absmax1 : z->st.absmax2) + g->block_offset, n, d);
}

/* The inverse: copy, or quantize block by block (absmax = max |x|).
 * (Adafactor's V is taken a unit at a time: zero_scatter_unit.) */
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
