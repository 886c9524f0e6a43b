/* Causal multi-head attention: forward against a naive double-precision
 * reference, the softmax rows (sum to 1, zero upper triangle), causality,
 * and attention_backward against central finite differences (see
 * gradcheck.h for the technique and tolerance). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
    struct flop_counter fc = {0};
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
    struct flop_counter fc = {0};
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
    struct flop_counter fc = {0};
    attention_forward(a->out, a->att, a->qkv, B, T, C, NH, &fc);
    return dot_loss(a->out, a->g, (size_t)B * T * C);
}

static void test_attention_grad(void **state) {
    (void)state;
    struct flop_counter fc = {0};
    float *qkv = alloc_f(B * T * C3), *out = alloc_f(B * T * C), *att = alloc_f(B * NH * T * T);
    float *g = alloc_f(B * T * C), *dqkv = alloc_f(B * T * C3);
    float *scratch = alloc_f((size_t)T * omp_get_max_threads());
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_forward_reference),
        cmocka_unit_test(test_attention_causal),
        cmocka_unit_test(test_attention_grad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
