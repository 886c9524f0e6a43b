/* A vectorisable expf: the softmax over a 50k vocabulary is otherwise the
 * slowest loop of a CPU step. Range reduction x = n ln2 + r, |r| <= ln2/2,
 * then a degree-6 Taylor polynomial (measured error < 2.6e-7 relative, about
 * 2 ulp; tests/test_dtype.c), then scaling by 2^n through the exponent bits.
 * Branch-free so gcc turns loops over it into vector code, given
 * -fno-trapping-math (the Makefile says why): without it GCC 12 keeps the
 * clamps' comparisons as branches and every loop over this scalar. */
#ifndef SHARDLAB_FASTMATH_H
#define SHARDLAB_FASTMATH_H

#include <stdint.h>
#include <string.h>

static inline float fast_expf(float in) {
    /* exp underflows to 0 below about -87.3 and overflows above 88.7. The
     * comparisons are written so a NaN clamps too (to -87): converting a
     * NaN n to int below would be undefined; the NaN is returned at the end. */
    float x = in > -87.0f ? in : -87.0f;
    x = x < 88.0f ? x : 88.0f;
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f; /* ln2 split for exact n*ln2_hi */
    /* round to nearest by the 1.5 * 2^23 trick: vectorises, unlike roundf */
    const float shifter = 12582912.0f;
    float n = (x * log2e + shifter) - shifter;
    float r = x - n * ln2_hi - n * ln2_lo;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return in == in ? p * scale : in; /* NaN in, NaN out (a select: still vector code) */
}

/* tanh(x) = 1 - 2 / (1 + e^{2x}). Absolute error ~1e-7, which is what GELU
 * needs (it uses 0.5 x (1 + tanh)); relative error near 0 is larger. */
static inline float fast_tanhf(float x) { return 1.0f - 2.0f / (1.0f + fast_expf(2.0f * x)); }

#endif
