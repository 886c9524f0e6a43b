/* The CUDA build's GEMMs and matmul kernels against the CPU's (make
 * cuda-test): gemm_counted on strided operands with every transpose, and
 * matmul_forward/backward, sliced and unsliced, with and without a bias,
 * fp32 and with --gemm_dtype bf16's kernel context (and its bf16-input
 * forms). Inputs, poisoned outputs and the CPU reference:
 * layers_fixture.h. Bounds:
 *   relative 1e-5, normwise (max |gpu - cpu| <= 1e-5 max |cpu| over the
 *     tensor): what a reduction in another order produces: the GEMMs
 *     (cuBLAS vs OpenBLAS, k <= 1000 here)
 *   matmul's dbias: bit for bit up to 256 rows (one chunk of column_sum.h,
 *     the CPU's order), else normwise 1e-5; with bf16 (cuBLASLt's
 *     epilogue where the shape is aligned) normwise 1e-5
 *   the bf16 GEMM path (a kernel context with bf16_gemms): normwise 1e-5
 *     against the CPU's sgemm of the operands rounded to bf16, and more
 *     than 1e-4 away from the unrounded result where k >= 129
 *   FLOP counters: gemm, attention and other equal the CPU's exactly
 * Without a GPU every test says "skipped: no CUDA device" and the program
 * exits 0. */
#include <cuda_runtime.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../model/cuda/layers_cuda.h"
#include "../../model/cpu/layers_cpu.h"
#include "layers.h"
#include "../../model/cuda/kernel_context.h"
#include "dtype.h"
#include "cuda_fixture.h"
#include "layers_fixture.h"

/* ---- GEMMs ---- */
static void test_gemm_counted(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {255, 257, 129}, {64, 768, 1000}}; /* m n k */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            /* strided views: leading dimensions a row plus 3 */
            int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 3, ldc = n + 3;
            int64_t na = (ta ? k : m) * lda, nb = (tb ? n : k) * ldb, nc = m * ldc;
            float *a = rand_f32(na, 60, 1.0f), *b = rand_f32(nb, 61, 1.0f), *c = rand_f32(nc, 62, 1.0f);
            float *d_a = dev_from(a, F(na)), *d_b = dev_from(b, F(nb)), *d_c = dev_from(c, F(nc));
            struct exec_ctx fc = {0}, gc = {0};
            gemm_counted_cuda(&gc, GEMM_ATTENTION, ta, tb, m, n, k, 0.5f, d_a, lda, d_b, ldb, 0.75f, d_c, ldc);
            gemm_counted_cpu(&fc, GEMM_ATTENTION, ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 0.75f, c, ldc);
            float *got = back(d_c, F(nc), "gemm_counted");
            char what[96];
            snprintf(what, sizeof what, "gemm_counted m %lld n %lld k %lld%s%s", (long long)m, (long long)n,
                     (long long)k, ta ? " A^T" : "", tb ? " B^T" : "");
            expect_close(what, c, got, nc, 1e-5);
            expect_flops(what, &fc, &gc);
            assert_true(gc.gemm_seconds > 0.0);
            free(got), cudaFree(d_a), cudaFree(d_b);
            free(a), free(b), free(c);
        }
}

/* x with every element rounded to bf16 (nearest even): what the bf16 GEMM
 * path rounds its operands to. */
static float *rounded_bf16(const float *x, size_t n) {
    float *r = malloc(F(n ? n : 1));
    assert_non_null(r);
    for (size_t i = 0; i < n; i++) r[i] = round_to_bf16(x[i]);
    return r;
}

/* --gemm_dtype bf16 (a run's kernel context with bf16_gemms): a layer GEMM
 * equals the CPU's fp32 sgemm of the operands rounded to bf16 within
 * normwise 1e-5 (the products are exact in fp32; only the order of the
 * fp32 sums differs), and differs from the unrounded operands' result by
 * more than 1e-4 normwise where k >= 129 (the rounding happened: about
 * 2^-9 relative). Strided operands, all four transposes. The attention's
 * GEMMs stay fp32 (GEMM_ATTENTION: test_gemm_counted). */
static void test_gemm_bf16(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    char err[128];
    struct kernel_context *ctx = cuda_kernels_open(true, err, sizeof err);
    if (!ctx) fail_msg("cuda_kernels_open: %s", err);
    const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {255, 257, 129}, {64, 768, 1000}}; /* m n k */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 3, ldc = n + 3;
            int64_t na = (ta ? k : m) * lda, nb = (tb ? n : k) * ldb, nc = m * ldc;
            float *a = rand_f32(na, 90, 1.0f), *b = rand_f32(nb, 91, 1.0f), *c = rand_f32(nc, 92, 1.0f);
            float *ar = rounded_bf16(a, na), *br = rounded_bf16(b, nb), *c32 = malloc(F(nc));
            memcpy(c32, c, F(nc));
            float *d_a = dev_from(a, F(na)), *d_b = dev_from(b, F(nb)), *d_c = dev_from(c, F(nc));
            struct exec_ctx fc = {0}, f32 = {0}, gc = {.kernels = ctx};
            gemm_counted_cuda(&gc, GEMM_LAYER, ta, tb, m, n, k, 0.5f, d_a, lda, d_b, ldb, 0.75f, d_c, ldc);
            gemm_counted_cpu(&fc, GEMM_LAYER, ta, tb, m, n, k, 0.5f, ar, lda, br, ldb, 0.75f, c, ldc);
            gemm_counted_cpu(&f32, GEMM_LAYER, ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 0.75f, c32, ldc);
            float *got = back(d_c, F(nc), "gemm_counted (bf16)");
            char what[96];
            snprintf(what, sizeof what, "gemm_counted bf16 m %lld n %lld k %lld%s%s", (long long)m, (long long)n,
                     (long long)k, ta ? " A^T" : "", tb ? " B^T" : "");
            expect_close(what, c, got, nc, 1e-5);
            expect_flops(what, &fc, &gc);
            if (k >= 129) {
                double scale = 0.0, diff = 0.0;
                for (int64_t i = 0; i < nc; i++) {
                    scale = fmax(scale, fabs(c32[i]));
                    diff = fmax(diff, fabs((double)got[i] - c32[i]));
                }
                if (!(diff > 1e-4 * scale)) fail_msg("%s: within %.3g of the fp32 operands' result: not rounded", what, diff);
            }
            free(got), cudaFree(d_a), cudaFree(d_b);
            free(a), free(b), free(c), free(ar), free(br), free(c32);
        }
    cuda_kernels_close(ctx);
}

/* matmul_forward/backward, fp32 (bf16 0) and with --gemm_dtype bf16's
 * context (bf16 1: each operand rounded once for all its slices' GEMMs),
 * against the CPU on the operands the GPU multiplies (rounded to bf16 for
 * bf16 1), normwise 1e-5. The bias is added in fp32 either way; dbias sums
 * dout in fp32 (bf16 0: column_sum.h's bounds) or, bf16 1, the rounded
 * dout the GEMMs read (in cuBLASLt's epilogue, where the shape is aligned:
 * 64 x 768 -> 1000 must take it; normwise 1e-5, its order is cuBLASLt's). */
static void test_matmul(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    char err[128];
    struct kernel_context *ctx = cuda_kernels_open(true, err, sizeof err);
    if (!ctx) fail_msg("cuda_kernels_open: %s", err);
    /* N C OC max_rows (MATMUL_MAX_DIM: unsliced) */
    const int64_t shapes[][4] = {{1, 1, 1, MATMUL_MAX_DIM}, {7, 257, 255, MATMUL_MAX_DIM}, {64, 768, 1000, 64},
                                 {100, 129, 300, 7}, {513, 64, 65, MATMUL_MAX_DIM}};
    for (int bf = 0; bf < 2; bf++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                int64_t N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2], R = shapes[s][3];
                float *inp = rand_f32(N * C, 70, 1.0f), *w = rand_f32(OC * C, 71, 1.0f);
                float *bias = rand_f32(OC, 72, 1.0f), *dout = rand_f32(N * OC, 73, 1.0f);
                float *dw = rand_f32(OC * C, 74, 1.0f), *db = rand_f32(OC, 75, 1.0f);
                float *out = malloc(F(N * OC)), *dinp = malloc(F(N * C));
                /* what the GPU multiplies */
                float *inp_m = bf ? rounded_bf16(inp, N * C) : inp, *w_m = bf ? rounded_bf16(w, OC * C) : w;
                float *dout_m = bf ? rounded_bf16(dout, N * OC) : dout;
                float *d_inp = dev_from(inp, F(N * C)), *d_w = dev_from(w, F(OC * C));
                float *d_bias = with_bias ? dev_from(bias, F(OC)) : NULL, *d_out = dev_poisoned(F(N * OC));
                struct exec_ctx fc = {0}, gc = {.kernels = bf ? ctx : NULL};
                const char *fwd = bf ? "matmul_forward (bf16)" : "matmul_forward";
                long long epilogues = ctx->bias_epilogues;
                matmul_forward_sliced_cuda(d_out, d_inp, d_w, d_bias, N, C, OC, R, &gc);
                matmul_forward_sliced_cpu(out, inp_m, w_m, with_bias ? bias : NULL, N, C, OC, R, &fc);
                float *got = back(d_out, F(N * OC), fwd);
                expect_close(fwd, out, got, N * OC, 1e-5);
                free(got);
                float *d_dout = dev_from(dout, F(N * OC)), *d_dinp = dev_poisoned(F(N * C));
                float *d_dw = dev_from(dw, F(OC * C)), *d_db = with_bias ? dev_from(db, F(OC)) : NULL;
                matmul_backward_sliced_cuda(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, R, &gc);
                matmul_backward_sliced_cpu(dinp, dw, with_bias ? db : NULL, dout_m, inp_m, w_m, N, C, OC, R, &fc);
                got = back(d_dinp, F(N * C), "matmul_backward dinp");
                expect_close(bf ? "matmul_backward dinp (bf16)" : "matmul_backward dinp", dinp, got, N * C, 1e-5);
                free(got);
                got = back(d_dw, F(OC * C), "matmul_backward dweight");
                expect_close(bf ? "matmul_backward dweight (+=, bf16)" : "matmul_backward dweight (+=)", dw, got,
                             OC * C, 1e-5);
                free(got);
                if (with_bias) {
                    got = back(d_db, F(OC), "matmul_backward dbias");
                    if (bf) expect_close("matmul_backward dbias (+=, bf16)", db, got, OC, 1e-5);
                    else expect_column_sum("matmul_backward dbias (+=)", db, got, OC, N);
                    free(got);
                }
                if (bf && with_bias && C == 768 && ctx->bias_epilogues - epilogues != 2)
                    fail_msg("matmul (bf16, bias) %lld x %lld -> %lld: %lld bias epilogues, expected 2 (forward, "
                             "dweight)", (long long)N, (long long)C, (long long)OC,
                             ctx->bias_epilogues - epilogues);
                expect_flops(bf ? "matmul (bf16)" : "matmul", &fc, &gc);
                if (bf) { /* matmul_*_bf16: the input already bf16 (a saved activation), unsliced */
                    bf16 *xh = malloc((size_t)(N * C) * sizeof *xh);
                    for (int64_t i = 0; i < N * C; i++) xh[i] = f32_to_bf16(inp[i]);
                    bf16 *d_xh = dev_from(xh, (size_t)(N * C) * sizeof *xh);
                    float *d_o2 = dev_poisoned(F(N * OC)), *d_di2 = dev_poisoned(F(N * C));
                    float *d_dw2 = dev_from(dw, F(OC * C)), *d_db2 = dev_from(db, F(OC));
                    float *db2 = malloc(F(OC)), *dw2 = malloc(F(OC * C));
                    memcpy(db2, db, F(OC));
                    memcpy(dw2, dw, F(OC * C));
                    struct exec_ctx f2 = {0}, g2 = {.kernels = ctx};
                    matmul_forward_bf16_cuda(d_o2, d_xh, d_w, d_bias, N, C, OC, &g2);
                    got = back(d_o2, F(N * OC), "matmul_forward_bf16");
                    expect_close("matmul_forward_bf16", out, got, N * OC, 1e-5);
                    free(got);
                    /* the CPU's reference form, dbias from the rounded dout too */
                    matmul_backward_bf16_cpu(dinp, dw2, db2, dout, xh, w, N, C, OC, &f2);
                    matmul_backward_bf16_cuda(d_di2, d_dw2, d_db2, d_dout, d_xh, d_w, N, C, OC, &g2);
                    got = back(d_di2, F(N * C), "matmul_backward_bf16 dinp");
                    expect_close("matmul_backward_bf16 dinp", dinp, got, N * C, 1e-5);
                    free(got);
                    got = back(d_dw2, F(OC * C), "matmul_backward_bf16 dweight");
                    expect_close("matmul_backward_bf16 dweight (+=)", dw2, got, OC * C, 1e-5);
                    free(got);
                    got = back(d_db2, F(OC), "matmul_backward_bf16 dbias");
                    expect_close("matmul_backward_bf16 dbias (+=)", db2, got, OC, 1e-5);
                    free(got);
                    cudaFree(d_xh);
                    free(xh), free(db2), free(dw2);
                }
                cudaFree(d_inp), cudaFree(d_w), cudaFree(d_dout), cudaFree(d_bias); /* back() freed the rest */
                if (bf) free(inp_m), free(w_m), free(dout_m);
                free(inp), free(w), free(bias), free(dout), free(dw), free(db), free(out), free(dinp);
            }
    cuda_kernels_close(ctx);
}

int main(void) {
    seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test_gemm_cuda: seed %llu\n", (unsigned long long)seed);
    const char *why = no_device();
    if (why) printf("test_gemm_cuda: %s: every device test is skipped\n", why);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_counted),
        cmocka_unit_test(test_gemm_bf16),
        cmocka_unit_test(test_matmul),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
