/* The bf16 tests' shared helpers (after layers_fixture.h): bf16 buffers of
 * fresh random values, their widened copies, and the normwise comparison
 * of two bf16 results (test_bf16_rows_cuda.c, test_v2_flow_cuda.c). */
#ifndef SHARDLAB_TEST_CUDA_BF16_FIXTURE_H
#define SHARDLAB_TEST_CUDA_BF16_FIXTURE_H

#include "dtype.h"
#include "layers_fixture.h"

#define H(n) ((size_t)(n) * sizeof(bf16))
static const double ONE_ROUNDING = 0.0078125; /* 2^-7: a bf16 ulp relative to the max, at most */

/* n values of rand_f32(stream, scale) + offset, rounded to bf16. */
static inline bf16 *rand_bf16(size_t n, uint64_t stream, float scale, float offset) {
    float *f = rand_f32(n, stream, scale);
    bf16 *h = malloc(H(n ? n : 1));
    assert_non_null(h);
    for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16(f[i] + offset);
    free(f);
    return h;
}

static inline float *widened(const bf16 *h, size_t n) {
    float *f = malloc(F(n ? n : 1));
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) f[i] = bf16_to_f32(h[i]);
    return f;
}

static inline void expect_close_bf16(const char *what, const bf16 *want, const bf16 *got, size_t n, double rel) {
    float *w = widened(want, n), *g = widened(got, n);
    expect_close(what, w, g, n, rel);
    free(w);
    free(g);
}

#endif
