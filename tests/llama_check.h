/* Helpers shared by the LLaMA kernel tests (test_llama_kernels.c,
 * test_llama_attention.c): bf16 copies of fp32 inputs, and the bf16 data
 * path's bound against the fp32 kernels (layers.h: LLAMA_BF16_ROUNDING). */
#ifndef SHARDLAB_TESTS_LLAMA_CHECK_H
#define SHARDLAB_TESTS_LLAMA_CHECK_H

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "dtype.h"
#include "layers.h"

/* Below this magnitude a relative bound means nothing (fp32 noise of a
 * sum that cancels); bf16 keeps fp32's exponent range, so no subnormal
 * concern above it. */
#define LLAMA_ABS_FLOOR 1e-6

static inline bf16 *alloc_bf16(size_t n) {
    bf16 *p = calloc(n, sizeof *p);
    if (!p) abort();
    return p;
}

/* dst = src rounded to bf16, and src replaced by those values, so that an
 * fp32 kernel on src sees what a bf16 kernel on dst widens. */
static inline void narrow_inputs(bf16 *dst, float *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        dst[i] = f32_to_bf16(src[i]);
        src[i] = bf16_to_f32(dst[i]);
    }
}

/* How many of got (bf16) lie further than half a bf16 ulp (2^-8 relative)
 * from the fp32 kernel's ref, and how many differ from ref rounded once
 * (the "widen, fp32 kernel, narrow" bits), into *not_bits. */
static inline int bf16_outside_bound(const bf16 *got, const float *ref, size_t n, int *not_bits) {
    int bad = 0;
    *not_bits = 0;
    for (size_t i = 0; i < n; i++) {
        double g = bf16_to_f32(got[i]), r = ref[i];
        if (!(fabs(g - r) <= LLAMA_BF16_ROUNDING * fabs(r) + LLAMA_ABS_FLOOR)) bad++;
        if (got[i] != f32_to_bf16(ref[i])) (*not_bits)++;
    }
    return bad;
}

#endif
