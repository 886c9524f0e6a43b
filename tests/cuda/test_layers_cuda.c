/* The CUDA build's layer kernels against the CPU's (make cuda-test).
 *
 * Each CUDA kernel (cuda_*, model/cuda/layers_cuda.h) runs on device copies
 * of random inputs drawn afresh each run (the seed is printed), at several
 * shapes, most of them not multiples of the kernels' blocks of 256; every
 * output is poisoned (0xff bytes) first and has a poisoned guard past its
 * end, which must survive; an accumulated (+=) output starts from random
 * values instead. The reference is the CPU kernel (cpu_*: the files of model/cpu/
 * under layers_rename.h) on the same inputs. Bounds:
 *   bit for bit: the embeddings forward and backward (the backward sums
 *     in the CPU's order), positions_add, GELU forward/backward (and their
 *     forms on bf16 copies), residual,
 *     bias_add, the cross-entropy's row max, exponentials and
 *     target logits, and crossentropy_finish's dlogits (given the same
 *     sums); padding dlogits exactly 0
 *   matmul's dbias and LayerNorm's dweight/dbias (given the same mean and
 *     rstd): bit for bit up to 256 rows (one chunk of column_sum.h, the
 *     CPU's order), else as the next line
 *   relative 1e-5, normwise (max |gpu - cpu| <= 1e-5 max |cpu| over the
 *     tensor): what a reduction in another order produces: the GEMMs
 *     (cuBLAS vs OpenBLAS, k <= 1000 here), LayerNorm's out, mean, rstd
 *     and dinp
 *   relative b(V) = max(1e-5, 4 sqrt(V) 2^-24) per element (5.3e-5 at
 *     V = 50257; the CPU sums V floats left to right): the cross-entropy's
 *     sums and dlogits (the target's column: b |dloss|, as p - 1
 *     cancels), its losses and total (b max(1, |loss|));
 *     crossentropy_finish's losses 1e-6 (CUDA's logf vs glibc's)
 *   the bf16 GEMM path (a kernel context with bf16_gemms): normwise 1e-5
 *     against the CPU's sgemm of the operands rounded to bf16, and more
 *     than 1e-4 away from the unrounded result where k >= 129
 *   FLOP counters: gemm, attention and other equal the CPU's exactly
 * Without a GPU every device test says "skipped: no CUDA device" and the
 * program exits 0. One test needs no GPU and runs everywhere: the layers.h
 * names on host memory are the CPU kernels, bit for bit and FLOP for FLOP
 * (--device cpu in this build). */
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

#include "layers.h"
#include "../../model/cuda/kernel_context.h"
#include "../../model/cuda/layers_cuda.h"
#include "dtype.h"
#include "rng.h"
#include "cuda_fixture.h"

static uint64_t seed; /* set once in main, read by every test */


/* n uniform values in [-scale, scale), stream by stream. */
static float *rand_f32(size_t n, uint64_t stream, float scale) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = (rng_uniform(seed, stream, i) * 2.0f - 1.0f) * scale;
    return x;
}

static int32_t *rand_tokens(size_t n, uint64_t stream, int32_t V) {
    int32_t *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = (int32_t)(rng_u32(seed, stream, i) % (uint32_t)V);
    return x;
}

static void expect_bits(const char *what, const float *want, const float *got, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (f32_bits(want[i]) != f32_bits(got[i]))
            fail_msg("%s: element %zu of %zu: cpu %a, gpu %a (bit for bit expected)", what, i, n, (double)want[i],
                     (double)got[i]);
}

/* Normwise: max |gpu - cpu| <= rel max |cpu|. */
/* A column sum over N rows (model/cuda/column_sum.h): the CPU's bits while
 * the rows fit one chunk (the same order), else normwise 1e-5. */
static void expect_close(const char *what, const float *want, const float *got, size_t n, double rel);
static void expect_column_sum(const char *what, const float *want, const float *got, size_t n, int64_t N) {
    if (N <= 256) expect_bits(what, want, got, n);
    else expect_close(what, want, got, n, 1e-5);
}

static void expect_close(const char *what, const float *want, const float *got, size_t n, double rel) {
    struct normwise e = normwise_diff(want, got, n, 0.0);
    if (!(e.worst <= rel * e.scale))
        fail_msg("%s: element %zu of %zu: cpu %.9g, gpu %.9g: |diff| %.3g > %.0e x max|cpu| %.3g", what, e.at, n,
                 (double)want[e.at], (double)got[e.at], e.worst, rel, e.scale);
}

static void expect_flops(const char *what, const struct flop_counter *want, const struct flop_counter *got) {
    if (want->gemm != got->gemm || want->attention != got->attention || want->other != got->other)
        fail_msg("%s: FLOPs gemm/attention/other: cpu %.17g/%.17g/%.17g, gpu %.17g/%.17g/%.17g", what, want->gemm,
                 want->attention, want->other, got->gemm, got->attention, got->other);
}

#define F(n) ((size_t)(n) * sizeof(float))
#define I(n) ((size_t)(n) * sizeof(int32_t))

/* ---- embeddings: every result bit for bit ---- */
static void test_encoder(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    const int64_t shapes[][4] = {{1, 1, 1, 1}, {2, 3, 257, 5}, {3, 129, 255, 50}, {4, 64, 768, 1000}}; /* B T C V */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], V = shapes[s][3], BT = B * T;
        float *wte = rand_f32(V * C, 1, 1.0f), *wpe = rand_f32(T * C, 2, 1.0f), *dout = rand_f32(BT * C, 3, 1.0f);
        float *dwte = rand_f32(V * C, 4, 1.0f), *dwpe = rand_f32(T * C, 5, 1.0f), *want = malloc(F(BT * C));
        int32_t *inp = rand_tokens(BT, 6 + s, (int32_t)V); /* few tokens: many repeats */
        float *d_wte = dev_from(wte, F(V * C)), *d_wpe = dev_from(wpe, F(T * C)), *d_dout = dev_from(dout, F(BT * C));
        int32_t *d_inp = dev_from(inp, I(BT));
        /* encoder_forward */
        float *d_out = dev_poisoned(F(BT * C));
        cuda_encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C);
        cpu_encoder_forward(want, inp, wte, wpe, B, T, C);
        float *got = back(d_out, F(BT * C), "encoder_forward");
        expect_bits("encoder_forward", want, got, BT * C);
        free(got);
        /* embedding_rows_forward on the slice [v0, v0 + rows), then positions_add */
        int64_t v0 = V / 3, rows = V - V / 3 - V / 4;
        d_out = dev_poisoned(F(BT * C));
        cuda_embedding_rows_forward(d_out, d_inp, d_wte + v0 * C, v0, rows, BT, C);
        cuda_positions_add(d_out, d_wpe, B, T, C);
        cpu_embedding_rows_forward(want, inp, wte + v0 * C, v0, rows, BT, C, NULL);
        cpu_positions_add(want, wpe, B, T, C, NULL);
        got = back(d_out, F(BT * C), "embedding_rows_forward + positions_add");
        expect_bits("embedding_rows_forward + positions_add", want, got, BT * C);
        free(got);
        /* encoder_backward: accumulated into random gradients */
        float *d_dwte = dev_from(dwte, F(V * C)), *d_dwpe = dev_from(dwpe, F(T * C));
        float *w_dwte = malloc(F(V * C)), *w_dwpe = malloc(F(T * C));
        memcpy(w_dwte, dwte, F(V * C));
        memcpy(w_dwpe, dwpe, F(T * C));
        cuda_encoder_backward(d_dwte, d_dwpe, d_dout, d_inp, B, T, C);
        cpu_encoder_backward(w_dwte, w_dwpe, dout, inp, B, T, C);
        got = back(d_dwte, F(V * C), "encoder_backward dwte");
        expect_bits("encoder_backward dwte", w_dwte, got, V * C);
        free(got);
        got = back(d_dwpe, F(T * C), "encoder_backward dwpe");
        expect_bits("encoder_backward dwpe", w_dwpe, got, T * C);
        free(got);
        /* embedding_rows_backward on the slice */
        d_dwte = dev_from(dwte, F(rows * C));
        d_dwpe = dev_from(dwpe, F(T * C));
        memcpy(w_dwte, dwte, F(rows * C));
        memcpy(w_dwpe, dwpe, F(T * C));
        cuda_embedding_rows_backward(d_dwte, d_dwpe, d_dout, d_inp, v0, rows, B, T, C);
        cpu_embedding_rows_backward(w_dwte, w_dwpe, dout, inp, v0, rows, B, T, C, NULL);
        got = back(d_dwte, F(rows * C), "embedding_rows_backward dwte");
        expect_bits("embedding_rows_backward dwte", w_dwte, got, rows * C);
        free(got);
        got = back(d_dwpe, F(T * C), "embedding_rows_backward dwpe");
        expect_bits("embedding_rows_backward dwpe", w_dwpe, got, T * C);
        free(got);
        cudaFree(d_wte), cudaFree(d_wpe), cudaFree(d_dout), cudaFree(d_inp);
        free(wte), free(wpe), free(dout), free(dwte), free(dwpe), free(want), free(inp), free(w_dwte), free(w_dwpe);
    }
}

/* ---- LayerNorm ---- */
static void test_layernorm(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    const int64_t shapes[][2] = {{1, 1}, {3, 255}, {7, 257}, {64, 768}, {5, 1000}, {300, 3}, {2000, 77}}; /* N C */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t N = shapes[s][0], C = shapes[s][1];
        float *inp = rand_f32(N * C, 10 + s, 3.0f), *w = rand_f32(C, 20, 1.0f), *b = rand_f32(C, 21, 1.0f);
        float *dout = rand_f32(N * C, 22, 1.0f), *dinp = rand_f32(N * C, 23, 1.0f);
        float *dw = rand_f32(C, 24, 1.0f), *db = rand_f32(C, 25, 1.0f);
        float *out = malloc(F(N * C)), *mean = malloc(F(N)), *rstd = malloc(F(N));
        struct flop_counter fc = {0}, gc = {0};
        float *d_inp = dev_from(inp, F(N * C)), *d_w = dev_from(w, F(C)), *d_b = dev_from(b, F(C));
        float *d_out = dev_poisoned(F(N * C)), *d_mean = dev_poisoned(F(N)), *d_rstd = dev_poisoned(F(N));
        cuda_layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C, &gc);
        cpu_layernorm_forward(out, mean, rstd, inp, w, b, N, C, &fc);
        float *got = back(d_out, F(N * C), "layernorm_forward out");
        expect_close("layernorm_forward out", out, got, N * C, 1e-5);
        free(got);
        got = back(d_mean, F(N), "layernorm_forward mean");
        expect_close("layernorm_forward mean", mean, got, N, 1e-5);
        free(got);
        got = back(d_rstd, F(N), "layernorm_forward rstd");
        expect_close("layernorm_forward rstd", rstd, got, N, 1e-5);
        free(got);
        /* backward from the CPU's mean and rstd, so dweight and dbias are exact */
        float *d_dout = dev_from(dout, F(N * C)), *d_dinp = dev_from(dinp, F(N * C));
        float *d_dw = dev_from(dw, F(C)), *d_db = dev_from(db, F(C));
        d_mean = dev_from(mean, F(N));
        d_rstd = dev_from(rstd, F(N));
        cuda_layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, &gc);
        cpu_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, &fc);
        got = back(d_dinp, F(N * C), "layernorm_backward dinp");
        expect_close("layernorm_backward dinp (+=)", dinp, got, N * C, 1e-5);
        free(got);
        got = back(d_dw, F(C), "layernorm_backward dweight");
        expect_column_sum("layernorm_backward dweight (+=)", dw, got, C, N);
        free(got);
        got = back(d_db, F(C), "layernorm_backward dbias");
        expect_column_sum("layernorm_backward dbias (+=)", db, got, C, N);
        free(got);
        expect_flops("layernorm", &fc, &gc);
        cudaFree(d_inp), cudaFree(d_w), cudaFree(d_b), cudaFree(d_mean), cudaFree(d_rstd), cudaFree(d_dout);
        free(inp), free(w), free(b), free(dout), free(dinp), free(dw), free(db), free(out), free(mean), free(rstd);
    }
}

/* ---- GELU, residual, bias_add: elementwise, bit for bit ---- */
static void test_elementwise(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    const int64_t sizes[] = {1, 255, 256, 257, 4099, 65537};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *x = rand_f32(n, 30 + s, 6.0f), *y = rand_f32(n, 40 + s, 1.0f), *want = malloc(F(n));
        struct flop_counter fc = {0}, gc = {0};
        float *d_x = dev_from(x, F(n)), *d_y = dev_from(y, F(n)), *d_o = dev_poisoned(F(n));
        cuda_gelu_forward(d_o, d_x, n, &gc);
        cpu_gelu_forward(want, x, n, &fc);
        float *got = back(d_o, F(n), "gelu_forward");
        expect_bits("gelu_forward", want, got, n);
        free(got);
        d_o = dev_poisoned(F(n));
        cuda_gelu_backward(d_o, d_x, d_y, n, &gc);
        cpu_gelu_backward(want, x, y, n, &fc);
        got = back(d_o, F(n), "gelu_backward");
        expect_bits("gelu_backward", want, got, n);
        free(got);
        cuda_gelu_backward(d_y, d_x, d_y, n, &gc); /* in place: dinp aliases dout */
        memcpy(want, y, F(n));
        cpu_gelu_backward(want, x, want, n, &fc);
        got = back(d_y, F(n), "gelu_backward in place");
        expect_bits("gelu_backward in place", want, got, n);
        free(got);
        d_y = dev_from(y, F(n));
        d_o = dev_poisoned(F(n));
        cuda_residual_forward(d_o, d_x, d_y, n, &gc);
        cpu_residual_forward(want, x, y, n, &fc);
        got = back(d_o, F(n), "residual_forward");
        expect_bits("residual_forward", want, got, n);
        free(got);
        /* bias_add: N rows of 257 columns in the first N*257 elements (1 x n when n < 257) */
        int64_t OC = n < 257 ? n : 257, N = n / OC;
        float *bias = rand_f32(OC, 50, 1.0f), *d_bias = dev_from(bias, F(OC));
        d_o = dev_from(x, F(n));
        memcpy(want, x, F(n));
        cuda_bias_add(d_o, d_bias, N, OC, &gc);
        cpu_bias_add(want, bias, N, OC, &fc);
        got = back(d_o, F(n), "bias_add");
        expect_bits("bias_add", want, got, n);
        free(got);
        expect_flops("gelu, residual, bias_add", &fc, &gc);
        cudaFree(d_x), cudaFree(d_y), cudaFree(d_bias);
        free(x), free(y), free(want), free(bias);
    }
}

/* ---- GELU on the saved bf16 copies: the CPU's bits, at sizes with and
 * without a tail for the four-a-thread kernels, and from an odd start
 * (a view one element in: the scalar kernels alone) ---- */
static void test_gelu_bf16(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    const int64_t sizes[] = {1, 4, 257, 4099, 65536};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int64_t off = 0; off < 2; off++) {
            int64_t n = sizes[s], tot = n + off;
            float *x = rand_f32(tot, 130 + s, 6.0f), *y = rand_f32(tot, 140 + s, 1.0f), *want = malloc(F(tot));
            bf16 *out = malloc(tot * sizeof *out), *pre = malloc(tot * sizeof *pre);
            struct flop_counter fc = {0}, gc = {0};
            float *d_x = dev_from(x, F(tot));
            bf16 *d_out = dev_poisoned(tot * sizeof *d_out), *d_pre = dev_poisoned(tot * sizeof *d_pre);
            cuda_gelu_forward_bf16(d_out + off, d_pre + off, d_x + off, n, &gc);
            cpu_gelu_forward_bf16(out + off, pre + off, x + off, n, &fc);
            bf16 *got = (bf16 *)back(d_out, tot * sizeof *got, "gelu_forward_bf16 out");
            assert_memory_equal(got + off, out + off, n * sizeof *got);
            free(got);
            got = (bf16 *)back(d_pre, tot * sizeof *got, "gelu_forward_bf16 pre_store");
            assert_memory_equal(got + off, pre + off, n * sizeof *got);
            free(got);
            /* the backward from that saved copy, in place (dinp aliases dout) */
            bf16 *d_saved = dev_from(pre, tot * sizeof *pre);
            float *d_y = dev_from(y, F(tot));
            cuda_gelu_backward_bf16(d_y + off, d_saved + off, d_y + off, n, &gc);
            memcpy(want, y, F(tot));
            cpu_gelu_backward_bf16(want + off, pre + off, want + off, n, &fc);
            float *g = back(d_y, F(tot), "gelu_backward_bf16");
            expect_bits("gelu_backward_bf16", want + off, g + off, n);
            free(g);
            expect_flops("gelu (bf16 forms)", &fc, &gc);
            cudaFree(d_x), cudaFree(d_saved);
            free(x), free(y), free(want), free(out), free(pre);
        }
}

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
            struct flop_counter fc = {0}, gc = {0};
            cuda_gemm_counted(&gc, GEMM_ATTENTION, ta, tb, m, n, k, 0.5f, d_a, lda, d_b, ldb, 0.75f, d_c, ldc);
            cpu_gemm_counted(&fc, GEMM_ATTENTION, ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 0.75f, c, ldc);
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
            struct flop_counter fc = {0}, f32 = {0}, gc = {.kernels = ctx};
            cuda_gemm_counted(&gc, GEMM_LAYER, ta, tb, m, n, k, 0.5f, d_a, lda, d_b, ldb, 0.75f, d_c, ldc);
            cpu_gemm_counted(&fc, GEMM_LAYER, ta, tb, m, n, k, 0.5f, ar, lda, br, ldb, 0.75f, c, ldc);
            cpu_gemm_counted(&f32, GEMM_LAYER, ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 0.75f, c32, ldc);
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
                struct flop_counter fc = {0}, gc = {.kernels = bf ? ctx : NULL};
                const char *fwd = bf ? "matmul_forward (bf16)" : "matmul_forward";
                long long epilogues = ctx->bias_epilogues;
                cuda_matmul_forward_sliced(d_out, d_inp, d_w, d_bias, N, C, OC, R, &gc);
                cpu_matmul_forward_sliced(out, inp_m, w_m, with_bias ? bias : NULL, N, C, OC, R, &fc);
                float *got = back(d_out, F(N * OC), fwd);
                expect_close(fwd, out, got, N * OC, 1e-5);
                free(got);
                float *d_dout = dev_from(dout, F(N * OC)), *d_dinp = dev_poisoned(F(N * C));
                float *d_dw = dev_from(dw, F(OC * C)), *d_db = with_bias ? dev_from(db, F(OC)) : NULL;
                cuda_matmul_backward_sliced(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, R, &gc);
                cpu_matmul_backward_sliced(dinp, dw, with_bias ? db : NULL, dout_m, inp_m, w_m, N, C, OC, R, &fc);
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
                    struct flop_counter f2 = {0}, g2 = {.kernels = ctx};
                    cuda_matmul_forward_bf16(d_o2, d_xh, d_w, d_bias, N, C, OC, &g2);
                    got = back(d_o2, F(N * OC), "matmul_forward_bf16");
                    expect_close("matmul_forward_bf16", out, got, N * OC, 1e-5);
                    free(got);
                    /* the CPU's reference form, dbias from the rounded dout too */
                    cpu_matmul_backward_bf16(dinp, dw2, db2, dout, xh, w, N, C, OC, &f2);
                    cuda_matmul_backward_bf16(d_di2, d_dw2, d_db2, d_dout, d_xh, d_w, N, C, OC, &g2);
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

/* ---- cross-entropy ---- */

/* The relative bound of a sum of n positive floats: the CPU adds them left
 * to right, whose rounding grows like sqrt(n) u (u = 2^-24) for random
 * data; the GPU's tree is closer. 8 sqrt(n) u: 1e-5 up to n of about 250,
 * 1.07e-4 at GPT-2's 50257 (4 sqrt(n) u, 5.35e-5, was met exactly by one
 * run's fresh inputs on the H100: a dlogit 5.35e-5 off, relative). */
static double sum_bound(int64_t n) { return fmax(1e-5, 8.0 * sqrt((double)n) * ldexp(1.0, -24)); }

/* dlogits per element: rel relative, the target's column rel |dloss|. */
static void expect_dlogits(const char *what, const float *want, const float *got, const int32_t *targets,
                           int64_t N, int64_t Vl, int64_t v0, float dloss, double rel) {
    for (int64_t i = 0; i < N; i++)
        for (int64_t v = 0; v < Vl; v++) {
            double c = want[i * Vl + v], g = got[i * Vl + v];
            double bound = v + v0 == targets[i] ? rel * fabs(dloss) : rel * fabs(c);
            if (!(fabs(g - c) <= bound))
                fail_msg("%s: row %lld column %lld: cpu %.9g, gpu %.9g, |diff| %.3g > %.3g", what, (long long)i,
                         (long long)v, c, g, fabs(g - c), bound);
        }
}

static void expect_rel(const char *what, const float *want, const float *got, int64_t n, double rel) {
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= rel * fabs(want[i])))
            fail_msg("%s: element %lld: cpu %.9g, gpu %.9g (relative bound %.0e)", what, (long long)i,
                     (double)want[i], (double)got[i], rel);
}

/* The GPU's three vocabulary-parallel passes over one whole slice (v0 0,
 * valid V, Vl Vp), from the same logits, give the fused form's losses and
 * dlogits (d_logits, d_losses: its results, left in place) bit for bit:
 * what lets a tp = 1 run take the fused form (model/vocab_parallel.c). */
static void expect_three_passes(const float *logits, const int32_t *d_targets, int64_t N, int64_t V, int64_t Vp,
                                float dloss, const float *d_logits, const float *d_losses) {
    float *d_l3 = dev_from(logits, F(N * Vp)), *d_maxv = dev_poisoned(F(N)), *d_scratch = dev_poisoned(F(2 * N));
    struct flop_counter fc = {0};
    cuda_crossentropy_row_max(d_l3, d_maxv, N, Vp, V);
    cuda_crossentropy_exp_sum(d_l3, d_maxv, d_scratch, d_scratch + N, d_targets, N, Vp, 0, V, dloss != 0.0f);
    cuda_crossentropy_finish(d_l3, d_maxv, d_maxv, d_scratch, d_scratch + N, d_targets, N, Vp, 0, V, dloss, &fc);
    float *fused = malloc(F(N * Vp)), *three = back(d_l3, F(N * Vp), "crossentropy (three passes) dlogits");
    assert_int_equal(cudaMemcpy(fused, d_logits, F(N * Vp), cudaMemcpyDeviceToHost), cudaSuccess);
    expect_bits("crossentropy: three passes vs fused, dlogits", fused, three, N * Vp);
    free(three);
    three = back(d_maxv, F(N), "crossentropy (three passes) losses"); /* finish wrote the losses over the maxima */
    assert_int_equal(cudaMemcpy(fused, d_losses, F(N), cudaMemcpyDeviceToHost), cudaSuccess);
    expect_bits("crossentropy: three passes vs fused, losses", fused, three, N);
    free(three), free(fused);
    cudaFree(d_scratch);
}

static void test_crossentropy(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    /* N V Vp; the last row too long for one block's shared memory (ce_fused, not ce_fused_smem) */
    const int64_t shapes[][3] = {{1, 1, 1}, {3, 257, 264}, {5, 1000, 1024}, {4, 50257, 50304}, {2, 70000, 70016}};
    const float dlosses[] = {0.0f, 1.0f / 32.0f};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int d = 0; d < 2; d++) {
            int64_t N = shapes[s][0], V = shapes[s][1], Vp = shapes[s][2];
            float dloss = dlosses[d];
            float *logits = rand_f32(N * Vp, 80 + s, 8.0f), *losses = malloc(F(N));
            int32_t *targets = rand_tokens(N, 90 + s, (int32_t)V);
            float *d_logits = dev_from(logits, F(N * Vp)), *d_losses = dev_poisoned(F(N));
            int32_t *d_targets = dev_from(targets, I(N));
            struct flop_counter fc = {0}, gc = {0};
            double gtotal = cuda_crossentropy_forward_backward(d_logits, d_losses, d_targets, N, V, Vp, dloss, &gc);
            expect_three_passes(logits, d_targets, N, V, Vp, dloss, d_logits, d_losses);
            double ctotal = cpu_crossentropy_forward_backward(logits, losses, targets, N, V, Vp, dloss, &fc);
            float *got = back(d_losses, F(N), "crossentropy losses");
            double rel = sum_bound(V);
            for (int64_t i = 0; i < N; i++) /* log(sum) carries the sum's relative error as an absolute one */
                if (!(fabs((double)got[i] - losses[i]) <= rel * fmax(1.0, fabs(losses[i]))))
                    fail_msg("crossentropy loss %lld: cpu %.9g, gpu %.9g (bound %.3g)", (long long)i,
                             (double)losses[i], (double)got[i], rel);
            free(got);
            if (!(fabs(gtotal - ctotal) <= rel * fmax(1.0, fabs(ctotal))))
                fail_msg("crossentropy total: cpu %.17g, gpu %.17g", ctotal, gtotal);
            got = back(d_logits, F(N * Vp), "crossentropy dlogits");
            if (dloss != 0.0f) {
                expect_dlogits("crossentropy_forward_backward dlogits", logits, got, targets, N, Vp, 0, dloss, rel);
                for (int64_t i = 0; i < N; i++)
                    for (int64_t v = V; v < Vp; v++) assert_true(f32_bits(got[i * Vp + v]) == 0);
            } else {
                expect_bits("crossentropy_forward_backward (dloss 0: logits unchanged)", logits, got, N * Vp);
            }
            free(got);
            expect_flops("crossentropy_forward_backward", &fc, &gc);
            cudaFree(d_targets);
            free(logits), free(losses), free(targets);
        }
}

/* The three vocabulary-parallel passes on one rank's slice [v0, v0 + Vl) of
 * which `valid` columns are real; each pass from the CPU's inputs. */
static void test_crossentropy_vocab_parallel(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    const int64_t shapes[][4] = {{1, 1, 0, 1}, {3, 264, 300, 257}, {6, 25152, 25152, 25105}}; /* N Vl v0 valid */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t N = shapes[s][0], Vl = shapes[s][1], v0 = shapes[s][2], valid = shapes[s][3];
        float dloss = 1.0f / 8.0f;
        float *logits = rand_f32(N * Vl, 100 + s, 8.0f);
        /* targets on this slice and off it */
        int32_t *targets = rand_tokens(N, 110 + s, (int32_t)(2 * valid));
        for (int64_t i = 0; i < N; i++) targets[i] += (int32_t)(i % 2 ? v0 : v0 + valid);
        float *maxv = malloc(F(N)), *sum = malloc(F(N)), *target = malloc(F(N)), *losses = malloc(F(N));
        float *d_logits = dev_from(logits, F(N * Vl)), *d_maxv = dev_poisoned(F(N));
        int32_t *d_targets = dev_from(targets, I(N));
        cuda_crossentropy_row_max(d_logits, d_maxv, N, Vl, valid);
        cpu_crossentropy_row_max(logits, maxv, N, Vl, valid, NULL);
        float *got = back(d_maxv, F(N), "crossentropy_row_max");
        expect_bits("crossentropy_row_max", maxv, got, N);
        free(got);
        d_maxv = dev_from(maxv, F(N));
        float *d_sum = dev_poisoned(F(N)), *d_target = dev_poisoned(F(N));
        cuda_crossentropy_exp_sum(d_logits, d_maxv, d_sum, d_target, d_targets, N, Vl, v0, valid, true);
        cpu_crossentropy_exp_sum(logits, maxv, sum, target, targets, N, Vl, v0, valid, true, NULL);
        got = back(d_target, F(N), "crossentropy_exp_sum target");
        expect_bits("crossentropy_exp_sum target", target, got, N);
        free(got);
        got = back(d_sum, F(N), "crossentropy_exp_sum sum");
        expect_rel("crossentropy_exp_sum sum", sum, got, N, sum_bound(valid));
        free(got);
        got = back(d_logits, F(N * Vl), "crossentropy_exp_sum exponentials");
        expect_bits("crossentropy_exp_sum exponentials (in place)", logits, got, N * Vl);
        free(got);
        /* finish from the CPU's exponentials, sums, max and target logits */
        d_logits = dev_from(logits, F(N * Vl));
        d_sum = dev_from(sum, F(N));
        d_target = dev_from(target, F(N));
        float *d_losses = dev_poisoned(F(N));
        struct flop_counter fc = {0}, gc = {0};
        double g = cuda_crossentropy_finish(d_logits, d_losses, d_maxv, d_sum, d_target, d_targets, N, Vl, v0, valid,
                                            dloss, &gc);
        double c = cpu_crossentropy_finish(logits, losses, maxv, sum, target, targets, N, Vl, v0, valid, dloss, &fc);
        got = back(d_logits, F(N * Vl), "crossentropy_finish dlogits");
        expect_bits("crossentropy_finish dlogits", logits, got, N * Vl);
        free(got);
        got = back(d_losses, F(N), "crossentropy_finish losses");
        for (int64_t i = 0; i < N; i++)
            if (!(fabs((double)got[i] - losses[i]) <= 1e-6 * fmax(1.0, fabs(losses[i]))))
                fail_msg("crossentropy_finish loss %lld: cpu %.9g, gpu %.9g", (long long)i, (double)losses[i],
                         (double)got[i]);
        free(got);
        if (!(fabs(g - c) <= 1e-6 * fmax(1.0, fabs(c)))) fail_msg("crossentropy_finish total: cpu %.17g, gpu %.17g", c, g);
        expect_flops("crossentropy_finish", &fc, &gc);
        cudaFree(d_maxv), cudaFree(d_sum), cudaFree(d_target), cudaFree(d_targets);
        free(logits), free(targets), free(maxv), free(sum), free(target), free(losses);
    }
}

/* The layers.h names send device pointers to the device: one kernel. */
static void test_dispatch_device(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    int64_t n = 4099;
    float *x = rand_f32(n, 120, 6.0f), *want = malloc(F(n));
    float *d_x = dev_from(x, F(n)), *d_o = dev_poisoned(F(n));
    struct flop_counter fc = {0}, gc = {0};
    gelu_forward(d_o, d_x, n, &gc);
    cpu_gelu_forward(want, x, n, &fc);
    float *got = back(d_o, F(n), "gelu_forward (dispatched)");
    expect_bits("gelu_forward (dispatched to the device)", want, got, n);
    expect_flops("gelu_forward (dispatched)", &fc, &gc);
    free(got), free(x), free(want), cudaFree(d_x);
}

/* Runs everywhere: host pointers take the CPU kernels, bit for bit and
 * FLOP for FLOP, with or without a GPU (--device cpu in this build). */
static void test_dispatch_host(void **state) {
    (void)state;
    const int64_t N = 37, C = 257, OC = 65, V = 300, Vp = 320;
    float *inp = rand_f32(N * C, 130, 2.0f), *w = rand_f32(OC * C, 131, 1.0f), *b = rand_f32(OC, 132, 1.0f);
    float *lw = rand_f32(C, 133, 1.0f), *lb = rand_f32(C, 134, 1.0f);
    float *o1 = malloc(F(N * OC)), *o2 = malloc(F(N * OC)), *n1 = malloc(F(N * C)), *n2 = malloc(F(N * C));
    float *m1 = malloc(F(N)), *m2 = malloc(F(N)), *r1 = malloc(F(N)), *r2 = malloc(F(N));
    struct flop_counter f1 = {0}, f2 = {0};
    layernorm_forward(n1, m1, r1, inp, lw, lb, N, C, &f1);
    cpu_layernorm_forward(n2, m2, r2, inp, lw, lb, N, C, &f2);
    expect_bits("layernorm_forward (host)", n2, n1, N * C);
    expect_bits("layernorm_forward rstd (host)", r2, r1, N);
    matmul_forward(o1, n1, w, b, N, C, OC, &f1);
    cpu_matmul_forward(o2, n2, w, b, N, C, OC, &f2);
    expect_bits("matmul_forward (host)", o2, o1, N * OC);
    gelu_forward(o1, o1, N * OC, &f1);
    cpu_gelu_forward(o2, o2, N * OC, &f2);
    expect_bits("gelu_forward (host)", o2, o1, N * OC);
    float *l1 = rand_f32(N * Vp, 135, 8.0f), *l2 = malloc(F(N * Vp)), *s1 = malloc(F(N)), *s2 = malloc(F(N));
    memcpy(l2, l1, F(N * Vp));
    int32_t *targets = rand_tokens(N, 136, (int32_t)V);
    double t1 = crossentropy_forward_backward(l1, s1, targets, N, V, Vp, 0.5f, &f1);
    double t2 = cpu_crossentropy_forward_backward(l2, s2, targets, N, V, Vp, 0.5f, &f2);
    expect_bits("crossentropy dlogits (host)", l2, l1, N * Vp);
    assert_true(t1 == t2 && t1 > 0.0);
    expect_flops("host dispatch", &f2, &f1);
    assert_true(f1.gemm == 2.0 * N * C * OC && f1.other > 0.0);
    free(inp), free(w), free(b), free(lw), free(lb), free(o1), free(o2), free(n1), free(n2), free(m1), free(m2);
    free(r1), free(r2), free(l1), free(l2), free(s1), free(s2), free(targets);
}

int main(void) {
    seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test_layers_cuda: seed %llu\n", (unsigned long long)seed);
    const char *why = no_device();
    if (why) printf("test_layers_cuda: %s: every device test is skipped\n", why);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encoder),           cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_elementwise),       cmocka_unit_test(test_gemm_counted),
        cmocka_unit_test(test_gemm_bf16),
        cmocka_unit_test(test_gelu_bf16),
        cmocka_unit_test(test_matmul),            cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_crossentropy_vocab_parallel), cmocka_unit_test(test_dispatch_device),
        cmocka_unit_test(test_dispatch_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
