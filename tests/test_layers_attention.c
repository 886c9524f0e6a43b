/* Causal multi-head attention: forward against a naive double-precision
 * reference, the softmax rows (sum to 1, zero upper triangle), causality,
 * and attention_backward against central finite differences (see
 * gradcheck.h for the technique and tolerance); on a larger ragged shape
 * both directions against double-precision references; the FLOPs counted
 * are the full-square GEMMs; results do not depend on the thread count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>

#include <cmocka.h>
#include <omp.h>

#include "gradcheck.h"
#include "layers.h"

enum { B = 2, T = 5, C = 8, NH = 2, HS = C / NH, C3 = 3 * C };

static float *qkv_at(float *qkv, int b, int t, int part, int h) {
    return qkv + ((size_t)b * T + t) * C3 + (size_t)part * C + (size_t)h * HS;
}

static void make_qkv(float *qkv) { fill_uniform(qkv, (size_t)B * T * C3, -1.5f, 1.5f, 100); }

static void test_attention_forward_reference(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    float *qkv = alloc_f(B * T * C3), *out = alloc_f(B * T * C), *att = alloc_f(B * NH * T * T);
    make_qkv(qkv);
    fill_const(att, B * NH * T * T, NAN); /* the forward must write every entry */
    attention_forward(out, att, qkv, B, T, C, NH, &fc);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                double s[T], m = -INFINITY, z = 0, rowsum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    double d = 0;
                    for (int i = 0; i < HS; i++)
                        d += (double)qkv_at(qkv, b, t, 0, h)[i] * qkv_at(qkv, b, t2, 1, h)[i];
                    s[t2] = d / sqrt((double)HS);
                    m = s[t2] > m ? s[t2] : m;
                }
                for (int t2 = 0; t2 <= t; t2++) z += exp(s[t2] - m);
                for (int t2 = 0; t2 <= t; t2++) {
                    assert_near(a[t2], exp(s[t2] - m) / z, 1e-6);
                    rowsum += a[t2];
                }
                assert_near(rowsum, 1.0, 1e-6);
                for (int t2 = t + 1; t2 < T; t2++) assert_true(a[t2] == 0.0f); /* exact zeros above diagonal */
                for (int i = 0; i < HS; i++) {
                    double o = 0;
                    for (int t2 = 0; t2 <= t; t2++) o += exp(s[t2] - m) / z * qkv_at(qkv, b, t2, 2, h)[i];
                    assert_near(out[((size_t)b * T + t) * C + (size_t)h * HS + i], o, 1e-5);
                }
            }
    free(qkv), free(out), free(att);
}

/* Changing token t0's q, k and v in batch 0 must not change any output of
 * batch 0 before t0 (bit for bit: they never read it) nor anything in
 * batch 1, and must change the outputs at t0 and later. */
static void test_attention_causal(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    const int t0 = 3;
    float *qkv = alloc_f(B * T * C3), *qkv2 = alloc_f(B * T * C3);
    float *out = alloc_f(B * T * C), *out2 = alloc_f(B * T * C);
    float *att = alloc_f(B * NH * T * T), *att2 = alloc_f(B * NH * T * T);
    make_qkv(qkv);
    memcpy(qkv2, qkv, sizeof(float) * B * T * C3);
    for (int h = 0; h < NH; h++)
        for (int part = 0; part < 3; part++)
            for (int i = 0; i < HS; i++) qkv_at(qkv2, 0, t0, part, h)[i] += 0.75f + 0.1f * (float)i;
    attention_forward(out, att, qkv, B, T, C, NH, &fc);
    attention_forward(out2, att2, qkv2, B, T, C, NH, &fc);
    assert_memory_equal(out, out2, sizeof(float) * t0 * C);                     /* b = 0, t < t0 */
    assert_memory_equal(out + T * C, out2 + T * C, sizeof(float) * T * C);     /* b = 1 */
    for (int h = 0; h < NH; h++) /* attention rows of queries before t0 too */
        assert_memory_equal(att + (size_t)h * T * T, att2 + (size_t)h * T * T, sizeof(float) * t0 * T);
    for (int t = t0; t < T; t++) {
        double diff = 0;
        for (int c = 0; c < C; c++) diff += fabs(out[t * C + c] - out2[t * C + c]);
        assert_true(diff > 1e-3); /* the change is visible from t0 on */
    }
    free(qkv), free(qkv2), free(out), free(out2), free(att), free(att2);
}

struct att_ctx { float *out, *att, *qkv, *g; };
static double att_loss(void *p) {
    struct att_ctx *a = p;
    struct exec_ctx fc = {0};
    attention_forward(a->out, a->att, a->qkv, B, T, C, NH, &fc);
    return dot_loss(a->out, a->g, (size_t)B * T * C);
}

static void test_attention_grad(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    float *qkv = alloc_f(B * T * C3), *out = alloc_f(B * T * C), *att = alloc_f(B * NH * T * T);
    float *g = alloc_f(B * T * C), *dqkv = alloc_f(B * T * C3);
    float *scratch = alloc_f(attention_backward_scratch(B, T, NH));
    make_qkv(qkv);
    fill_uniform(g, B * T * C, -1, 1, 101);
    attention_forward(out, att, qkv, B, T, C, NH, &fc);
    fill_const(dqkv, B * T * C3, 1e3f); /* dqkv is overwritten */
    attention_backward(dqkv, g, qkv, att, scratch, B, T, C, NH, &fc);
    struct att_ctx a = {out, att, qkv, g};
    assert_int_equal(gc_compare("attention.dqkv", att_loss, &a, qkv, dqkv, B * T * C3, GC_H, 1), 0);
    /* each of dq, dk, dv is exercised, not just the whole tensor */
    for (int part = 0; part < 3; part++) {
        double mx = 0;
        for (int bt = 0; bt < B * T; bt++)
            for (int c = 0; c < C; c++) mx = fmax(mx, fabs(dqkv[(size_t)bt * C3 + part * C + c]));
        assert_true(mx > 1e-2);
    }
    /* a query attending only to itself gets no gradient: softmax of one */
    for (int i = 0; i < HS; i++) assert_near(qkv_at(dqkv, 0, 0, 0, 0)[i], 0.0, 1e-7);
    free(qkv), free(out), free(att), free(g), free(dqkv), free(scratch);
}

/* One head's GEMMs are 2 T^2 hs FLOPs each over the full square: two
 * forward, four backward, so 4 B T^2 C and 8 B T^2 C, all as attention
 * (none as layer GEMMs); the softmax is elementwise work over the causal
 * T (T + 1) / 2 entries per head. */
static void test_attention_flops_issued(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    float *qkv = alloc_f(B * T * C3), *out = alloc_f(B * T * C), *att = alloc_f(B * NH * T * T);
    float *dqkv = alloc_f(B * T * C3), *scratch = alloc_f(attention_backward_scratch(B, T, NH));
    make_qkv(qkv);
    attention_forward(out, att, qkv, B, T, C, NH, &fc);
    assert_true(fc.attention == 4.0 * B * T * T * C); /* 640 */
    assert_true(fc.gemm == 0.0);
    assert_true(fc.other == 5.0 * B * NH * T * (T + 1) / 2);
    attention_backward(dqkv, out, qkv, att, scratch, B, T, C, NH, &fc);
    assert_true(fc.attention == 12.0 * B * T * T * C);
    assert_true(fc.gemm == 0.0);
    assert_true(fc.other == 9.0 * B * NH * T * (T + 1) / 2);
    assert_true(fc.gemm_seconds > 0.0);
    free(qkv), free(out), free(att), free(dqkv), free(scratch);
}

/* A shape with full GEMM blocks and ragged edges: T 67, hs 40, 3 heads. */
enum { LB = 2, LT = 67, LC = 120, LNH = 3, LHS = LC / LNH, LC3 = 3 * LC };

static double lqkv(const float *qkv, int b, int t, int part, int h, int i) {
    return qkv[((size_t)b * LT + t) * LC3 + (size_t)part * LC + (size_t)h * LHS + i];
}

/* Double-precision probabilities of one head, p[t * LT + t2] for t2 <= t. */
static void ref_probs(double *p, const float *qkv, int b, int h) {
    for (int t = 0; t < LT; t++) {
        double m = -INFINITY, z = 0;
        for (int t2 = 0; t2 <= t; t2++) {
            double d = 0;
            for (int i = 0; i < LHS; i++) d += lqkv(qkv, b, t, 0, h, i) * lqkv(qkv, b, t2, 1, h, i);
            p[t * LT + t2] = d / sqrt((double)LHS);
            m = fmax(m, p[t * LT + t2]);
        }
        for (int t2 = 0; t2 <= t; t2++) z += exp(p[t * LT + t2] - m);
        for (int t2 = 0; t2 <= t; t2++) p[t * LT + t2] = exp(p[t * LT + t2] - m) / z;
    }
}

/* Tolerances: inputs in [-1.5, 1.5), so a score sums 40 products of
 * magnitude <= 2.25 and an output or gradient element sums at most 67 terms
 * of O(1); fp32 accumulation errs by ~n eps |terms| ~ 67 x 6e-8 x O(1),
 * about 1e-5 at worst. 1e-4 leaves margin for the differing summation
 * orders, while a wrong stride, transpose or scale errs by O(0.1..1). */
static void test_attention_larger_shape_reference(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    const size_t n_qkv = (size_t)LB * LT * LC3, n_out = (size_t)LB * LT * LC;
    float *qkv = alloc_f(n_qkv), *out = alloc_f(n_out), *att = alloc_f((size_t)LB * LNH * LT * LT);
    float *g = alloc_f(n_out), *dqkv = alloc_f(n_qkv), *scratch = alloc_f(attention_backward_scratch(LB, LT, LNH));
    double *p = malloc(sizeof(double) * LT * LT), *dp = malloc(sizeof(double) * LT);
    double *ref = calloc(n_qkv, sizeof(double));
    if (!p || !dp || !ref) abort();
    fill_uniform(qkv, n_qkv, -1.5f, 1.5f, 102);
    fill_uniform(g, n_out, -1, 1, 103);
    attention_forward(out, att, qkv, LB, LT, LC, LNH, &fc);
    fill_const(dqkv, n_qkv, NAN); /* every element must be written */
    attention_backward(dqkv, g, qkv, att, scratch, LB, LT, LC, LNH, &fc);
    const double scale = 1.0 / sqrt((double)LHS);
    double max_dout = 0, max_dref = 0;
    for (int b = 0; b < LB; b++)
        for (int h = 0; h < LNH; h++) {
            ref_probs(p, qkv, b, h);
            const float *a = att + ((size_t)b * LNH + h) * LT * LT;
            for (int t = 0; t < LT; t++) {
                const float *gt = g + ((size_t)b * LT + t) * LC + (size_t)h * LHS;
                for (int t2 = 0; t2 < LT; t2++) {
                    if (t2 > t) {
                        assert_true(a[t * LT + t2] == 0.0f);
                        continue;
                    }
                    assert_near(a[t * LT + t2], p[t * LT + t2], 1e-6);
                }
                for (int i = 0; i < LHS; i++) {
                    double o = 0;
                    for (int t2 = 0; t2 <= t; t2++) o += p[t * LT + t2] * lqkv(qkv, b, t2, 2, h, i);
                    assert_near(out[((size_t)b * LT + t) * LC + (size_t)h * LHS + i], o, 1e-4);
                    max_dout = fmax(max_dout, fabs(o));
                }
                /* backward of row t: dP, the softmax shift, then dq, dk, dv */
                double shift = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    dp[t2] = 0;
                    for (int i = 0; i < LHS; i++) dp[t2] += gt[i] * lqkv(qkv, b, t2, 2, h, i);
                    shift += p[t * LT + t2] * dp[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    double ds = p[t * LT + t2] * (dp[t2] - shift) * scale;
                    for (int i = 0; i < LHS; i++) {
                        size_t at = ((size_t)b * LT + t) * LC3 + (size_t)h * LHS + i;
                        size_t at2 = ((size_t)b * LT + t2) * LC3 + (size_t)h * LHS + i;
                        ref[at] += ds * lqkv(qkv, b, t2, 1, h, i);
                        ref[at2 + LC] += ds * lqkv(qkv, b, t, 0, h, i);
                        ref[at2 + 2 * LC] += p[t * LT + t2] * gt[i];
                    }
                }
            }
        }
    for (size_t i = 0; i < n_qkv; i++) {
        assert_near(dqkv[i], ref[i], 1e-4);
        max_dref = fmax(max_dref, fabs(ref[i]));
    }
    assert_true(max_dout > 0.1 && max_dref > 0.1); /* the comparisons were not of zeros */
    free(qkv), free(out), free(att), free(g), free(dqkv), free(scratch), free(p), free(dp), free(ref);
}

/* Each head's GEMMs and softmax run on one thread whatever the team, so
 * one thread and two give the same bits (selective recompute relies on
 * the probabilities being reproducible). */
static void test_attention_thread_count_invariant(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    const size_t n_qkv = (size_t)LB * LT * LC3, n_out = (size_t)LB * LT * LC, n_att = (size_t)LB * LNH * LT * LT;
    float *qkv = alloc_f(n_qkv), *g = alloc_f(n_out), *out[2], *att[2], *dqkv[2];
    fill_uniform(qkv, n_qkv, -1.5f, 1.5f, 104);
    fill_uniform(g, n_out, -1, 1, 105);
    int saved = omp_get_max_threads();
    for (int r = 0; r < 2; r++) {
        omp_set_num_threads(r + 1);
        float *scratch = alloc_f(attention_backward_scratch(LB, LT, LNH));
        out[r] = alloc_f(n_out), att[r] = alloc_f(n_att), dqkv[r] = alloc_f(n_qkv);
        attention_forward(out[r], att[r], qkv, LB, LT, LC, LNH, &fc);
        attention_backward(dqkv[r], g, qkv, att[r], scratch, LB, LT, LC, LNH, &fc);
        free(scratch);
    }
    omp_set_num_threads(saved);
    assert_memory_equal(att[0], att[1], sizeof(float) * n_att);
    assert_memory_equal(out[0], out[1], sizeof(float) * n_out);
    assert_memory_equal(dqkv[0], dqkv[1], sizeof(float) * n_qkv);
    free(qkv), free(g);
    for (int r = 0; r < 2; r++) free(out[r]), free(att[r]), free(dqkv[r]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_forward_reference),
        cmocka_unit_test(test_attention_causal),
        cmocka_unit_test(test_attention_grad),
        cmocka_unit_test(test_attention_flops_issued),
        cmocka_unit_test(test_attention_larger_shape_reference),
        cmocka_unit_test(test_attention_thread_count_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
