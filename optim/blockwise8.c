/* The block-wise 8-bit codec as the update rules use it, block by block
 * (optim/blockwise8.h): shared by adamw8bit.c, sgd8bit.c and lion8bit.c,
 * so every 8-bit state is quantized by the same code. */
#include "blockwise8.h"

#include <math.h>

#include "rng.h"

size_t adamw8bit_blocks(size_t n) { return (n + ADAMW8BIT_BLOCK - 1) / ADAMW8BIT_BLOCK; }

void blockwise8_load_grad(const void *grad, enum dtype dt, size_t base, size_t len, float gs, float *g) {
    if (dt == DTYPE_FP32) {
        const float *s = (const float *)grad + base;
        for (size_t i = 0; i < len; i++) g[i] = s[i] * gs;
    } else {
        const bf16 *s = (const bf16 *)grad + base;
        for (size_t i = 0; i < len; i++) g[i] = bf16_to_f32(s[i]) * gs;
    }
}

void blockwise8_write_params(const struct param_writeback *out, size_t base, size_t len, const float *w) {
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

/* absmax 0 means the whole block is (signed) zero: store the zero code
 * rather than divide 0 by 0. Through the index: the vector kernels
 * (optim/qmap_codec.c); without one, the binary search. */
void blockwise8_quantize(const float *map, const struct qmap_index *ix, float absmax, const float *x, size_t len,
                         bool sign_fix, uint8_t zero_code, uint8_t *q) {
    if (absmax == 0.0f) {
        for (size_t i = 0; i < len; i++) q[i] = zero_code;
        return;
    }
    if (ix) {
        qmap_quantize(map, ix, ix->isa, absmax, x, len, sign_fix, q);
        return;
    }
    for (size_t i = 0; i < len; i++) {
        int c = qmap_nearest(map, x[i] / absmax);
        if (sign_fix && !signbit(map[c]) != !signbit(x[i])) c += x[i] > 0.0f ? 1 : -1;
        q[i] = (uint8_t)c;
    }
}

void blockwise8_dequantize(const float *map, const struct qmap_index *ix, float absmax, const uint8_t *q, size_t len,
                           float *x) {
    qmap_dequantize(map, ix, ix ? ix->isa : QMAP_ISA_SCALAR, absmax, q, len, x);
}

/* What fmaxf(max, |x[i]|) from +0 gives, NaN skipped, on the bits (the
 * loop vectorizes). For non-negative floats the bits order like the
 * values; a NaN's magnitude bits exceed +Inf's and count as 0. Signed: GCC
 * vectorizes this reduction, not the unsigned one. */
static float blockwise8_absmax(const float *x, size_t len) {
    enum { ABS_MASK = 0x7fffffff, INF_BITS = 0x7f800000 };
    int32_t mx = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t a = (int32_t)(f32_bits(x[i]) & (uint32_t)ABS_MASK);
        a = a > (int32_t)INF_BITS ? 0 : a;
        mx = a > mx ? a : mx;
    }
    return f32_from_bits((uint32_t)mx);
}

void blockwise8_update_one_state(size_t n, float *w, uint8_t *q, float *absmax, const float *map,
                                 const struct qmap_index *ix, const void *grad, enum dtype grad_dtype,
                                 float grad_scale, const struct param_writeback *out, blockwise8_step step,
                                 const void *consts) {
    const uint8_t zero_code = qmap_nearest(map, 0.0f);
    const size_t nb = adamw8bit_blocks(n);
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        const size_t base = b * ADAMW8BIT_BLOCK;
        const size_t len = n - base < ADAMW8BIT_BLOCK ? n - base : ADAMW8BIT_BLOCK;
        float g[ADAMW8BIT_BLOCK], s[ADAMW8BIT_BLOCK];
        blockwise8_load_grad(grad, grad_dtype, base, len, grad_scale, g);
        blockwise8_dequantize(map, ix, absmax[b], q + base, len, s);
        step(consts, len, w + base, s, g);
        absmax[b] = blockwise8_absmax(s, len);
        blockwise8_quantize(map, ix, absmax[b], s, len, true, zero_code, q + base);
        blockwise8_write_params(out, base, len, w);
    }
}
