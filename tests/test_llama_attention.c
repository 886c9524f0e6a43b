/* Grouped-query attention (model/cpu/attention_gqa.c): with n_kv_head =
 * n_head it is the plain attention (model/cpu/attention.c); with fewer KV
 * heads it is the plain attention on K and V repeated per query head (the
 * reference's repeat_kv), its dK and dV the sums over the query heads that
 * share them; its forward against a double-precision reference written
 * here, its backward against finite differences, its bf16 forms against
 * the fp32 ones within layers.h's bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <omp.h>

#include "../model/cpu/layers_cpu.h"
#include "gradcheck.h"
#include "llama_layers.h"
#include "llama_check.h"

enum { B = 2, T = 5, NH = 4, KV = 2, HS = 4, REP = NH / KV, C = NH * HS, W = (NH + 2 * KV) * HS, C3 = 3 * C };
#define SAME_TOL 1e-6   /* the brief's bound where the order of sums may differ */
#define FWD_RTOL 2e-6   /* fp32 kernel vs double */

static size_t n_qkv(int64_t kv) { return (size_t)B * T * (NH + 2 * kv) * HS; }

/* The rows of a GQA qkv (KV heads) with K and V repeated per query head:
 * the plain attention's (B, T, 3C) layout. */
static void expand_kv(float *full, const float *gqa) {
    for (int r = 0; r < B * T; r++)
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < HS; d++) {
                const float *src = gqa + r * W;
                float *dst = full + r * C3;
                dst[h * HS + d] = src[h * HS + d];
                dst[C + h * HS + d] = src[(NH + h / REP) * HS + d];
                dst[2 * C + h * HS + d] = src[(NH + KV + h / REP) * HS + d];
            }
}

static void test_gqa_equals_plain_when_kv_is_nh(void **state) {
    (void)state;
    float *qkv = alloc_f(n_qkv(NH)), *dout = alloc_f(B * T * C), *out_a = alloc_f(B * T * C),
          *out_b = alloc_f(B * T * C), *att_a = alloc_f(B * NH * T * T), *att_b = alloc_f(B * NH * T * T),
          *dq_a = alloc_f(n_qkv(NH)), *dq_b = alloc_f(n_qkv(NH)),
          *scr_a = alloc_f(attention_backward_scratch(B, T, NH)),
          *scr_b = alloc_f(attention_gqa_backward_scratch_for(B, T, NH, omp_get_max_threads()));
    fill_uniform(qkv, n_qkv(NH), -1.0f, 1.0f, 1);
    fill_uniform(dout, B * T * C, -1.0f, 1.0f, 2);
    struct exec_ctx fa = {0}, fb = {0};
    attention_forward_cpu(out_a, att_a, qkv, B, T, C, NH, &fa);
    attention_gqa_forward(out_b, att_b, qkv, B, T, NH, NH, HS, &fb);
    attention_backward_cpu(dq_a, dout, qkv, att_a, scr_a, B, T, C, NH, &fa);
    attention_gqa_backward(dq_b, dout, qkv, att_b, scr_b, B, T, NH, NH, HS, &fb);
    /* the same GEMMs and softmax in the same order: the same bits */
    assert_memory_equal(out_b, out_a, (size_t)B * T * C * sizeof *out_a);
    assert_memory_equal(att_b, att_a, (size_t)B * NH * T * T * sizeof *att_a);
    assert_memory_equal(dq_b, dq_a, n_qkv(NH) * sizeof *dq_a);
    assert_true(fa.attention == fb.attention && fa.other == fb.other); /* the same FLOPs counted */
    free(qkv), free(dout), free(out_a), free(out_b), free(att_a), free(att_b), free(dq_a), free(dq_b);
    free(scr_a), free(scr_b);
}

/* GQA = the plain attention on repeated K, V; dK_j, dV_j = the sums of
 * the plain attention's dK_h, dV_h over h in j's group. */
static void test_gqa_sums_shared_kv_grads(void **state) {
    (void)state;
    float *qkv = alloc_f(n_qkv(KV)), *full = alloc_f(n_qkv(NH)), *dout = alloc_f(B * T * C),
          *out_g = alloc_f(B * T * C), *out_p = alloc_f(B * T * C), *att_g = alloc_f(B * NH * T * T),
          *att_p = alloc_f(B * NH * T * T), *dg = alloc_f(n_qkv(KV)), *dp = alloc_f(n_qkv(NH)),
          *scr_g = alloc_f(attention_gqa_backward_scratch_for(B, T, KV, omp_get_max_threads())),
          *scr_p = alloc_f(attention_backward_scratch(B, T, NH));
    fill_uniform(qkv, n_qkv(KV), -1.0f, 1.0f, 3);
    fill_uniform(dout, B * T * C, -1.0f, 1.0f, 4);
    expand_kv(full, qkv);
    struct exec_ctx fc = {0};
    attention_gqa_forward(out_g, att_g, qkv, B, T, NH, KV, HS, &fc);
    attention_forward_cpu(out_p, att_p, full, B, T, C, NH, &fc);
    for (size_t i = 0; i < (size_t)B * T * C; i++) assert_near(out_g[i], out_p[i], SAME_TOL);
    attention_gqa_backward(dg, dout, qkv, att_g, scr_g, B, T, NH, KV, HS, &fc);
    attention_backward_cpu(dp, dout, full, att_p, scr_p, B, T, C, NH, &fc);
    for (int r = 0; r < B * T; r++)
        for (int d = 0; d < HS; d++) {
            for (int h = 0; h < NH; h++) assert_near(dg[r * W + h * HS + d], dp[r * C3 + h * HS + d], SAME_TOL);
            for (int j = 0; j < KV; j++) {
                double sk = 0, sv = 0;
                for (int g = 0; g < REP; g++) {
                    sk += dp[r * C3 + C + (j * REP + g) * HS + d];
                    sv += dp[r * C3 + 2 * C + (j * REP + g) * HS + d];
                }
                assert_near(dg[r * W + (NH + j) * HS + d], sk, SAME_TOL);
                assert_near(dg[r * W + (NH + KV + j) * HS + d], sv, SAME_TOL);
            }
        }
    free(qkv), free(full), free(dout), free(out_g), free(out_p), free(att_g), free(att_p), free(dg), free(dp);
    free(scr_g), free(scr_p);
}

/* out[b,t,h] = sum_{s<=t} softmax_s(q_t.k_s / sqrt(hs)) v_s in double. */
static void gqa_ref(double *out, const float *qkv) {
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + (b * T + t) * W + h * HS;
                double s[T], mx = -INFINITY, sum = 0;
                for (int u = 0; u <= t; u++) {
                    const float *k = qkv + (b * T + u) * W + (NH + h / REP) * HS;
                    s[u] = 0;
                    for (int d = 0; d < HS; d++) s[u] += (double)q[d] * k[d];
                    s[u] /= sqrt((double)HS);
                    mx = s[u] > mx ? s[u] : mx;
                }
                for (int u = 0; u <= t; u++) sum += (s[u] = exp(s[u] - mx));
                for (int d = 0; d < HS; d++) {
                    double o = 0;
                    for (int u = 0; u <= t; u++) o += s[u] / sum * qkv[(b * T + u) * W + (NH + KV + h / REP) * HS + d];
                    out[(b * T + t) * C + h * HS + d] = o;
                }
            }
}

static void test_gqa_forward_matches_double(void **state) {
    (void)state;
    float *qkv = alloc_f(n_qkv(KV)), *out = alloc_f(B * T * C), *att = alloc_f(B * NH * T * T);
    double ref[B * T * C];
    fill_uniform(qkv, n_qkv(KV), -2.0f, 2.0f, 5);
    struct exec_ctx fc = {0};
    attention_gqa_forward(out, att, qkv, B, T, NH, KV, HS, &fc);
    gqa_ref(ref, qkv);
    for (int i = 0; i < B * T * C; i++) assert_near(out[i], ref[i], FWD_RTOL * (fabs(ref[i]) + 1.0));
    free(qkv), free(out), free(att);
}

struct gqa_ctx { float *qkv, *out, *att, *g; };

static double gqa_loss(void *p) {
    struct gqa_ctx *c = p;
    struct exec_ctx fc = {0};
    attention_gqa_forward(c->out, c->att, c->qkv, B, T, NH, KV, HS, &fc);
    return dot_loss(c->out, c->g, B * T * C);
}

static void test_gqa_grad(void **state) {
    (void)state;
    float *qkv = alloc_f(n_qkv(KV)), *out = alloc_f(B * T * C), *att = alloc_f(B * NH * T * T),
          *g = alloc_f(B * T * C), *dqkv = alloc_f(n_qkv(KV)),
          *scr = alloc_f(attention_gqa_backward_scratch_for(B, T, KV, omp_get_max_threads()));
    fill_uniform(qkv, n_qkv(KV), -1.0f, 1.0f, 6);
    fill_uniform(g, B * T * C, -1.0f, 1.0f, 7);
    fill_const(dqkv, n_qkv(KV), NAN); /* overwritten: a sentinel left anywhere fails */
    struct gqa_ctx c = {qkv, out, att, g};
    struct exec_ctx fc = {0};
    attention_gqa_forward(out, att, qkv, B, T, NH, KV, HS, &fc);
    attention_gqa_backward(dqkv, g, qkv, att, scr, B, T, NH, KV, HS, &fc);
    assert_int_equal(gc_compare("gqa.dqkv", gqa_loss, &c, qkv, dqkv, n_qkv(KV), GC_H, 1), 0);
    free(qkv), free(out), free(att), free(g), free(dqkv), free(scr);
}

static void test_gqa_bf16_within_bound(void **state) {
    (void)state;
    const size_t nq = n_qkv(KV), no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = alloc_f(nq), *dout = alloc_f(no), *out = alloc_f(no), *att = alloc_f(na), *att16 = alloc_f(na),
          *dqkv = alloc_f(nq), *scr = alloc_f(attention_gqa_backward_scratch_for(B, T, KV, omp_get_max_threads())),
          *fscr = alloc_f(attention_gqa_forward_bf16_scratch_for(B, T, NH, HS, omp_get_max_threads())),
          *bscr = alloc_f(attention_gqa_backward_bf16_scratch_for(B, T, KV, HS, omp_get_max_threads()));
    bf16 *qkv16 = alloc_bf16(nq), *out16 = alloc_bf16(no), *dqkv16 = alloc_bf16(nq);
    fill_uniform(qkv, nq, -1.0f, 1.0f, 8);
    fill_uniform(dout, no, -1.0f, 1.0f, 9);
    narrow_inputs(qkv16, qkv, nq);
    struct exec_ctx fc = {0};
    attention_gqa_forward(out, att, qkv, B, T, NH, KV, HS, &fc);
    attention_gqa_forward_bf16(out16, att16, qkv16, fscr, B, T, NH, KV, HS, &fc);
    int not_bits;
    assert_int_equal(bf16_outside_bound(out16, out, no, &not_bits), 0);
    for (size_t i = 0; i < na; i++) assert_near(att16[i], att[i], SAME_TOL);
    attention_gqa_backward(dqkv, dout, qkv, att, scr, B, T, NH, KV, HS, &fc);
    attention_gqa_backward_bf16(dqkv16, dout, qkv16, att16, bscr, B, T, NH, KV, HS, &fc);
    assert_int_equal(bf16_outside_bound(dqkv16, dqkv, nq, &not_bits), 0);
    free(qkv), free(dout), free(out), free(att), free(att16), free(dqkv), free(scr), free(fscr), free(bscr);
    free(qkv16), free(out16), free(dqkv16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gqa_equals_plain_when_kv_is_nh),
        cmocka_unit_test(test_gqa_sums_shared_kv_grads),
        cmocka_unit_test(test_gqa_forward_matches_double),
        cmocka_unit_test(test_gqa_grad),
        cmocka_unit_test(test_gqa_bf16_within_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
