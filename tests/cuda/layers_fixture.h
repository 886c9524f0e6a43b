/* Shared by the tests of the CUDA build's layer kernels against the CPU's
 * (test_layers_cuda.c, test_gemm_cuda.c, test_crossentropy_cuda.c; one
 * program each, make cuda-test).
 *
 * Each CUDA kernel (X_cuda, include/layers.h) runs on device copies
 * of random inputs drawn afresh each run (the seed, set in main, is
 * printed), at several shapes, most of them not multiples of the kernels'
 * blocks of 256; every output is poisoned (0xff bytes) first and has a
 * poisoned guard past its end, which must survive (cuda_fixture.h); an
 * accumulated (+=) output starts from random values instead. The reference
 * is the CPU kernel (X_cpu: model/cpu/)
 * on the same inputs. Here: the random inputs and the comparisons each
 * test states its bounds with. Header-only: the test includes cmocka and
 * cuda_fixture.h first. */
#ifndef SHARDLAB_TEST_CUDA_LAYERS_FIXTURE_H
#define SHARDLAB_TEST_CUDA_LAYERS_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "layers.h"
#include "dtype.h"
#include "rng.h"

static uint64_t seed; /* set once in main, read by every test */

/* n uniform values in [-scale, scale), stream by stream. */
static inline float *rand_f32(size_t n, uint64_t stream, float scale) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = (rng_uniform(seed, stream, i) * 2.0f - 1.0f) * scale;
    return x;
}

static inline int32_t *rand_tokens(size_t n, uint64_t stream, int32_t V) {
    int32_t *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = (int32_t)(rng_u32(seed, stream, i) % (uint32_t)V);
    return x;
}

static inline void expect_bits(const char *what, const float *want, const float *got, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (f32_bits(want[i]) != f32_bits(got[i]))
            fail_msg("%s: element %zu of %zu: cpu %a, gpu %a (bit for bit expected)", what, i, n, (double)want[i],
                     (double)got[i]);
}

/* Normwise: max |gpu - cpu| <= rel max |cpu|. */
static inline void expect_close(const char *what, const float *want, const float *got, size_t n, double rel) {
    struct normwise e = normwise_diff(want, got, n, 0.0);
    if (!(e.worst <= rel * e.scale))
        fail_msg("%s: element %zu of %zu: cpu %.9g, gpu %.9g: |diff| %.3g > %.0e x max|cpu| %.3g", what, e.at, n,
                 (double)want[e.at], (double)got[e.at], e.worst, rel, e.scale);
}

/* A column sum over N rows (model/cuda/column_sum.h): the CPU's bits while
 * the rows fit one chunk (the same order), else normwise 1e-5. */
static inline void expect_column_sum(const char *what, const float *want, const float *got, size_t n, int64_t N) {
    if (N <= 256) expect_bits(what, want, got, n);
    else expect_close(what, want, got, n, 1e-5);
}

static inline void expect_flops(const char *what, const struct exec_ctx *want, const struct exec_ctx *got) {
    if (want->gemm != got->gemm || want->attention != got->attention || want->other != got->other)
        fail_msg("%s: FLOPs gemm/attention/other: cpu %.17g/%.17g/%.17g, gpu %.17g/%.17g/%.17g", what, want->gemm,
                 want->attention, want->other, got->gemm, got->attention, got->other);
}

#define F(n) ((size_t)(n) * sizeof(float))
#define I(n) ((size_t)(n) * sizeof(int32_t))

#endif
