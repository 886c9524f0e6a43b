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

#include "optim.h"
#include "rng.h"

/* Per element: the 14 of adamw.c's update (grad scale, both moments, bias
 * corrected step, decay), 2 dequantize multiplies, 2 absmax maxima, 2 divides
 * by the new absmax and 2 x 2 for the rounding midpoints (add, halve). The
 * compares of the code search are not counted. */
enum { ADAMW8BIT_FLOPS_PER_PARAM = 24 };

size_t adamw8bit_blocks(size_t n) { return (n + ADAMW8BIT_BLOCK - 1) / ADAMW8BIT_BLOCK; }

struct adam_consts {
    float b1, b2, eps, step_size, isb, decay;
};

/* One block's gradients into fp32, times the clipping scale. */
static void load_grad(const void *grad, enum dtype dt, size_t base, size_t len, float gs, float *g) {
    if (dt == DTYPE_FP32) {
        const float *s = (const float *)grad + base;
        for (size_t i = 0; i < len; i++) g[i] = s[i] * gs;
    } else {
        const bf16 *s = (const bf16 *)grad + base;
        for (size_t i = 0; i < len; i++) g[i] = bf16_to_f32(s[i]) * gs;
    }
}

/* The updated fp32 weights of one block into the bf16 params, as adamw.c. */
static void write_params(const struct param_writeback *out, size_t base, size_t len, const float *w) {
    bf16 *p = out->params;
    if (!p) return;
    if (out->rounding == ROUND_NEAREST) {
        for (size_t i = base; i < base + len; i++) p[i] = f32_to_bf16(w[i]);
    } else {
        const uint64_t seed = out->seed, noise = out->noise_index;
        for (size_t i = base; i < base + len; i++)
            p[i] = f32_to_bf16_stochastic(w[i], rng_u32(seed, RNG_STREAM_ROUNDING, noise + i));
    }
}

/* Codes for x[i] / absmax. absmax 0 means the whole block is (signed) zero:
 * store the zero code rather than divide 0 by 0. For m (is_m) the sign fix of
 * bitsandbytes keeps the code's sign equal to m's: a tiny negative m that
 * rounds to the code 0.0 moves one code down, to the smallest negative. */
static void quantize_block(const float *map, const struct qmap_index *ix, float absmax, const float *x, size_t len,
                           bool is_m, uint8_t zero_code, uint8_t *q) {
    if (absmax == 0.0f) {
        for (size_t i = 0; i < len; i++) q[i] = zero_code;
        return;
    }
    for (size_t i = 0; i < len; i++) {
        int c = ix ? qmap_nearest_indexed(map, ix, x[i] / absmax) : qmap_nearest(map, x[i] / absmax);
        if (is_m && !signbit(map[c]) != !signbit(x[i])) c += x[i] > 0.0f ? 1 : -1;
        q[i] = (uint8_t)c;
    }
}

static void update_block(const struct adam_consts *k, size_t len, float *w, uint8_t *q1, uint8_t *q2, float *absmax1,
                         float *absmax2, const float *map_s, const float *map_u, const struct qmap_index *ix_s,
                         const struct qmap_index *ix_u, const float *g, uint8_t zero_s,
                         uint8_t zero_u) {
    float m[ADAMW8BIT_BLOCK], v[ADAMW8BIT_BLOCK];
    const float a1 = *absmax1, a2 = *absmax2;
    float max1 = 0.0f, max2 = 0.0f;
    for (size_t i = 0; i < len; i++) {
        const bool ok = isfinite(g[i]);
        /* same expressions as adamw_element, on the dequantized moments */
        const float mi = ok ? k->b1 * (map_s[q1[i]] * a1) + (1.0f - k->b1) * g[i] : 0.0f;
        const float vi = ok ? k->b2 * (map_u[q2[i]] * a2) + (1.0f - k->b2) * g[i] * g[i] : 0.0f;
        m[i] = mi;
        v[i] = vi;
        max1 = fmaxf(max1, fabsf(mi));
        max2 = fmaxf(max2, vi);
        if (ok) w[i] = w[i] * k->decay - k->step_size * mi / (sqrtf(vi) * k->isb + k->eps);
    }
    *absmax1 = max1;
    *absmax2 = max2;
    quantize_block(map_s, ix_s, max1, m, len, true, zero_s, q1);
    quantize_block(map_u, ix_u, max2, v, len, false, zero_u, q2);
}

void adamw8bit_update(const struct adamw_hparams *h, size_t n, float *w, uint8_t *q1, uint8_t *q2, float *absmax1,
                      float *absmax2, const float *map_signed, const float *map_unsigned,
                      const struct qmap_index *ix_signed, const struct qmap_index *ix_unsigned, const void *grad,
                      enum dtype grad_dtype, const struct param_writeback *out, struct flop_counter *fc) {
    const struct adam_consts k = {
        .b1 = h->beta1,
        .b2 = h->beta2,
        .eps = h->eps,
        .step_size = h->lr / (1.0f - powf(h->beta1, (float)h->t)),
        .isb = 1.0f / sqrtf(1.0f - powf(h->beta2, (float)h->t)),
        .decay = 1.0f - h->lr * h->weight_decay,
    };
    const uint8_t zero_s = qmap_nearest(map_signed, 0.0f), zero_u = qmap_nearest(map_unsigned, 0.0f);
    const size_t nb = adamw8bit_blocks(n);
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        const size_t base = b * ADAMW8BIT_BLOCK;
        const size_t len = n - base < ADAMW8BIT_BLOCK ? n - base : ADAMW8BIT_BLOCK;
        float g[ADAMW8BIT_BLOCK];
        load_grad(grad, grad_dtype, base, len, h->grad_scale, g);
        update_block(&k, len, w + base, q1 + base, q2 + base, absmax1 + b, absmax2 + b, map_signed, map_unsigned,
                     ix_signed, ix_unsigned, g,
                     zero_s, zero_u);
        write_params(out, base, len, w);
    }
    fc->other += (double)ADAMW8BIT_FLOPS_PER_PARAM * (double)n;
}
