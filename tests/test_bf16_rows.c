/* The logic of --gpu_path v2's bf16 kernels (model/cuda/v2: the residual
 * add fused with LayerNorm's forward, LayerNorm's backward, GELU bf16 in
 * and out, cross-entropy on bf16 logits), run on the host in the device's
 * order (tests/device_replays.h and the headers' per-element functions,
 * the kernels' own code), against the CPU bf16 kernels they are held to (include/layers.h's
 * rounding points): bit for bit where the order is the same (the stored
 * residual, GELU, LayerNorm's output given the CPU's statistics (the
 * add and the LayerNorm alone: the fused kernel's bits), the
 * weight gradients within one block's rows, padding), else within the
 * bound each header states. Shapes off the warp (32), the block (256) and
 * the partials' rows (64). The kernels themselves are compiled, not run:
 * tests/cuda/test_bf16_rows_cuda.c asks a GPU for these replays' bits. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../model/cpu/layers_cpu.h"
#include "layers.h"
#include "../model/cuda/v2/gelu_bf16.h"
#include "device_replays.h"

static const double U = 5.9604644775390625e-08; /* 2^-24: fp32's unit roundoff */
static const double BF16_ULP = 0.0078125;     /* 2^-7: a bf16 ulp relative to the value, at most */

static uint64_t rng_state = 88172645463325252ULL;
static double uniform(void) { /* [0, 1) */
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static float sym(float scale) { return (float)(uniform() * 2.0 - 1.0) * scale; }

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

static void widen(float *out, const bf16 *in, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = bf16_to_f32(in[i]);
}

/* max |got - want| over max(|want|, at_least), bf16 or fp32 (NULL other). */
static double rel_diff_bf16(const bf16 *got, const bf16 *want, int64_t n) {
    double worst = 0.0, scale = 1e-30;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(bf16_to_f32(want[i])));
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)bf16_to_f32(got[i]) - bf16_to_f32(want[i])));
    return worst / scale;
}

static double rel_diff_f32(const float *got, const float *want, int64_t n) {
    double worst = 0.0, scale = 1e-30;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)got[i] - want[i]));
    return worst / scale;
}

enum { NSHAPES = 5 };
static const int64_t ROWS[NSHAPES] = {1, 3, 64, 67, 130};
static const int64_t COLS[NSHAPES] = {1, 33, 768, 775, 257};

static void test_residual_layernorm(void **state) {
    (void)state;
    for (int sh = 0; sh < NSHAPES; sh++)
        for (int b_bf16 = 0; b_bf16 < 2; b_bf16++) {
            int64_t N = ROWS[sh], C = COLS[sh], n = N * C;
            bf16 *a = xmalloc(n * 2), *bh = xmalloc(n * 2), *x = xmalloc(n * 2), *out = xmalloc(n * 2);
            bf16 *xc = xmalloc(n * 2), *outc = xmalloc(n * 2), *out_same = xmalloc(n * 2);
            float *bf = xmalloc(n * 4), *w = xmalloc(C * 4), *bias = xmalloc(C * 4);
            float *mean = xmalloc(N * 4), *rstd = xmalloc(N * 4), *meanc = xmalloc(N * 4), *rstdc = xmalloc(N * 4);
            for (int64_t i = 0; i < n; i++) {
                a[i] = f32_to_bf16(sym(2.0f) + 0.5f); /* a mean off 0: the variance's cancellation shows */
                bf[i] = sym(1.0f);
                bh[i] = f32_to_bf16(bf[i]);
            }
            if (b_bf16) widen(bf, bh, n);
            for (int64_t c = 0; c < C; c++) w[c] = 1.0f + sym(0.5f), bias[c] = sym(0.1f);
            for (int64_t i = 0; i < N; i++)
                resln_row_replay(x + i * C, out + i * C, &mean[i], &rstd[i], a + i * C, b_bf16 ? NULL : bf + i * C,
                                 b_bf16 ? bh + i * C : NULL, w, bias, C);
            struct exec_ctx fc = {0};
            residual_forward_bf16_cpu(xc, a, bf, n, &fc); /* bf holds bh's widened values when b_bf16 */
            layernorm_forward_bf16_cpu(outc, meanc, rstdc, xc, w, bias, N, C, &fc);
            assert_memory_equal(x, xc, n * 2); /* the stored residual: bit for bit */
            /* the two alone (residual_forward_v2, layernorm_forward_v2: the
             * model calls them apart) give the fused kernel's bits, so its
             * bounds against the CPU are theirs */
            bf16 *ln_alone = xmalloc(n * 2);
            float ma, ra;
            for (int64_t i = 0; i < n; i++) assert_int_equal(residual_elem(a[i], bf[i]), xc[i]);
            for (int64_t i = 0; i < N; i++) {
                ln_row_replay(ln_alone + i * C, &ma, &ra, x + i * C, w, bias, C);
                assert_true(f32_bits(ma) == f32_bits(mean[i]) && f32_bits(ra) == f32_bits(rstd[i]));
            }
            assert_memory_equal(ln_alone, out, n * 2);
            free(ln_alone);
            for (int64_t i = 0; i < N; i++) {
                double absmean = 0.0;
                for (int64_t c = 0; c < C; c++) absmean += fabs(bf16_to_f32(xc[i * C + c])) / (double)C;
                assert_true(fabs((double)mean[i] - meanc[i]) <= (double)(C + C / 32 + 5) * U * absmean);
                assert_true(fabs((double)rstd[i] - rstdc[i]) <= (double)(C + C / 32 + 5) * 8 * U * rstdc[i]);
                ln_lane_out(out_same + i * C, xc + i * C, meanc[i], rstdc[i], w, bias, C, 0);
                for (int l = 1; l < V2_WARP; l++)
                    ln_lane_out(out_same + i * C, xc + i * C, meanc[i], rstdc[i], w, bias, C, l);
            }
            assert_memory_equal(out_same, outc, n * 2); /* given the CPU's statistics: its bits */
            assert_true(rel_diff_bf16(out, outc, n) <= BF16_ULP); /* at most one rounding apart */
            int64_t flips = 0;
            for (int64_t i = 0; i < n; i++) flips += out[i] != outc[i];
            printf("    N %lld C %lld b %s: out differs from the CPU's in %lld of %lld elements\n", (long long)N,
                   (long long)C, b_bf16 ? "bf16" : "fp32", (long long)flips, (long long)n);
            free(a), free(bh), free(x), free(out), free(xc), free(outc), free(out_same), free(bf), free(w), free(bias);
            free(mean), free(rstd), free(meanc), free(rstdc);
        }
}

static void test_layernorm_backward(void **state) {
    (void)state;
    for (int sh = 0; sh < NSHAPES; sh++)
        for (int mode = 0; mode < 2; mode++) { /* 0: dout, dinp fp32 (the CPU's flow); 1: both bf16 */
            int64_t N = ROWS[sh], C = COLS[sh], n = N * C;
            bf16 *x = xmalloc(n * 2), *ln = xmalloc(n * 2), *dyh = xmalloc(n * 2), *dxh = xmalloc(n * 2);
            bf16 *dxh_c = xmalloc(n * 2);
            float *dy = xmalloc(n * 4), *dx = xmalloc(n * 4), *dx_c = xmalloc(n * 4), *w = xmalloc(C * 4);
            float *bias = xmalloc(C * 4), *mean = xmalloc(N * 4), *rstd = xmalloc(N * 4);
            float *dw = xmalloc(C * 4), *db = xmalloc(C * 4), *dw_c = xmalloc(C * 4), *db_c = xmalloc(C * 4);
            float *part = xmalloc((size_t)layernorm_backward_v2_scratch(N, C) * 4);
            for (int64_t i = 0; i < n; i++) {
                x[i] = f32_to_bf16(sym(2.0f) + 0.3f);
                dyh[i] = f32_to_bf16(sym(1.0f));
                dy[i] = mode ? bf16_to_f32(dyh[i]) : sym(1.0f);
                dx[i] = sym(1.0f);
                dxh[i] = f32_to_bf16(dx[i]);
            }
            if (mode) widen(dx, dxh, n);
            memcpy(dx_c, dx, n * 4);
            memcpy(dxh_c, dxh, n * 2);
            for (int64_t c = 0; c < C; c++) {
                w[c] = 1.0f + sym(0.5f), bias[c] = sym(0.1f);
                dw[c] = dw_c[c] = sym(1.0f), db[c] = db_c[c] = sym(1.0f);
            }
            struct exec_ctx fc = {0};
            layernorm_forward_bf16_cpu(ln, mean, rstd, x, w, bias, N, C, &fc);
            lnb_replay(mode ? NULL : dx, mode ? dxh : NULL, dw, db, part, mode ? NULL : dy, mode ? dyh : NULL, x, w,
                       mean, rstd, N, C);
            /* the CPU kernel writes dinp in the same dtype as the replay: fp32,
             * or bf16 widened, added to and rounded once */
            struct act_out dinp_c = mode ? act_out_bf16(dxh_c, MEM_HOST) : act_out_f32(dx_c, MEM_HOST);
            layernorm_backward_bf16_cpu(dinp_c, dw_c, db_c, dy, x, w, mean, rstd, N, C, &fc);
            /* dinp: each row's two means in the warp's order: with K = C + C/32 + 5,
             * each within K u of its terms' absolute mean, and the final
             * three operations' roundings (4 u of the largest |dinp|) */
            double worst_ratio = 0.0;
            for (int64_t i = 0; i < N && !mode; i++) {
                double a = 0.0, b = 0.0, xmax = 0.0, gmax = 0.0, worst = 0.0, K = (double)(C + C / 32 + 5);
                for (int64_t c = 0; c < C; c++) {
                    double xhat = (bf16_to_f32(x[i * C + c]) - mean[i]) * rstd[i], dn = w[c] * dy[i * C + c];
                    a += fabs(dn) / (double)C, b += fabs(dn * xhat) / (double)C, xmax = fmax(xmax, fabs(xhat));
                    gmax = fmax(gmax, fabs(dx_c[i * C + c]));
                    worst = fmax(worst, fabs((double)dx[i * C + c] - dx_c[i * C + c]));
                }
                double bound = rstd[i] * K * U * (a + xmax * b) + 4 * U * gmax;
                assert_true(worst <= bound);
                worst_ratio = fmax(worst_ratio, worst / bound);
            }
            if (mode) assert_true(rel_diff_bf16(dxh, dxh_c, n) <= BF16_ULP);
            /* dweight, dbias: one block's rows (N <= 64) are the CPU's sum; else
             * each within (R + N/R + N) u of its terms' absolute sum, plus the
             * final add's rounding */
            if (N <= V2_LNB_ROWS) {
                assert_memory_equal(dw, dw_c, C * 4);
                assert_memory_equal(db, db_c, C * 4);
            } else {
                double K = (double)(V2_LNB_ROWS + lnb_blocks(N) + N);
                for (int64_t c = 0; c < C; c++) {
                    double aw = 0.0, ab = 0.0;
                    for (int64_t i = 0; i < N; i++) {
                        double d = dy[i * C + c];
                        aw += fabs((bf16_to_f32(x[i * C + c]) - mean[i]) * rstd[i] * d), ab += fabs(d);
                    }
                    assert_true(fabs((double)dw[c] - dw_c[c]) <= K * U * aw + 2 * U * fabs(dw_c[c]));
                    assert_true(fabs((double)db[c] - db_c[c]) <= K * U * ab + 2 * U * fabs(db_c[c]));
                }
                assert_true(rel_diff_f32(dw, dw_c, C) > 0.0); /* another order: the bound is what is checked */
            }
            if (!mode) printf("    N %lld C %lld: dinp's worst difference %.3g of its bound\n", (long long)N,
                              (long long)C, worst_ratio);
            free(x), free(ln), free(dyh), free(dxh), free(dxh_c), free(dy), free(dx), free(dx_c), free(w), free(bias);
            free(mean), free(rstd), free(dw), free(db), free(dw_c), free(db_c), free(part);
        }
}

static void test_gelu_every_bf16(void **state) {
    (void)state;
    enum { N = 65536 };
    bf16 *pre = xmalloc(N * 2), *out_c = xmalloc(N * 2), *store = xmalloc(N * 2), *dinp_c = xmalloc(N * 2);
    bf16 *dout = xmalloc(N * 2);
    float *pre_f = xmalloc(N * 4), *dout_f = xmalloc(N * 4), *dinp_f = xmalloc(N * 4);
    for (int i = 0; i < N; i++) {
        pre[i] = (bf16)i; /* every bit pattern, NaNs and infinities included */
        dout[i] = f32_to_bf16(sym(3.0f));
    }
    widen(pre_f, pre, N);
    widen(dout_f, dout, N);
    struct exec_ctx fc = {0};
    gelu_forward_bf16_cpu(out_c, store, pre_f, N, &fc);
    gelu_backward_bf16_cpu(dinp_f, pre, dout_f, N, &fc);
    for (int i = 0; i < N; i++) dinp_c[i] = f32_to_bf16(dinp_f[i]);
    for (int i = 0; i < N; i++) {
        /* the CPU's pre_store is pre itself (a NaN comes back quiet) */
        if (!isnan(pre_f[i])) assert_int_equal(store[i], pre[i]);
        if (gelu_fwd_elem(pre[i]) != out_c[i]) fail_msg("gelu forward of 0x%04x", (unsigned)pre[i]);
        if (gelu_bwd_elem(pre[i], dout[i]) != dinp_c[i]) fail_msg("gelu backward at 0x%04x", (unsigned)pre[i]);
    }
    free(pre), free(out_c), free(store), free(dinp_c), free(dout), free(pre_f), free(dout_f), free(dinp_f);
}

static void test_crossentropy(void **state) {
    (void)state;
    static const int64_t VS[] = {1, 300, 50257}, VPS[] = {8, 300, 50304};
    enum { N = 5 };
    for (int s = 0; s < 3; s++)
        for (int with_grad = 0; with_grad < 2; with_grad++) {
            int64_t V = VS[s], Vp = VPS[s], n = N * Vp;
            float dloss = with_grad ? 1.0f / (float)N : 0.0f;
            bf16 *l = xmalloc(n * 2), *l0 = xmalloc(n * 2), *lc = xmalloc(n * 2);
            float *lf = xmalloc(n * 4), *loss_c = xmalloc(N * 4);
            int32_t targets[N];
            for (int64_t i = 0; i < n; i++) l[i] = f32_to_bf16(sym(6.0f));
            for (int i = 0; i < N; i++) targets[i] = (int32_t)(uniform() * (double)V);
            memcpy(l0, l, n * 2);
            widen(lf, l, n);
            struct exec_ctx fc = {0};
            crossentropy_forward_backward_cpu(lf, loss_c, targets, N, V, Vp, dloss, &fc);
            for (int64_t i = 0; i < n; i++) lc[i] = f32_to_bf16(lf[i]);
            double worst_loss = 0.0;
            for (int i = 0; i < N; i++) {
                float loss = ce_row_replay(l + i * Vp, targets[i], V, Vp, dloss);
                /* the sum in another order: (V/256 + 8 + V) u relative, into the log */
                double bound = (double)(V / V2_CE_THREADS + 8 + V) * U + 4 * U * fabs(loss_c[i]);
                assert_true(fabs((double)loss - loss_c[i]) <= bound);
                worst_loss = fmax(worst_loss, fabs((double)loss - loss_c[i]));
                for (int64_t v = V; v < Vp && with_grad; v++) assert_int_equal(l[i * Vp + v], 0);
            }
            if (with_grad) {
                assert_true(rel_diff_bf16(l, lc, n) <= BF16_ULP);
                int64_t flips = 0;
                for (int64_t i = 0; i < n; i++) flips += l[i] != lc[i];
                printf("    V %lld: dlogits differ from the CPU's in %lld of %lld\n", (long long)V, (long long)flips,
                       (long long)n);
            }
            else
                assert_memory_equal(l, l0, n * 2); /* no gradient asked: the logits untouched */
            printf("    V %lld: the loss's worst difference from the CPU's %.3g\n", (long long)V, worst_loss);
            free(l), free(l0), free(lc), free(lf), free(loss_c);
        }
}

/* The replays' trees are the device's: a warp's butterfly over 32 values
 * and a halving block tree differ from a left-to-right sum in the last
 * bits, so the tests above that expect equality are not vacuous. */
static void test_trees_are_not_sequential(void **state) {
    (void)state;
    float v[256], w[256], seq = 0.0f;
    for (int i = 0; i < 256; i++) v[i] = w[i] = (float)(1.0 + uniform() * 1e-3) * (i % 2 ? 1e4f : 1e-3f);
    for (int i = 0; i < V2_WARP; i++) seq += v[i];
    float tree = v2_warp_sum_tree(v);
    float seq2 = 0.0f;
    for (int i = 0; i < 256; i++) seq2 += w[i];
    float btree = v2_block_sum_tree(w, 256);
    assert_true(tree != seq || btree != seq2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_residual_layernorm), cmocka_unit_test(test_layernorm_backward),
        cmocka_unit_test(test_gelu_every_bf16),    cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_trees_are_not_sequential),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
