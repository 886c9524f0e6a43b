/* gemm_counted, the one place GEMMs run: each transpose combination on
 * strided views (sub-blocks of wider rows) against a double-precision
 * product, alpha and beta applied, only the view's elements written; 2mnk
 * FLOPs counted into the named kind and nowhere else; exact totals when
 * called from many OpenMP threads at once; the team's blocks right and
 * the same bits on any number of threads; a shape sgemm cannot take is a
 * clear error and exit status 1; a struct operand or struct act_out read
 * as the other dtype, or on another memory space than its call's counter,
 * stops the run. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gradcheck.h"
#include "layers.h"
#include "rng.h"

enum { M = 7, N = 5, K = 9, LD = 13, SENTINEL_ROWS = 9 }; /* LD > M, N, K: every view is strided */

/* op(X)[i][j] of a row-major matrix with leading dimension LD */
static double op_at(const float *x, bool trans, int i, int j) { return trans ? x[j * LD + i] : x[i * LD + j]; }

static void check_product(bool ta, bool tb) {
    struct exec_ctx fc = {0};
    float a[SENTINEL_ROWS * LD * 2], b[SENTINEL_ROWS * LD * 2], c[SENTINEL_ROWS * LD], c0[SENTINEL_ROWS * LD];
    fill_uniform(a, sizeof a / sizeof *a, -1, 1, 1);
    fill_uniform(b, sizeof b / sizeof *b, -1, 1, 2);
    fill_uniform(c0, sizeof c0 / sizeof *c0, -1, 1, 3);
    memcpy(c, c0, sizeof c);
    const float alpha = 0.75f, beta = -0.5f;
    gemm_counted(&fc, GEMM_LAYER, ta, tb, M, N, K, alpha, a, LD, b, LD, beta, c, LD);
    for (int i = 0; i < SENTINEL_ROWS; i++)
        for (int j = 0; j < LD; j++) {
            if (i >= M || j >= N) { /* outside the M x N view: untouched */
                assert_true(c[i * LD + j] == c0[i * LD + j]);
                continue;
            }
            double s = 0;
            for (int p = 0; p < K; p++) s += op_at(a, ta, i, p) * op_at(b, tb, p, j);
            /* K = 9 products of magnitude < 1 in fp32: error ~1e-6 */
            assert_near(c[i * LD + j], alpha * s + beta * c0[i * LD + j], 1e-5);
        }
    assert_true(fc.gemm == 2.0 * M * N * K);
    assert_true(fc.attention == 0.0 && fc.other == 0.0);
    assert_true(fc.gemm_seconds > 0.0);
}

static void test_gemm_nn(void **s) { (void)s; check_product(false, false); }
static void test_gemm_nt(void **s) { (void)s; check_product(false, true); }
static void test_gemm_tn(void **s) { (void)s; check_product(true, false); }
static void test_gemm_tt(void **s) { (void)s; check_product(true, true); }

/* The team's blocks (model/cpu/matmul.c): products large enough to be cut
 * into several blocks along C's columns (n >= m) or rows, on every
 * transpose and on strided views, equal the double product, leave the
 * rest of C alone, and give the same bits on 1, 2 and 3 threads
 * (OpenBLAS's own threaded sgemm does not: the reason for the blocks). */
enum { BK = 70, BLD = 400, BIG = 333, SMALL = 130 };

static void blocked_product(bool ta, bool tb, int m, int n, int threads, const float *a, const float *b,
                            const float *c0, float *c) {
    struct exec_ctx fc = {.gemm_blocks = true};
    memcpy(c, c0, sizeof(float) * BIG * BLD);
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    gemm_counted(&fc, GEMM_LAYER, ta, tb, m, n, BK, 0.75f, a, BLD, b, BLD, -0.5f, c, BLD);
    omp_set_num_threads(saved);
    assert_true(fc.gemm == 2.0 * m * n * BK);
}

static void check_blocks(bool ta, bool tb, int m, int n) {
    size_t len = (size_t)BIG * BLD;
    float *a = malloc(len * sizeof *a), *b = malloc(len * sizeof *b), *c0 = malloc(len * sizeof *c0);
    float *c1 = malloc(len * sizeof *c1), *c = malloc(len * sizeof *c);
    assert_non_null(a && b && c0 && c1 && c);
    fill_uniform(a, len, -1, 1, 11);
    fill_uniform(b, len, -1, 1, 12);
    fill_uniform(c0, len, -1, 1, 13);
    blocked_product(ta, tb, m, n, 1, a, b, c0, c1);
    for (int i = 0; i < BIG; i++)
        for (int j = 0; j < BLD; j++) {
            size_t at = (size_t)i * BLD + (size_t)j;
            if (i >= m || j >= n) {
                assert_true(c1[at] == c0[at]);
                continue;
            }
            double sum = 0;
            for (int p = 0; p < BK; p++)
                sum += (double)(ta ? a[(size_t)p * BLD + i] : a[(size_t)i * BLD + p]) *
                       (tb ? b[(size_t)j * BLD + p] : b[(size_t)p * BLD + j]);
            /* 70 products of magnitude < 1 in fp32: error ~1e-5 at most */
            assert_near(c1[at], 0.75 * sum - 0.5 * c0[at], 1e-4);
        }
    for (int threads = 2; threads <= 3; threads++) {
        blocked_product(ta, tb, m, n, threads, a, b, c0, c);
        assert_memory_equal(c, c1, len * sizeof *c);
    }
    free(a), free(b), free(c0), free(c1), free(c);
}

static void test_gemm_blocks_by_columns(void **s) {
    (void)s;
    for (int t = 0; t < 4; t++) check_blocks(t & 1, t & 2, SMALL, BIG);
}

static void test_gemm_blocks_by_rows(void **s) {
    (void)s;
    for (int t = 0; t < 4; t++) check_blocks(t & 1, t & 2, BIG, SMALL);
}

/* The attention's per-head GEMMs run inside a parallel region: 64 calls
 * over all threads must add exactly 64 x 2mnk, into attention only. */
static void test_gemm_counts_from_threads(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    enum { CALLS = 64, S = 24 };
    float *a = alloc_f(S * S), *b = alloc_f(S * S), *c = alloc_f((size_t)CALLS * S * S);
    fill_uniform(a, S * S, -1, 1, 4);
    fill_uniform(b, S * S, -1, 1, 5);
#pragma omp parallel for num_threads(2)
    for (int i = 0; i < CALLS; i++)
        gemm_counted(&fc, GEMM_ATTENTION, false, true, S, S, S, 1.0f, a, S, b, S, 0.0f, c + (size_t)i * S * S, S);
    assert_true(fc.attention == CALLS * 2.0 * S * S * S);
    assert_true(fc.gemm == 0.0);
    assert_true(fc.gemm_seconds > 0.0);
    for (int i = 1; i < CALLS; i++) /* the same product everywhere */
        assert_memory_equal(c, c + (size_t)i * S * S, sizeof(float) * S * S);
    free(a), free(b), free(c);
}

/* Runs one gemm_counted call with the given shape in a child process and
 * returns its exit status (-1 if it did not exit normally). */
static int child_status(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        struct exec_ctx fc = {0};
        float a[64] = {0}, b[64] = {0}, c[64] = {0};
        gemm_counted(&fc, GEMM_LAYER, false, false, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
        _exit(0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_gemm_rejects_bad_shapes(void **state) {
    (void)state;
    assert_int_equal(child_status(2, 2, 2, 2, 2, 2), 0);                  /* the control passes */
    assert_int_equal(child_status(2, 2, 3, 2, 2, 2), 1);                  /* lda 2 < k 3 */
    assert_int_equal(child_status(2, 3, 2, 2, 2, 3), 1);                  /* ldb 2 < n 3 */
    assert_int_equal(child_status(2, 3, 2, 2, 3, 2), 1);                  /* ldc 2 < n 3 */
    assert_int_equal(child_status(-1, 2, 2, 2, 2, 2), 1);                 /* negative size */
    assert_int_equal(child_status(2, 2, MATMUL_MAX_DIM + 1, 2, 2, 2), 1); /* beyond int */
}

/* Case `which` of misused operands and outputs in a child: 0 the control
 * (each read as its dtype, an op on host tensors with a host counter),
 * 1 fp32 read as bf16, 2 bf16 read as fp32, 3 a device operand with a host
 * counter; the same of an output: 4, 5, 6. Returns the exit status,
 * SIGABRT as -SIGABRT, else -1. */
static int operand_child(int which) {
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        struct exec_ctx fc = {0};
        float x[4] = {0}, y[4] = {0};
        bf16 h[4] = {0};
        bf16 yh[4] = {0};
        struct operand f = operand_f32(x, MEM_HOST), b = operand_bf16(h, MEM_HOST);
        struct act_out o = act_out_f32(y, MEM_HOST), oh = act_out_bf16(yh, MEM_HOST);
        if (which == 0 && (operand_as_f32(f, "test") != x || operand_as_bf16(b, "test") != h)) _exit(2);
        if (which == 0 && (act_out_as_f32(o, "test") != y || act_out_as_bf16(oh, "test") != yh)) _exit(2);
        if (which == 1) operand_as_bf16(f, "test");
        if (which == 2) operand_as_f32(b, "test");
        if (which == 3) f.space = MEM_DEVICE;
        if (which == 4) act_out_as_bf16(o, "test");
        if (which == 5) act_out_as_f32(oh, "test");
        if (which == 6) o.space = MEM_DEVICE;
        matmul_forward_mixed(o, b, f, NULL, 2, 2, 2, &fc);
        _exit(0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid) return -1;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) return -SIGABRT;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_operand_misuse_stops(void **state) {
    (void)state;
    assert_int_equal(operand_child(0), 0);
    for (int which = 1; which <= 6; which++) assert_int_equal(operand_child(which), -SIGABRT);
}

/* matmul_forward/backward_bf16 (the CPU's reference of the GPU's bf16
 * GEMMs reading a saved bf16 activation): bit for bit matmul_forward/
 * backward of the operands rounded to bf16, dbias included (it sums the
 * rounded dout, as the GPU's bias-gradient epilogue does); and not the
 * unrounded product, nor the unrounded dout's sums (the rounding happened). */
static void test_matmul_bf16_operands(void **state) {
    (void)state;
    enum { N = 37, C = 129, OC = 65 };
    static float x[N * C], w[OC * C], dout[N * OC], xr[N * C], wr[OC * C], dr[N * OC];
    static float out[N * OC], want[N * OC], unrounded[N * OC], dinp[N * C], dinp_w[N * C];
    static float dw[OC * C], dw_w[OC * C], db[OC], db_w[OC], scratch_dinp[N * C], scratch_dw[OC * C];
    static bf16 xh[N * C];
    for (int i = 0; i < N * C; i++) {
        x[i] = rng_uniform(5, 0, (uint64_t)i) - 0.5f;
        xh[i] = f32_to_bf16(x[i]);
        xr[i] = bf16_to_f32(xh[i]);
    }
    for (int i = 0; i < OC * C; i++) w[i] = rng_uniform(5, 1, (uint64_t)i) - 0.5f, wr[i] = round_to_bf16(w[i]);
    for (int i = 0; i < N * OC; i++) dout[i] = rng_uniform(5, 2, (uint64_t)i) - 0.5f, dr[i] = round_to_bf16(dout[i]);
    struct exec_ctx fa = {0}, fb = {0};
    matmul_forward_bf16(out, xh, w, NULL, N, C, OC, &fa);
    matmul_forward(want, xr, wr, NULL, N, C, OC, &fb);
    matmul_forward(unrounded, x, w, NULL, N, C, OC, &fb);
    assert_memory_equal(out, want, sizeof out);
    assert_memory_not_equal(out, unrounded, sizeof out);
    matmul_backward_bf16(dinp, dw, db, dout, xh, w, N, C, OC, &fa);
    matmul_backward(dinp_w, dw_w, db_w, dr, xr, wr, N, C, OC, &fb);
    assert_memory_equal(dinp, dinp_w, sizeof dinp);
    assert_memory_equal(dw, dw_w, sizeof dw);
    assert_memory_equal(db, db_w, sizeof db);
    /* the unrounded dout's column sums (the GEMM parts discarded) differ */
    static float db_unrounded[OC];
    matmul_backward(scratch_dinp, scratch_dw, db_unrounded, dout, xr, wr, N, C, OC, &fb);
    assert_memory_not_equal(db, db_unrounded, sizeof db);
    assert_true(fa.gemm == 3.0 * 2.0 * N * C * OC && fa.other == (double)N * OC); /* forward, dinp, dweight; dbias */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_nn),
        cmocka_unit_test(test_gemm_nt),
        cmocka_unit_test(test_gemm_tn),
        cmocka_unit_test(test_gemm_tt),
        cmocka_unit_test(test_gemm_blocks_by_columns),
        cmocka_unit_test(test_gemm_blocks_by_rows),
        cmocka_unit_test(test_gemm_counts_from_threads),
        cmocka_unit_test(test_gemm_rejects_bad_shapes),
        cmocka_unit_test(test_matmul_bf16_operands),
        cmocka_unit_test(test_operand_misuse_stops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
