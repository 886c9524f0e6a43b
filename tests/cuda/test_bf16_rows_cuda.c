/* --gpu_path v2's bf16 kernels on a GPU (model/cuda/v2: the residual add
 * fused with LayerNorm's forward, LayerNorm's backward, GELU bf16 in and
 * out, cross-entropy on bf16 logits in place) against, first, their host
 * replay (the headers' *_replay and per-element functions: the kernels'
 * own code in the device's order, built with --fmad=false): bit for bit,
 * the loss within the device's logf's ulp; then against the CPU bf16
 * kernels they are held to (the replays' bounds, tests/test_bf16_rows.c,
 * carry over): bf16 outputs normwise within one rounding (2^-7 x max),
 * fp32 ones within 1e-5 normwise, as test_layers_cuda.c's reductions in
 * another order. Fresh random inputs each run (the seed is printed),
 * shapes off the warp, the block and the partials' rows, every written
 * output poisoned with a guard past its end (accumulated ones start
 * random). Without a GPU: skipped. */
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

#include "../../model/cpu/layers_cpu.h"
#include "layers.h"
#include "dtype.h"
#include "cuda_fixture.h"
#include "layers_fixture.h"
#include "bf16_fixture.h"
#include "../../model/cuda/cuda_device.h"
#include "../../model/cuda/kernel_context.h"
#include "../../model/cuda/v2/gelu_bf16.h"
#include "../device_replays.h"

static void expect_same(const char *what, const void *want, const void *got, size_t bytes) {
    if (memcmp(want, got, bytes) != 0) {
        size_t i = 0;
        while (((const unsigned char *)want)[i] == ((const unsigned char *)got)[i]) i++;
        fail_msg("%s: byte %zu of %zu differs from the host replay (bit for bit expected)", what, i, bytes);
    }
}

enum { NSHAPES = 5 };
static const int64_t ROWS[NSHAPES] = {1, 3, 64, 67, 1030};
static const int64_t COLS[NSHAPES] = {1, 33, 768, 775, 257};

static void test_residual_layernorm_v2(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    for (int sh = 0; sh < NSHAPES; sh++)
        for (int b_bf16 = 0; b_bf16 < 2; b_bf16++) {
            int64_t N = ROWS[sh], C = COLS[sh], n = N * C;
            bf16 *a = rand_bf16(n, 1, 2.0f, 0.5f), *bh = rand_bf16(n, 2, 1.0f, 0.0f);
            float *bf = b_bf16 ? widened(bh, n) : rand_f32(n, 3, 1.0f), *w = rand_f32(C, 4, 0.5f),
                  *bias = rand_f32(C, 5, 0.1f);
            for (int64_t c = 0; c < C; c++) w[c] += 1.0f;
            bf16 *d_a = dev_from(a, H(n)), *d_bh = dev_from(bh, H(n)), *d_x = dev_poisoned(H(n)),
                 *d_out = dev_poisoned(H(n));
            float *d_bf = dev_from(bf, F(n)), *d_w = dev_from(w, F(C)), *d_bias = dev_from(bias, F(C)),
                  *d_mean = dev_poisoned(F(N)), *d_rstd = dev_poisoned(F(N));
            residual_layernorm_forward_v2(d_x, d_out, d_mean, d_rstd, d_a, b_bf16 ? NULL : d_bf, b_bf16 ? d_bh : NULL,
                                          d_w, d_bias, N, C);
            bf16 *x = (bf16 *)back(d_x, H(n), "x"), *out = (bf16 *)back(d_out, H(n), "out");
            float *mean = back(d_mean, F(N), "mean"), *rstd = back(d_rstd, F(N), "rstd");
            /* the replay: bit for bit */
            bf16 *rx = malloc(H(n)), *rout = malloc(H(n)), *cx = malloc(H(n)), *cout = malloc(H(n));
            float *rmean = malloc(F(N)), *rrstd = malloc(F(N)), *cmean = malloc(F(N)), *crstd = malloc(F(N));
            for (int64_t i = 0; i < N; i++)
                resln_row_replay(rx + i * C, rout + i * C, &rmean[i], &rrstd[i], a + i * C,
                                 b_bf16 ? NULL : bf + i * C, b_bf16 ? bh + i * C : NULL, w, bias, C);
            expect_same("residual_layernorm_forward_v2 x", rx, x, H(n));
            expect_same("residual_layernorm_forward_v2 out", rout, out, H(n));
            expect_same("residual_layernorm_forward_v2 mean", rmean, mean, F(N));
            expect_same("residual_layernorm_forward_v2 rstd", rrstd, rstd, F(N));
            /* the CPU kernels */
            struct exec_ctx fc = {0};
            residual_forward_bf16_cpu(cx, a, bf, n, &fc);
            layernorm_forward_bf16_cpu(cout, cmean, crstd, cx, w, bias, N, C, &fc);
            expect_same("residual_layernorm_forward_v2 x against residual_forward_bf16", cx, x, H(n));
            expect_close_bf16("residual_layernorm_forward_v2 out against the CPU", cout, out, n, ONE_ROUNDING);
            expect_close("residual_layernorm_forward_v2 mean against the CPU", cmean, mean, N, 1e-5);
            expect_close("residual_layernorm_forward_v2 rstd against the CPU", crstd, rstd, N, 1e-5);
            cudaFree(d_a), cudaFree(d_bh), cudaFree(d_bf), cudaFree(d_w), cudaFree(d_bias);
            free(a), free(bh), free(bf), free(w), free(bias), free(x), free(out), free(mean), free(rstd);
            free(rx), free(rout), free(cx), free(cout), free(rmean), free(rrstd), free(cmean), free(crstd);
        }
}

static void test_layernorm_backward_v2(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    for (int sh = 0; sh < NSHAPES; sh++)
        for (int bf16_io = 0; bf16_io < 2; bf16_io++) { /* dout and dinp fp32 (the CPU's flow), or both bf16 */
            int64_t N = ROWS[sh], C = COLS[sh], n = N * C, ns = layernorm_backward_v2_scratch(N, C);
            bf16 *x = rand_bf16(n, 11, 2.0f, 0.3f), *dyh = rand_bf16(n, 12, 1.0f, 0.0f),
                 *dxh = rand_bf16(n, 13, 1.0f, 0.0f);
            float *dy = bf16_io ? widened(dyh, n) : rand_f32(n, 14, 1.0f),
                  *dx = bf16_io ? widened(dxh, n) : rand_f32(n, 15, 1.0f);
            float *w = rand_f32(C, 16, 0.5f), *bias = rand_f32(C, 17, 0.1f), *dw = rand_f32(C, 18, 1.0f),
                  *db = rand_f32(C, 19, 1.0f), *mean = malloc(F(N)), *rstd = malloc(F(N));
            bf16 *ln = malloc(H(n));
            for (int64_t c = 0; c < C; c++) w[c] += 1.0f;
            struct exec_ctx fc = {0};
            layernorm_forward_bf16_cpu(ln, mean, rstd, x, w, bias, N, C, &fc);
            bf16 *d_x = dev_from(x, H(n)), *d_dyh = dev_from(dyh, H(n)), *d_dxh = dev_from(dxh, H(n));
            float *d_dy = dev_from(dy, F(n)), *d_dx = dev_from(dx, F(n)), *d_w = dev_from(w, F(C)),
                  *d_mean = dev_from(mean, F(N)), *d_rstd = dev_from(rstd, F(N)), *d_dw = dev_from(dw, F(C)),
                  *d_db = dev_from(db, F(C)), *d_part = dev_poisoned(F(ns));
            layernorm_backward_v2(bf16_io ? NULL : d_dx, bf16_io ? d_dxh : NULL, d_dw, d_db, d_part,
                                  bf16_io ? NULL : d_dy, bf16_io ? d_dyh : NULL, d_x, d_w, d_mean, d_rstd, N, C);
            float *gdx = back(d_dx, F(n), "dinp"), *gdw = back(d_dw, F(C), "dweight"), *gdb = back(d_db, F(C), "dbias");
            bf16 *gdxh = (bf16 *)back(d_dxh, H(n), "dinp bf16");
            /* the replay on copies of the accumulated outputs */
            float *rdx = malloc(F(n)), *rdw = malloc(F(C)), *rdb = malloc(F(C)), *part = malloc(F(ns));
            bf16 *rdxh = malloc(H(n));
            memcpy(rdx, dx, F(n)), memcpy(rdw, dw, F(C)), memcpy(rdb, db, F(C)), memcpy(rdxh, dxh, H(n));
            lnb_replay(bf16_io ? NULL : rdx, bf16_io ? rdxh : NULL, rdw, rdb, part, bf16_io ? NULL : dy,
                       bf16_io ? dyh : NULL, x, w, mean, rstd, N, C);
            if (bf16_io) expect_same("layernorm_backward_v2 dinp bf16", rdxh, gdxh, H(n));
            else expect_same("layernorm_backward_v2 dinp", rdx, gdx, F(n));
            expect_same("layernorm_backward_v2 dweight", rdw, gdw, F(C));
            expect_same("layernorm_backward_v2 dbias", rdb, gdb, F(C));
            /* the CPU kernel, its dinp in the same dtype (bf16: widened, added
             * to and rounded once, as the v2 kernel does) */
            struct act_out dinp_c = bf16_io ? act_out_bf16(dxh, MEM_HOST) : act_out_f32(dx, MEM_HOST);
            layernorm_backward_bf16_cpu(dinp_c, dw, db, dy, x, w, mean, rstd, N, C, &fc);
            if (bf16_io) {
                expect_close_bf16("layernorm_backward_v2 dinp bf16 against the CPU", dxh, gdxh, n, ONE_ROUNDING);
            } else {
                expect_close("layernorm_backward_v2 dinp against the CPU", dx, gdx, n, 1e-5);
            }
            if (N <= V2_LNB_ROWS) { /* one block's rows: the CPU's order */
                expect_bits("layernorm_backward_v2 dweight against the CPU", dw, gdw, C);
                expect_bits("layernorm_backward_v2 dbias against the CPU", db, gdb, C);
            } else {
                expect_close("layernorm_backward_v2 dweight against the CPU", dw, gdw, C, 1e-5);
                expect_close("layernorm_backward_v2 dbias against the CPU", db, gdb, C, 1e-5);
            }
            cudaFree(d_x), cudaFree(d_dyh), cudaFree(d_dy), cudaFree(d_w), cudaFree(d_mean), cudaFree(d_rstd);
            cudaFree(d_part);
            free(x), free(dyh), free(dxh), free(dy), free(dx), free(w), free(bias), free(dw), free(db), free(mean);
            free(rstd), free(ln), free(gdx), free(gdw), free(gdb), free(gdxh), free(rdx), free(rdw), free(rdb);
            free(part), free(rdxh);
        }
}

static void test_gelu_v2(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    /* every bf16 bit pattern (65,536), and sizes off the 8-wide loads */
    static const int64_t SIZES[] = {65536, 1, 7, 8 * 1000 + 5};
    for (size_t s = 0; s < sizeof SIZES / sizeof SIZES[0]; s++) {
        int64_t n = SIZES[s];
        bf16 *pre = n == 65536 ? malloc(H(n)) : rand_bf16(n, 21 + s, 4.0f, 0.0f),
             *dout = rand_bf16(n, 31 + s, 2.0f, 0.0f);
        if (n == 65536)
            for (int64_t i = 0; i < n; i++) pre[i] = (bf16)i;
        bf16 *d_pre = dev_from(pre, H(n)), *d_dout = dev_from(dout, H(n)), *d_out = dev_poisoned(H(n)),
             *d_dinp = dev_poisoned(H(n));
        gelu_forward_v2(d_out, d_pre, n);
        gelu_backward_v2(d_dinp, d_pre, d_dout, n);
        gelu_backward_v2(d_dout, d_pre, d_dout, n); /* in place: dinp aliases dout */
        bf16 *out = (bf16 *)back(d_out, H(n), "gelu out"), *dinp = (bf16 *)back(d_dinp, H(n), "gelu dinp");
        bf16 *dinp_alias = (bf16 *)back(d_dout, H(n), "gelu dinp in place");
        float *pre_f = widened(pre, n), *dout_f = widened(dout, n), *cdinp = malloc(F(n));
        bf16 *cout = malloc(H(n)), *store = malloc(H(n)), *cdinp_h = malloc(H(n));
        struct exec_ctx fc = {0};
        gelu_forward_bf16_cpu(cout, store, pre_f, n, &fc);
        gelu_backward_bf16_cpu(cdinp, pre, dout_f, n, &fc);
        for (int64_t i = 0; i < n; i++) {
            cdinp_h[i] = f32_to_bf16(cdinp[i]);
            if (isnan(pre_f[i])) continue; /* a NaN's payload is the device's to choose */
            if (out[i] != gelu_fwd_elem(pre[i]) || out[i] != cout[i])
                fail_msg("gelu_forward_v2 of 0x%04x: gpu 0x%04x, cpu 0x%04x", pre[i], out[i], cout[i]);
            if (dinp[i] != cdinp_h[i] || dinp_alias[i] != cdinp_h[i] || dinp[i] != gelu_bwd_elem(pre[i], dout[i]))
                fail_msg("gelu_backward_v2 at 0x%04x: gpu 0x%04x, cpu 0x%04x", pre[i], dinp[i], cdinp_h[i]);
        }
        cudaFree(d_pre);
        free(pre), free(dout), free(out), free(dinp), free(dinp_alias), free(pre_f), free(dout_f), free(cdinp);
        free(cout), free(store), free(cdinp_h);
    }
}

static void test_crossentropy_v2(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    static const int64_t VS[] = {1, 300, 50257}, VPS[] = {8, 300, 50304};
    static const int64_t NS[] = {3, 257, 40};
    for (int s = 0; s < 3; s++)
        for (int with_grad = 0; with_grad < 2; with_grad++) {
            int64_t N = NS[s], V = VS[s], Vp = VPS[s], n = N * Vp;
            float dloss = with_grad ? 1.0f / (float)N : 0.0f;
            bf16 *l = rand_bf16(n, 41 + s, 6.0f, 0.0f), *rl = malloc(H(n)), *cl = malloc(H(n));
            int32_t *targets = rand_tokens(N, 51 + s, (int32_t)V);
            bf16 *d_l = dev_from(l, H(n));
            int32_t *d_t = dev_from(targets, I(N));
            float *d_loss = dev_poisoned(F(N));
            crossentropy_v2(NULL, d_l, d_loss, d_t, N, V, Vp, dloss);
            bf16 *gl = (bf16 *)back(d_l, H(n), "dlogits");
            float *gloss = back(d_loss, F(N), "losses"), *rloss = malloc(F(N)), *closs = malloc(F(N));
            memcpy(rl, l, H(n));
            for (int64_t i = 0; i < N; i++) rloss[i] = ce_row_replay(rl + i * Vp, targets[i], V, Vp, dloss);
            expect_same("crossentropy_v2 dlogits", rl, gl, H(n));
            /* the device's logf: within 1 ulp of log(sum) <= log V (1 <= sum <= V),
             * carried through the two adds, each a rounding of the loss */
            double log_ulp = ldexp(log((double)V) + 1.0, -23);
            for (int64_t i = 0; i < N; i++)
                if (!(fabs((double)gloss[i] - rloss[i]) <= 2.0 * log_ulp + 2.0 * ldexp(fabs(rloss[i]), -23)))
                    fail_msg("crossentropy_v2 loss of row %lld: gpu %.9g, replay %.9g (logf's ulp)", (long long)i,
                             (double)gloss[i], (double)rloss[i]);
            float *lf = widened(l, n);
            struct exec_ctx fc = {0};
            crossentropy_forward_backward_cpu(lf, closs, targets, N, V, Vp, dloss, &fc);
            for (int64_t i = 0; i < n; i++) cl[i] = f32_to_bf16(lf[i]);
            expect_close_bf16("crossentropy_v2 dlogits against the CPU", cl, gl, n, ONE_ROUNDING);
            expect_close("crossentropy_v2 losses against the CPU", closs, gloss, N, 1e-5);
            cudaFree(d_t);
            free(l), free(rl), free(cl), free(targets), free(gl), free(gloss), free(rloss), free(closs), free(lf);
        }
}

/* The head's cross-entropy under --gpu_path v2 (model/gpt.c at tp = 1)
 * through layers.h's dispatch, crossentropy_forward_backward_bf16 on device
 * memory with a v2 counter, against v1's fp32 form on the GPU
 * (crossentropy_forward_backward) on the widened logits: dlogits within one
 * bf16 rounding of v1's narrowed (each side's fp32 sum in its own tree: the
 * (V/256 + 8 + V) u of crossentropy_bf16.h, far below a bf16 ulp), the
 * losses and their sum within 1e-5 normwise (the sums' orders and logf).
 * The grid is asked of the device once and kept in the kernel context. */
static void test_crossentropy_dispatch_v2(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    static const int64_t VS[] = {300, 50257}, VPS[] = {304, 50304}, NS[] = {257, 64};
    struct kernel_context kc = {0};
    struct exec_ctx v2 = {.space = MEM_DEVICE, .device = cuda_backend_traits(GPU_PATH_V2), .kernels = &kc},
                        v1 = {.space = MEM_DEVICE};
    for (int s = 0; s < 2; s++)
        for (int with_grad = 0; with_grad < 2; with_grad++) {
            int64_t N = NS[s], V = VS[s], Vp = VPS[s], n = N * Vp;
            float dloss = with_grad ? 1.0f / (float)N : 0.0f;
            bf16 *l = rand_bf16(n, 61 + s, 6.0f, 0.0f);
            float *lf = widened(l, n);
            int32_t *targets = rand_tokens(N, 71 + s, (int32_t)V);
            bf16 *d_l = dev_from(l, H(n));
            float *d_lf = dev_from(lf, F(n)), *d_loss = dev_poisoned(F(N)), *d_loss1 = dev_poisoned(F(N));
            int32_t *d_t = dev_from(targets, I(N));
            double sum2 = crossentropy_forward_backward_bf16(d_l, d_loss, d_t, N, V, Vp, dloss, &v2);
            assert_true(kc.ce_v2_grid > 0);
            double sum1 = crossentropy_forward_backward(d_lf, d_loss1, d_t, N, V, Vp, dloss, &v1);
            bf16 *gl = (bf16 *)back(d_l, H(n), "dlogits (v2)");
            float *gf = back(d_lf, F(n), "dlogits (v1)"), *loss2 = back(d_loss, F(N), "losses (v2)"),
                  *loss1 = back(d_loss1, F(N), "losses (v1)");
            bf16 *want = malloc(H(n));
            for (int64_t i = 0; i < n; i++) want[i] = with_grad ? f32_to_bf16(gf[i]) : l[i];
            if (with_grad) expect_close_bf16("crossentropy_forward_backward_bf16 dlogits against v1's", want, gl, n,
                                             ONE_ROUNDING);
            else expect_same("crossentropy_forward_backward_bf16 logits untouched", l, gl, H(n));
            for (int64_t i = 0; i < N && with_grad; i++)
                for (int64_t v = V; v < Vp; v++)
                    if (gl[i * Vp + v] != 0) fail_msg("padding dlogit (%lld, %lld) not 0", (long long)i, (long long)v);
            expect_close("crossentropy_forward_backward_bf16 losses against v1's", loss1, loss2, N, 1e-5);
            if (!(fabs(sum2 - sum1) <= 1e-5 * fabs(sum1)))
                fail_msg("crossentropy_forward_backward_bf16 loss sum %.9g, v1's %.9g", sum2, sum1);
            printf("  V %lld N %lld%s: the loss sums %.9g (v2) and %.9g (v1)\n", (long long)V, (long long)N,
                   with_grad ? " with dlogits" : "", sum2, sum1);
            cudaFree(d_t);
            free(l), free(lf), free(targets), free(gl), free(gf), free(loss2), free(loss1), free(want);
        }
    assert_true(v2.other == v1.other); /* the FLOPs as v1's */
}

int main(void) {
    seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("seed %llu\n", (unsigned long long)seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_residual_layernorm_v2),
        cmocka_unit_test(test_layernorm_backward_v2),
        cmocka_unit_test(test_gelu_v2),
        cmocka_unit_test(test_crossentropy_v2),
        cmocka_unit_test(test_crossentropy_dispatch_v2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
