/* Fully connected layers through OpenBLAS sgemm. Weights are (OC, C) as in
 * llm.c, so the forward is out = inp . W^T. Every GEMM is timed and its
 * 2mnk FLOPs counted, which is where the step's GEMM share comes from.
 *
 * cblas_sgemm takes int sizes, but the N = B T rows may number more than
 * INT_MAX, so they go through sgemm in slices of at most max_rows rows.
 * Only N is sliced: C and OC are sgemm's other sizes and its leading
 * dimensions in every call, so they must fit int as they are. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "layers.h"

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Every size here has passed slice_rows(), so the blasint casts are exact. */
static void sgemm(struct flop_counter *fc, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
                  const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    double t0 = seconds();
    cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, 1.0f, a, (blasint)lda, b, (blasint)ldb,
                beta, c, (blasint)ldc);
    fc->gemm_seconds += seconds() - t0;
    fc->gemm += 2.0 * m * n * k;
}

/* The rows per sgemm call, after checking that the shape can be cut into
 * such calls at all. A shape that cannot is a caller's error with no
 * result to return: say which shape and stop (layers.h documents this). */
static int64_t slice_rows(const char *kernel, int64_t N, int64_t C, int64_t OC, int64_t max_rows) {
    if (N < 0 || C < 1 || OC < 1 || C > MATMUL_MAX_DIM || OC > MATMUL_MAX_DIM || max_rows < 1) {
        fprintf(stderr,
                "%s: shape N %lld x C %lld -> OC %lld (slices of %lld rows) cannot go through cblas_sgemm: "
                "C and OC must be in 1..%lld (its sizes are int), N >= 0 and the slice >= 1 row\n",
                kernel, (long long)N, (long long)C, (long long)OC, (long long)max_rows, (long long)MATMUL_MAX_DIM);
        exit(1);
    }
    return max_rows < MATMUL_MAX_DIM ? max_rows : MATMUL_MAX_DIM;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

void matmul_forward_sliced(float *out, const float *inp, const float *weight, const float *bias, int64_t N,
                           int64_t C, int64_t OC, int64_t max_rows, struct flop_counter *fc) {
    const int64_t rows = slice_rows("matmul_forward", N, C, OC, max_rows);
    for (int64_t r = 0; r < N; r += rows)
        sgemm(fc, CblasNoTrans, CblasTrans, min64(rows, N - r), OC, C, inp + r * C, C, weight, C, 0.0f,
              out + r * OC, OC);
    if (!bias) return;
#pragma omp parallel for
    for (int64_t i = 0; i < N; i++)
        for (int64_t o = 0; o < OC; o++) out[i * OC + o] += bias[o];
    fc->other += (double)N * OC;
}

void matmul_backward_sliced(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, int64_t N, int64_t C, int64_t OC, int64_t max_rows,
                            struct flop_counter *fc) {
    const int64_t rows = slice_rows("matmul_backward", N, C, OC, max_rows);
    /* dinp rows are independent: slicing them changes nothing */
    for (int64_t r = 0; r < N; r += rows)
        sgemm(fc, CblasNoTrans, CblasNoTrans, min64(rows, N - r), C, OC, dout + r * OC, OC, weight, C, 0.0f,
              dinp + r * C, C);
    /* N is the reduction dimension of dweight: each slice adds its part (beta = 1) */
    for (int64_t r = 0; r < N; r += rows)
        sgemm(fc, CblasTrans, CblasNoTrans, OC, C, min64(rows, N - r), dout + r * OC, OC, inp + r * C, C, 1.0f,
              dweight, C);
    if (!dbias) return;
#pragma omp parallel for
    for (int64_t o = 0; o < OC; o++) {
        float s = 0.0f;
        for (int64_t i = 0; i < N; i++) s += dout[i * OC + o];
        dbias[o] += s;
    }
    fc->other += (double)N * OC;
}

void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int64_t N, int64_t C,
                    int64_t OC, struct flop_counter *fc) {
    matmul_forward_sliced(out, inp, weight, bias, N, C, OC, MATMUL_MAX_DIM, fc);
}

void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, int64_t N, int64_t C, int64_t OC, struct flop_counter *fc) {
    matmul_backward_sliced(dinp, dweight, dbias, dout, inp, weight, N, C, OC, MATMUL_MAX_DIM, fc);
}
