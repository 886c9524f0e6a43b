/* The CUDA build's embedding, LayerNorm and elementwise kernels against
 * the CPU's, and the layers.h names' dispatch (make cuda-test). Inputs,
 * poisoned outputs and the CPU reference: layers_fixture.h. The GEMMs and
 * matmul are in test_gemm_cuda.c, the cross-entropy in
 * test_crossentropy_cuda.c. Bounds:
 *   bit for bit: the embeddings forward and backward (the backward sums
 *     in the CPU's order), positions_add, GELU forward/backward (and their
 *     forms on bf16 copies), residual, bias_add
 *   LayerNorm's dweight/dbias (given the same mean and rstd): bit for bit
 *     up to 256 rows (one chunk of column_sum.h, the CPU's order), else as
 *     the next line
 *   relative 1e-5, normwise (max |gpu - cpu| <= 1e-5 max |cpu| over the
 *     tensor): what a reduction in another order produces: LayerNorm's
 *     out, mean, rstd and dinp
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

#include "../../model/cuda/layers_cuda.h"
#include "../../model/cpu/layers_cpu.h"
#include "layers.h"
#include "dtype.h"
#include "cuda_fixture.h"
#include "layers_fixture.h"

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
        encoder_forward_cuda(d_out, d_inp, d_wte, d_wpe, B, T, C);
        encoder_forward_cpu(want, inp, wte, wpe, B, T, C);
        float *got = back(d_out, F(BT * C), "encoder_forward");
        expect_bits("encoder_forward", want, got, BT * C);
        free(got);
        /* embedding_rows_forward on the slice [v0, v0 + rows), then positions_add */
        int64_t v0 = V / 3, rows = V - V / 3 - V / 4;
        d_out = dev_poisoned(F(BT * C));
        embedding_rows_forward_cuda(d_out, d_inp, d_wte + v0 * C, v0, rows, BT, C, NULL);
        positions_add_cuda(d_out, d_wpe, B, T, C, NULL);
        embedding_rows_forward_cpu(want, inp, wte + v0 * C, v0, rows, BT, C, NULL);
        positions_add_cpu(want, wpe, B, T, C, NULL);
        got = back(d_out, F(BT * C), "embedding_rows_forward + positions_add");
        expect_bits("embedding_rows_forward + positions_add", want, got, BT * C);
        free(got);
        /* encoder_backward: accumulated into random gradients */
        float *d_dwte = dev_from(dwte, F(V * C)), *d_dwpe = dev_from(dwpe, F(T * C));
        float *w_dwte = malloc(F(V * C)), *w_dwpe = malloc(F(T * C));
        memcpy(w_dwte, dwte, F(V * C));
        memcpy(w_dwpe, dwpe, F(T * C));
        encoder_backward_cuda(d_dwte, d_dwpe, d_dout, d_inp, B, T, C);
        encoder_backward_cpu(w_dwte, w_dwpe, dout, inp, B, T, C);
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
        embedding_rows_backward_cuda(d_dwte, d_dwpe, d_dout, d_inp, v0, rows, B, T, C, NULL);
        embedding_rows_backward_cpu(w_dwte, w_dwpe, dout, inp, v0, rows, B, T, C, NULL);
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
        struct exec_ctx fc = {0}, gc = {0};
        float *d_inp = dev_from(inp, F(N * C)), *d_w = dev_from(w, F(C)), *d_b = dev_from(b, F(C));
        float *d_out = dev_poisoned(F(N * C)), *d_mean = dev_poisoned(F(N)), *d_rstd = dev_poisoned(F(N));
        layernorm_forward_cuda(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C, &gc);
        layernorm_forward_cpu(out, mean, rstd, inp, w, b, N, C, &fc);
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
        layernorm_backward_cuda(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, &gc);
        layernorm_backward_cpu(dinp, dw, db, dout, inp, w, mean, rstd, N, C, &fc);
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
        struct exec_ctx fc = {0}, gc = {0};
        float *d_x = dev_from(x, F(n)), *d_y = dev_from(y, F(n)), *d_o = dev_poisoned(F(n));
        gelu_forward_cuda(d_o, d_x, n, &gc);
        gelu_forward_cpu(want, x, n, &fc);
        float *got = back(d_o, F(n), "gelu_forward");
        expect_bits("gelu_forward", want, got, n);
        free(got);
        d_o = dev_poisoned(F(n));
        gelu_backward_cuda(d_o, d_x, d_y, n, &gc);
        gelu_backward_cpu(want, x, y, n, &fc);
        got = back(d_o, F(n), "gelu_backward");
        expect_bits("gelu_backward", want, got, n);
        free(got);
        gelu_backward_cuda(d_y, d_x, d_y, n, &gc); /* in place: dinp aliases dout */
        memcpy(want, y, F(n));
        gelu_backward_cpu(want, x, want, n, &fc);
        got = back(d_y, F(n), "gelu_backward in place");
        expect_bits("gelu_backward in place", want, got, n);
        free(got);
        d_y = dev_from(y, F(n));
        d_o = dev_poisoned(F(n));
        residual_forward_cuda(d_o, d_x, d_y, n, &gc);
        residual_forward_cpu(want, x, y, n, &fc);
        got = back(d_o, F(n), "residual_forward");
        expect_bits("residual_forward", want, got, n);
        free(got);
        /* bias_add: N rows of 257 columns in the first N*257 elements (1 x n when n < 257) */
        int64_t OC = n < 257 ? n : 257, N = n / OC;
        float *bias = rand_f32(OC, 50, 1.0f), *d_bias = dev_from(bias, F(OC));
        d_o = dev_from(x, F(n));
        memcpy(want, x, F(n));
        bias_add_cuda(d_o, d_bias, N, OC, &gc);
        bias_add_cpu(want, bias, N, OC, &fc);
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
            struct exec_ctx fc = {0}, gc = {0};
            float *d_x = dev_from(x, F(tot));
            bf16 *d_out = dev_poisoned(tot * sizeof *d_out), *d_pre = dev_poisoned(tot * sizeof *d_pre);
            gelu_forward_bf16_cuda(d_out + off, d_pre + off, d_x + off, n, &gc);
            gelu_forward_bf16_cpu(out + off, pre + off, x + off, n, &fc);
            bf16 *got = (bf16 *)back(d_out, tot * sizeof *got, "gelu_forward_bf16 out");
            assert_memory_equal(got + off, out + off, n * sizeof *got);
            free(got);
            got = (bf16 *)back(d_pre, tot * sizeof *got, "gelu_forward_bf16 pre_store");
            assert_memory_equal(got + off, pre + off, n * sizeof *got);
            free(got);
            /* the backward from that saved copy, in place (dinp aliases dout) */
            bf16 *d_saved = dev_from(pre, tot * sizeof *pre);
            float *d_y = dev_from(y, F(tot));
            gelu_backward_bf16_cuda(d_y + off, d_saved + off, d_y + off, n, &gc);
            memcpy(want, y, F(tot));
            gelu_backward_bf16_cpu(want + off, pre + off, want + off, n, &fc);
            float *g = back(d_y, F(tot), "gelu_backward_bf16");
            expect_bits("gelu_backward_bf16", want + off, g + off, n);
            free(g);
            expect_flops("gelu (bf16 forms)", &fc, &gc);
            cudaFree(d_x), cudaFree(d_saved);
            free(x), free(y), free(want), free(out), free(pre);
        }
}

/* The layers.h names on a MEM_DEVICE counter run on the device: one kernel. */
static void test_dispatch_device(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    int64_t n = 4099;
    float *x = rand_f32(n, 120, 6.0f), *want = malloc(F(n));
    float *d_x = dev_from(x, F(n)), *d_o = dev_poisoned(F(n));
    struct exec_ctx fc = {0}, gc = {.space = MEM_DEVICE};
    gelu_forward(d_o, d_x, n, &gc);
    gelu_forward_cpu(want, x, n, &fc);
    float *got = back(d_o, F(n), "gelu_forward (dispatched)");
    expect_bits("gelu_forward (dispatched to the device)", want, got, n);
    expect_flops("gelu_forward (dispatched)", &fc, &gc);
    free(got), free(x), free(want), cudaFree(d_x);
}

/* Runs everywhere: host-space calls take the CPU kernels, bit for bit and
 * FLOP for FLOP, with or without a GPU (--device cpu in this build). */
static void test_dispatch_host(void **state) {
    (void)state;
    const int64_t N = 37, C = 257, OC = 65, V = 300, Vp = 320;
    float *inp = rand_f32(N * C, 130, 2.0f), *w = rand_f32(OC * C, 131, 1.0f), *b = rand_f32(OC, 132, 1.0f);
    float *lw = rand_f32(C, 133, 1.0f), *lb = rand_f32(C, 134, 1.0f);
    float *o1 = malloc(F(N * OC)), *o2 = malloc(F(N * OC)), *n1 = malloc(F(N * C)), *n2 = malloc(F(N * C));
    float *m1 = malloc(F(N)), *m2 = malloc(F(N)), *r1 = malloc(F(N)), *r2 = malloc(F(N));
    struct exec_ctx f1 = {0}, f2 = {0};
    layernorm_forward(n1, m1, r1, inp, lw, lb, N, C, &f1);
    layernorm_forward_cpu(n2, m2, r2, inp, lw, lb, N, C, &f2);
    expect_bits("layernorm_forward (host)", n2, n1, N * C);
    expect_bits("layernorm_forward rstd (host)", r2, r1, N);
    matmul_forward(o1, n1, w, b, N, C, OC, &f1);
    matmul_forward_cpu(o2, n2, w, b, N, C, OC, &f2);
    expect_bits("matmul_forward (host)", o2, o1, N * OC);
    gelu_forward(o1, o1, N * OC, &f1);
    gelu_forward_cpu(o2, o2, N * OC, &f2);
    expect_bits("gelu_forward (host)", o2, o1, N * OC);
    float *l1 = rand_f32(N * Vp, 135, 8.0f), *l2 = malloc(F(N * Vp)), *s1 = malloc(F(N)), *s2 = malloc(F(N));
    memcpy(l2, l1, F(N * Vp));
    int32_t *targets = rand_tokens(N, 136, (int32_t)V);
    double t1 = crossentropy_forward_backward(l1, s1, targets, N, V, Vp, 0.5f, &f1);
    double t2 = crossentropy_forward_backward_cpu(l2, s2, targets, N, V, Vp, 0.5f, &f2);
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
        cmocka_unit_test(test_encoder),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_gelu_bf16),
        cmocka_unit_test(test_dispatch_device),
        cmocka_unit_test(test_dispatch_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
