/* Every GEMM of the model goes through gemm_counted: it times the sgemm and
 * counts its 2mnk FLOPs, so the step's GEMM share and the FLOP table come
 * from one place. The fully connected layers below use it; so does the
 * attention (attention.c), for its score and value products per head.
 * Weights are (OC, C) as in llm.c, so the forward is out = inp . W^T.
 *
 * cblas_sgemm takes int sizes, but the N = B T rows may number more than
 * INT_MAX, so they go through sgemm in slices of at most max_rows rows.
 * Only N is sliced: C and OC are sgemm's other sizes and its leading
 * dimensions in every call, so they must fit int as they are.
 *
 * A run of more than one thread (fc->gemm_blocks) runs a GEMM in blocks
 * (gemm_blocks): the run's threads take
 * fixed blocks of C's rows or columns one at a time, each block one
 * single-threaded sgemm, instead of OpenBLAS splitting the call by the
 * thread count. Two reasons (docs/THREADS.md):
 *   - a thread that loses its core to another process holds up only the
 *     block it is in; the others take the rest (OpenBLAS's static split
 *     waits for the slow thread's whole half);
 *   - the blocks depend on the shape alone, so the bits of every product
 *     are the same on any number of threads (OpenBLAS's threaded sgemm
 *     rounds differently on 1 and 2 threads: 17,990 of 196,608 outputs of
 *     a 256 x 768 x 256 product, measured), which lets the team shrink and
 *     grow with the machine's load without changing a run's numbers. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "gemm_split.h"
#include "layers_cpu.h"

static bool fits_int(int64_t v, int64_t lo) { return v >= lo && v <= MATMUL_MAX_DIM; }

/* A shape sgemm cannot take (sizes beyond int, a leading dimension shorter
 * than its row) is a caller's error with no result to return: say which
 * and stop (layers.h documents this). */
static void check_shape(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
    int64_t a_cols = ta ? m : k, b_cols = tb ? k : n; /* row-major: a row of op's stored matrix */
    if (fits_int(m, 0) && fits_int(n, 0) && fits_int(k, 0) && fits_int(lda, 1) && fits_int(ldb, 1) &&
        fits_int(ldc, 1) && lda >= a_cols && ldb >= b_cols && ldc >= n)
        return;
    fprintf(stderr,
            "gemm_counted: shape m %lld n %lld k %lld (lda %lld, ldb %lld, ldc %lld%s%s) cannot go through "
            "cblas_sgemm: sizes must be in 0..%lld, leading dimensions in 1..%lld and at least a row long\n",
            (long long)m, (long long)n, (long long)k, (long long)lda, (long long)ldb, (long long)ldc,
            ta ? ", A transposed" : "", tb ? ", B transposed" : "", (long long)MATMUL_MAX_DIM,
            (long long)MATMUL_MAX_DIM);
    exit(1);
}

static void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                (blasint)m, (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c,
                (blasint)ldc);
}

/* A GEMM's blocks (gemm_split.h): about GEMM_BLOCKS of them along C's
 * longer side, each a multiple of GEMM_BLOCK_ALIGN rows or columns (whole
 * register tiles of sgemm's kernels, which pack 4 to 24 rows or columns at
 * a time): enough blocks that a slowed thread's share moves to the others,
 * few enough that each block's sgemm packs its operands at full speed (a
 * step's layer products on 2 threads, AMD EPYC: 138.9 ms with 16 blocks,
 * 144.6 with 8, 145.9 with 4, 152.6 through OpenBLAS's threading at
 * bench-small's shape; 22.1, 22.5, 22.3 and 22.2 ms at the demo's).
 * Splitting the longer side keeps the larger operand packed once: the
 * head's (N, Vp) logits split the vocabulary, so each block packs only its
 * rows of wte. */
static void gemm_blocks(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                        int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    const struct gemm_split s = gemm_split_of(m, n);
    if (s.blocks <= 1) { /* one block: no team to start */
        sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    /* dynamic: a block goes to whichever thread is free, so the partition
     * (and so the bits) never depends on which thread runs it */
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t j = 0; j < s.blocks; j++) {
        int64_t at = gemm_split_at(s, j), len = gemm_split_len(s, j);
        if (s.by_cols) /* C[:, at..at+len) = op(A) op(B)[:, at..) */
            sgemm(trans_a, trans_b, m, len, k, alpha, a, lda, trans_b ? b + at * ldb : b + at, ldb, beta, c + at,
                  ldc);
        else /* C[at..at+len, :) = op(A)[at.., :) op(B) */
            sgemm(trans_a, trans_b, len, n, k, alpha, trans_a ? a + at : a + at * lda, lda, b, ldb, beta,
                  c + at * ldc, ldc);
    }
}

void gemm_counted_cpu(struct exec_ctx *fc, enum gemm_kind kind, bool trans_a, bool trans_b, int64_t m, int64_t n,
                      int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc) {
    check_shape(trans_a, trans_b, m, n, k, lda, ldb, ldc);
    double t0 = monotonic_seconds();
    /* inside a parallel region (the attention's heads) the thread runs its
     * product alone: OpenBLAS's OpenMP build does not start a nested team.
     * One thread: one sgemm (a block repacks an operand: 4% to 16% slower
     * on one thread at the demo's and bench-small's shapes, measured) */
    if (omp_in_parallel() || !fc->gemm_blocks) sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else gemm_blocks(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    /* Inside a parallel region (the attention's per-head GEMMs) every thread
     * runs its own sgemm: each adds its time over the team size, so the sum
     * stays a share of wall time (exact when the team is evenly busy). The
     * FLOPs are whole numbers, so the order of the atomic adds is exact. */
    double share = (monotonic_seconds() - t0) / omp_get_num_threads(), flops = 2.0 * (double)m * (double)n * (double)k;
    double *total = kind == GEMM_ATTENTION ? &fc->attention : &fc->gemm;
#pragma omp atomic
    fc->gemm_seconds += share;
#pragma omp atomic
    *total += flops;
}

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

void matmul_forward_sliced_cpu(float *out, const float *inp, const float *weight, const float *bias, int64_t N,
                               int64_t C, int64_t OC, int64_t max_rows, struct exec_ctx *fc) {
    const int64_t rows = slice_rows("matmul_forward", N, C, OC, max_rows);
    for (int64_t r = 0; r < N; r += rows)
        gemm_counted_cpu(fc, GEMM_LAYER, false, true, min64(rows, N - r), OC, C, 1.0f, inp + r * C, C, weight, C, 0.0f,
                     out + r * OC, OC);
    if (!bias) return;
#pragma omp parallel for
    for (int64_t i = 0; i < N; i++)
        for (int64_t o = 0; o < OC; o++) out[i * OC + o] += bias[o];
    fc->other += (double)N * OC;
}

/* dbias += the column sums of dout (N,OC), each column in row order. */
static void bias_backward(float *dbias, const float *dout, int64_t N, int64_t OC, struct exec_ctx *fc) {
    if (!dbias) return;
#pragma omp parallel for
    for (int64_t o = 0; o < OC; o++) {
        float s = 0.0f;
        for (int64_t i = 0; i < N; i++) s += dout[i * OC + o];
        dbias[o] += s;
    }
    fc->other += (double)N * OC;
}

void matmul_backward_sliced_cpu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                const float *weight, int64_t N, int64_t C, int64_t OC, int64_t max_rows,
                                struct exec_ctx *fc) {
    const int64_t rows = slice_rows("matmul_backward", N, C, OC, max_rows);
    /* dinp rows are independent: slicing them changes nothing */
    for (int64_t r = 0; r < N; r += rows)
        gemm_counted_cpu(fc, GEMM_LAYER, false, false, min64(rows, N - r), C, OC, 1.0f, dout + r * OC, OC, weight, C,
                     0.0f, dinp + r * C, C);
    /* N is the reduction dimension of dweight: each slice adds its part (beta = 1) */
    for (int64_t r = 0; r < N; r += rows)
        gemm_counted_cpu(fc, GEMM_LAYER, true, false, OC, C, min64(rows, N - r), 1.0f, dout + r * OC, OC, inp + r * C,
                     C, 1.0f, dweight, C);
    bias_backward(dbias, dout, N, OC, fc);
}

void matmul_forward_cpu(float *out, const float *inp, const float *weight, const float *bias, int64_t N, int64_t C,
                        int64_t OC, struct exec_ctx *fc) {
    matmul_forward_sliced_cpu(out, inp, weight, bias, N, C, OC, MATMUL_MAX_DIM, fc);
}

void matmul_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                         const float *weight, int64_t N, int64_t C, int64_t OC, struct exec_ctx *fc) {
    matmul_backward_sliced_cpu(dinp, dweight, dbias, dout, inp, weight, N, C, OC, MATMUL_MAX_DIM, fc);
}

void bias_add_cpu(float *out, const float *bias, int64_t N, int64_t OC, struct exec_ctx *fc) {
#pragma omp parallel for
    for (int64_t i = 0; i < N; i++)
        for (int64_t o = 0; o < OC; o++) out[i * OC + o] += bias[o];
    fc->other += (double)N * OC;
}

/* The bf16-operand forms' reference: fp32 copies of the operands as the
 * GPU multiplies them (exact: a bf16 value widens exactly, and the
 * products of two bf16 values are exact in fp32). */
static float *fp32_copy(const char *kernel, size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) {
        fprintf(stderr, "error: %s: out of host memory for %zu fp32 values\n", kernel, n);
        exit(EXIT_FAILURE);
    }
    return p;
}

static float *rounded_copy(const char *kernel, const float *x, size_t n) {
    float *p = fp32_copy(kernel, n);
    for (size_t i = 0; i < n; i++) p[i] = round_to_bf16(x[i]);
    return p;
}

static float *widened_copy(const char *kernel, const bf16 *x, size_t n) {
    float *p = fp32_copy(kernel, n);
    for (size_t i = 0; i < n; i++) p[i] = bf16_to_f32(x[i]);
    return p;
}

void matmul_forward_bf16_cpu(float *out, const bf16 *inp, const float *weight, const float *bias, int64_t N, int64_t C,
                             int64_t OC, struct exec_ctx *fc) {
    const char *k = "matmul_forward_bf16";
    float *x = widened_copy(k, inp, (size_t)(N * C)), *w = rounded_copy(k, weight, (size_t)(OC * C));
    matmul_forward_cpu(out, x, w, bias, N, C, OC, fc);
    free(x);
    free(w);
}

void matmul_backward_bf16_cpu(float *dinp, float *dweight, float *dbias, const float *dout, const bf16 *inp,
                              const float *weight, int64_t N, int64_t C, int64_t OC, struct exec_ctx *fc) {
    const char *k = "matmul_backward_bf16";
    float *x = widened_copy(k, inp, (size_t)(N * C)), *w = rounded_copy(k, weight, (size_t)(OC * C));
    float *d = rounded_copy(k, dout, (size_t)(N * OC));
    matmul_backward_cpu(dinp, dweight, dbias, d, x, w, N, C, OC, fc); /* dbias from the rounded dout too */
    free(x);
    free(w);
    free(d);
}

/* An operand as fp32 values rounded to bf16: a widened copy of a bf16
 * one, or a rounded copy of an fp32 one (free it). */
static float *operand_copy(const char *kernel, struct operand x, size_t n) {
    if (operand_is_bf16(x)) return widened_copy(kernel, operand_as_bf16(x, kernel), n);
    return rounded_copy(kernel, operand_as_f32(x, kernel), n);
}

/* The fp32 result of n values (the GEMM's own temporary when the output is
 * bf16) and its store: narrowed once into a bf16 out (nearest even). */
static float *result_of(const char *kernel, struct act_out out, size_t n) {
    return act_out_is_bf16(out) ? fp32_copy(kernel, n) : act_out_as_f32(out, kernel);
}

static void store_result(const char *kernel, struct act_out out, float *r, size_t n) {
    if (!act_out_is_bf16(out)) return;
    bf16 *y = act_out_as_bf16(out, kernel);
    for (size_t i = 0; i < n; i++) y[i] = f32_to_bf16(r[i]);
    free(r);
}

void matmul_forward_mixed_cpu(struct act_out out, struct operand inp, struct operand weight, const float *bias,
                              int64_t N, int64_t C, int64_t OC, struct exec_ctx *fc) {
    const char *k = "matmul_forward_mixed";
    float *x = operand_copy(k, inp, (size_t)(N * C)), *w = operand_copy(k, weight, (size_t)(OC * C));
    float *y = result_of(k, out, (size_t)(N * OC));
    matmul_forward_cpu(y, x, w, bias, N, C, OC, fc);
    store_result(k, out, y, (size_t)(N * OC));
    free(x);
    free(w);
}

void matmul_backward_mixed_cpu(struct act_out dinp, float *dweight, float *dbias, struct operand dout,
                               struct operand inp, struct operand weight, int64_t N, int64_t C, int64_t OC,
                               struct exec_ctx *fc) {
    const char *k = "matmul_backward_mixed";
    float *x = operand_copy(k, inp, (size_t)(N * C)), *w = operand_copy(k, weight, (size_t)(OC * C));
    float *d = operand_copy(k, dout, (size_t)(N * OC)), *dx = result_of(k, dinp, (size_t)(N * C));
    matmul_backward_cpu(dx, dweight, dbias, d, x, w, N, C, OC, fc);
    store_result(k, dinp, dx, (size_t)(N * C));
    free(x);
    free(w);
    free(d);
}
