/* Fully connected layers through OpenBLAS sgemm. Weights are (OC, C) as in
 * llm.c, so the forward is out = inp . W^T. Every GEMM is timed and its
 * 2mnk FLOPs counted, which is where the step's GEMM share comes from. */
#include <cblas.h>
#include <time.h>

#include "layers.h"

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sgemm(struct flop_counter *fc, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k,
                  const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    double t0 = seconds();
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    fc->gemm_seconds += seconds() - t0;
    fc->gemm += 2.0 * m * n * k;
}

void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C, int OC,
                    struct flop_counter *fc) {
    sgemm(fc, CblasNoTrans, CblasTrans, N, OC, C, inp, C, weight, C, 0.0f, out, OC);
    if (!bias) return;
#pragma omp parallel for
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) out[(size_t)i * OC + o] += bias[o];
    fc->other += (double)N * OC;
}

void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, int N, int C, int OC, struct flop_counter *fc) {
    sgemm(fc, CblasNoTrans, CblasNoTrans, N, C, OC, dout, OC, weight, C, 0.0f, dinp, C);
    sgemm(fc, CblasTrans, CblasNoTrans, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
    if (!dbias) return;
#pragma omp parallel for
    for (int o = 0; o < OC; o++) {
        float s = 0.0f;
        for (int i = 0; i < N; i++) s += dout[(size_t)i * OC + o];
        dbias[o] += s;
    }
    fc->other += (double)N * OC;
}
