/* Optimizer states and the update of one segment, for the three update
 * rules: AdamW (fp32 m, v), 8-bit AdamW (block-wise quantized m, v; small
 * tensors fp32) and SGD with momentum (fp32 buffer). States are full at
 * ZeRO-0 and shards otherwise, like the master weights. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "optim.h"

size_t zero_state_index(const struct engine *e, int u, size_t i); /* parallel/zero.c */

static bool sharded(const struct engine *e) { return e->stage >= 1; }

void optstate_alloc(struct engine *e) {
    const struct config *c = e->cfg;
    struct mem_tracker *mem = e->mem;
    size_t n = sharded(e) ? e->sh.total_shard : e->sh.total_padded;
    opt_segments_build(&e->segs, &e->lay, &e->sh, e->stage, c);
    switch (c->optimizer) {
    case OPTIM_ADAMW:
        e->st.s1 = mem_alloc(mem, MEM_OPTIMIZER, sharded(e) ? "adam m (fp32, shard)" : "adam m (fp32)", n * 4);
        e->st.s2 = mem_alloc(mem, MEM_OPTIMIZER, sharded(e) ? "adam v (fp32, shard)" : "adam v (fp32)", n * 4);
        break;
    case OPTIM_SGD:
        e->st.s1 = mem_alloc(mem, MEM_OPTIMIZER, sharded(e) ? "sgd momentum (fp32, shard)" : "sgd momentum (fp32)",
                             n * 4);
        break;
    case OPTIM_ADAMW8BIT: {
        const struct opt_segments *g = &e->segs;
        qmap_dynamic(e->qmap_signed, true);
        qmap_dynamic(e->qmap_unsigned, false);
        e->qindex_signed = mem_alloc(mem, MEM_SCRATCH, "8-bit code search index (m)", sizeof *e->qindex_signed);
        e->qindex_unsigned = mem_alloc(mem, MEM_SCRATCH, "8-bit code search index (v)", sizeof *e->qindex_unsigned);
        qmap_index_build(e->qindex_signed, e->qmap_signed);
        qmap_index_build(e->qindex_unsigned, e->qmap_unsigned);
        e->st.q1 = mem_alloc(mem, MEM_OPTIMIZER, "adam m (8-bit codes)", g->n_q);
        e->st.q2 = mem_alloc(mem, MEM_OPTIMIZER, "adam v (8-bit codes)", g->n_q);
        e->st.absmax1 = mem_alloc(mem, MEM_OPTIMIZER, "adam m absmax (fp32 per 256)", g->n_blocks * 4);
        e->st.absmax2 = mem_alloc(mem, MEM_OPTIMIZER, "adam v absmax (fp32 per 256)", g->n_blocks * 4);
        if (g->n_f32) {
            e->st.s1 = mem_alloc(mem, MEM_OPTIMIZER, "adam m (fp32, small tensors)", g->n_f32 * 4);
            e->st.s2 = mem_alloc(mem, MEM_OPTIMIZER, "adam v (fp32, small tensors)", g->n_f32 * 4);
        }
        break;
    }
    }
}

void optstate_free(struct engine *e) {
    void *bufs[] = {e->st.s1, e->st.s2, e->st.q1, e->st.q2, e->st.absmax1, e->st.absmax2, e->qindex_signed,
                    e->qindex_unsigned};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(e->mem, bufs[i]);
    opt_segments_free(&e->segs);
}

bool optstate_has(const struct engine *e, enum engine_state which) {
    return which != STATE_OPT2 || e->cfg->optimizer != OPTIM_SGD;
}

/* Where fp32 state element i of segment g lives in s1/s2. */
static size_t f32_index(const struct engine *e, const struct opt_segment *g, size_t i) {
    if (e->cfg->optimizer == OPTIM_ADAMW8BIT) return g->f32_offset + (i - g->lo);
    return zero_state_index(e, g->unit, i);
}

/* One segment's update: w (fp32 master or params) and grad point at the
 * segment's first element; params_out at its bf16 params (or NULL). */
void optstate_update(struct engine *e, const struct opt_segment *g, const struct adamw_hparams *h, float *w,
                     const void *grad, bf16 *params_out, int64_t step) {
    const struct config *c = e->cfg;
    size_t n = g->hi - g->lo;
    struct param_writeback out = {.params = params_out, .rounding = c->rounding, .seed = (uint64_t)c->seed,
                                  .noise_index = (uint64_t)step * e->lay.total + g->global};
    struct adamw_hparams hh = *h;
    hh.weight_decay = g->decay ? c->weight_decay : 0.0f;
    if (c->optimizer == OPTIM_SGD) {
        struct sgd_hparams sh = {.lr = h->lr, .momentum = c->momentum, .weight_decay = hh.weight_decay,
                                 .grad_scale = h->grad_scale, .nesterov = c->nesterov, .first_step = step == 0};
        sgd_update(&sh, n, w, e->st.s1 + f32_index(e, g, g->lo), grad, c->grad_dtype, &out, e->flops);
    } else if (g->quantized) {
        adamw8bit_update(&hh, n, w, e->st.q1 + g->q_offset, e->st.q2 + g->q_offset, e->st.absmax1 + g->block_offset,
                         e->st.absmax2 + g->block_offset, e->qmap_signed, e->qmap_unsigned, e->qindex_signed,
                         e->qindex_unsigned, grad, c->grad_dtype, &out,
                         e->flops);
    } else {
        size_t k = f32_index(e, g, g->lo);
        adamw_update(&hh, n, w, e->st.s1 + k, e->st.s2 + k, grad, c->grad_dtype, &out, e->flops);
    }
}

/* The fp32 form of optimizer state `which`, indexed like the master weights
 * (dst has total_shard or total_padded elements): a copy, or for 8-bit
 * states the dequantized codes. */
void optstate_to_fp32(const struct engine *e, enum engine_state which, float *dst) {
    bool first = which == STATE_OPT1;
    for (int k = 0; k < e->segs.n; k++) {
        const struct opt_segment *g = &e->segs.seg[k];
        float *d = dst + zero_state_index(e, g->unit, g->lo);
        size_t n = g->hi - g->lo;
        if (!g->quantized) {
            memcpy(d, (first ? e->st.s1 : e->st.s2) + f32_index(e, g, g->lo), n * sizeof *d);
            continue;
        }
        const uint8_t *q = (first ? e->st.q1 : e->st.q2) + g->q_offset;
        const float *absmax = (first ? e->st.absmax1 : e->st.absmax2) + g->block_offset;
        const float *map = first ? e->qmap_signed : e->qmap_unsigned;
        for (size_t i = 0; i < n; i++) d[i] = map[q[i]] * absmax[i / OPT8_BLOCK];
    }
}

/* The inverse: copy, or quantize block by block (absmax = max |x|). */
void optstate_from_fp32(struct engine *e, enum engine_state which, const float *src) {
    bool first = which == STATE_OPT1;
    for (int k = 0; k < e->segs.n; k++) {
        const struct opt_segment *g = &e->segs.seg[k];
        const float *s = src + zero_state_index(e, g->unit, g->lo);
        size_t n = g->hi - g->lo;
        if (!g->quantized) {
            memcpy((first ? e->st.s1 : e->st.s2) + f32_index(e, g, g->lo), s, n * sizeof *s);
            continue;
        }
        uint8_t *q = (first ? e->st.q1 : e->st.q2) + g->q_offset;
        float *absmax = (first ? e->st.absmax1 : e->st.absmax2) + g->block_offset;
        const float *map = first ? e->qmap_signed : e->qmap_unsigned;
        const struct qmap_index *ix = first ? e->qindex_signed : e->qindex_unsigned;
        for (size_t b0 = 0; b0 < n; b0 += OPT8_BLOCK) {
            size_t b1 = b0 + OPT8_BLOCK < n ? b0 + OPT8_BLOCK : n;
            float mx = 0.0f;
            for (size_t i = b0; i < b1; i++) mx = fabsf(s[i]) > mx ? fabsf(s[i]) : mx;
            absmax[b0 / OPT8_BLOCK] = mx;
            for (size_t i = b0; i < b1; i++) q[i] = qmap_nearest_indexed(map, ix, mx > 0.0f ? s[i] / mx : 0.0f);
        }
    }
}
