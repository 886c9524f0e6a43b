/* 8-bit AdamW: block-wise quantized m and v (Dettmers et al. 2021; the
 * per-step algorithm of bitsandbytes' kOptimizerStatic8bit2StateBlockwise,
 * THEORY.md 2.3). One call updates one contiguous range whose element 0 starts
 * block 0; the blocks are independent, so OpenMP splits the range by block.
 *
 * One deliberate difference from bitsandbytes: the decoupled weight decay is
 * applied FIRST, w*(1 - lr*wd), then the Adam step, with the same expression
 * and bias corrections as optim/adamw.c (PyTorch's order; bitsandbytes
 * decays after the step). So adamw8bit differs from adamw only in that m and v
 * are quantized between steps; within a step the moments are fp32. */
#include <math.h>

#include "blockwise8.h"

/* Per element: the 14 of adamw.c's update (grad scale, both moments, bias
 * corrected step, decay), 2 dequantize multiplies, 2 absmax maxima, 2 divides
 * by the new absmax and 2 x 2 for the rounding midpoints (add, halve). The
 * compares of the code search are not counted. */
enum { ADAMW8BIT_FLOPS_PER_PARAM = 24 };

struct adam_consts {
    float b1, b2, eps, step_size, isb, decay;
};

/* The fp32 part of a block's step: m, v in place from their dequantized
 * values to the new moments, w updated; returns the new absmax of m and v.
 * The block maxima are what fmaxf(max, |m|) and fmaxf(max, v) from +0 would
 * give, taken on the bit patterns so the loop vectorizes: for non-negative
 * floats the bits order like the values; a NaN counts as 0 (fmaxf skips
 * it), and a negative v (never made) would lose to +0. */
static void moments_block(const struct adam_consts *k, size_t len, float *restrict w, float *restrict m,
                          float *restrict v, const float *restrict g, float *absmax1, float *absmax2) {
    const float b1 = k->b1, b2 = k->b2, decay = k->decay, step_size = k->step_size, isb = k->isb, eps = k->eps;
    int32_t max1 = 0, max2 = 0; /* signed: GCC 12 vectorizes this reduction, not the unsigned one */
    for (size_t i = 0; i < len; i++) {
        const bool ok = isfinite(g[i]);
        /* same expressions as adamw_element, on the dequantized moments */
        const float mi = ok ? b1 * m[i] + (1.0f - b1) * g[i] : 0.0f;
        const float vi = ok ? b2 * v[i] + (1.0f - b2) * g[i] * g[i] : 0.0f;
        m[i] = mi;
        v[i] = vi;
        int32_t am = (int32_t)(f32_bits(mi) & 0x7fffffffu), av = (int32_t)(f32_bits(vi) & 0x7fffffffu);
        int32_t sv = (int32_t)f32_bits(vi);
        am = am > (int32_t)0x7f800000 ? 0 : am;
        sv = av > (int32_t)0x7f800000 ? 0 : sv;
        max1 = am > max1 ? am : max1;
        max2 = sv > max2 ? sv : max2;
        const float wi = w[i] * decay - step_size * mi / (sqrtf(vi) * isb + eps);
        w[i] = ok ? wi : w[i];
    }
    *absmax1 = f32_from_bits((uint32_t)max1);
    *absmax2 = f32_from_bits((uint32_t)max2);
}

static void update_block(const struct adam_consts *k, size_t len, float *w, uint8_t *q1, uint8_t *q2, float *absmax1,
                         float *absmax2, const float *map_s, const float *map_u, const struct qmap_index *ix_s,
                         const struct qmap_index *ix_u, const float *g, uint8_t zero_s,
                         uint8_t zero_u) {
    float m[ADAMW8BIT_BLOCK], v[ADAMW8BIT_BLOCK];
    blockwise8_dequantize(map_s, ix_s, *absmax1, q1, len, m);
    blockwise8_dequantize(map_u, ix_u, *absmax2, q2, len, v);
    moments_block(k, len, w, m, v, g, absmax1, absmax2);
    blockwise8_quantize(map_s, ix_s, *absmax1, m, len, true, zero_s, q1);
    blockwise8_quantize(map_u, ix_u, *absmax2, v, len, false, zero_u, q2);
}

void adamw8bit_update_cpu(const struct adamw_hparams *h, size_t n, float *w, uint8_t *q1, uint8_t *q2, float *absmax1,
                          float *absmax2, const float *map_signed, const float *map_unsigned,
                          const struct qmap_index *ix_signed, const struct qmap_index *ix_unsigned, const void *grad,
                          enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    const struct adamw_step_consts c = adamw_step_consts(h);
    const struct adam_consts k = {
        .b1 = h->beta1,
        .b2 = h->beta2,
        .eps = h->eps,
        .step_size = c.step_size,
        .isb = c.isb,
        .decay = c.decay,
    };
    const uint8_t zero_s = qmap_nearest(map_signed, 0.0f), zero_u = qmap_nearest(map_unsigned, 0.0f);
    const size_t nb = adamw8bit_blocks(n);
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        const size_t base = b * ADAMW8BIT_BLOCK;
        const size_t len = n - base < ADAMW8BIT_BLOCK ? n - base : ADAMW8BIT_BLOCK;
        float g[ADAMW8BIT_BLOCK];
        blockwise8_load_grad(grad, grad_dtype, base, len, h->grad_scale, g);
        update_block(&k, len, w + base, q1 + base, q2 + base, absmax1 + b, absmax2 + b, map_signed, map_unsigned,
                     ix_signed, ix_unsigned, g,
                     zero_s, zero_u);
        blockwise8_write_params(out, base, len, w);
    }
    fc->other += (double)ADAMW8BIT_FLOPS_PER_PARAM * (double)n;
}
