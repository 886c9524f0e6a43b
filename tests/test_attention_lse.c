/* The log-sum-exp attention (model/cpu/attention_lse.c, --attention flash)
 * against the plain one (model/cpu/attention.c) on the same random inputs,
 * and on its own:
 *   - shapes (B, T, C, NH) with T = 1, T below, at and across the 64-key
 *     tile (2, 64, 65, 130, 200: up to 4 tiles with a ragged last one),
 *     one head and several, hs 4 to 64; inputs uniform in [-a, a), a = 1.5
 *     or 4 (a peaked softmax), dout in [-1, 1); every output and the
 *     scratch start as NaN, so an element left unwritten fails. Bounds:
 *       out   normwise 1e-6 (max |lse - plain| <= 1e-6 max |plain|)
 *       lse   |lse - ref| <= 1e-6 max(1, |ref|), ref = log of the plain
 *             row sum of exp(s), in double: max + log sum exp(s - max)
 *       dq, dk, dv  each normwise 1e-5 against attention_backward's
 *     at amplitude 4 out and lse get (4/1.5)^2 = 7.1 times that
 *     (peak_factor). Reached (printed each run): amplitude 1.5 at most
 *     2.0e-7 (out), 2.6e-7 (lse), 4.2e-7 (dq, dk, dv); amplitude 4 1.3e-6,
 *     8.0e-7, 1.1e-6; at T = 1 dq and dk are exactly 0;
 *   - attention_lse_backward against central finite differences
 *     (gradcheck.h) on B 2, T 5, C 8, NH 2;
 *   - the FLOPs counted, by hand (layers.h's formulas), and their causal
 *     products against the plain attention's full squares;
 *   - the same bits under 1, 3 and 4 OpenMP threads (one thread per head,
 *     each head's sums in a fixed order). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <omp.h>

#include "gradcheck.h"
#include "layers.h"

#define OUT_BOUND 1e-6
#define LSE_BOUND 1e-6
#define GRAD_BOUND 1e-5

struct shape {
    int64_t B, T, C, NH;
    float amp;
};

/* max |got - want| / max |want|; where want is all zero, max |got - want|. */
static double normwise(const float *want, const float *got, size_t n, size_t stride, size_t width) {
    double scale = 0.0, worst = 0.0;
    for (size_t r = 0; r < n / width; r++)
        for (size_t i = 0; i < width; i++) {
            double w = want[r * stride + i], g = got[r * stride + i], d = fabs(g - w);
            if (isnan(d)) return INFINITY;
            scale = fmax(scale, fabs(w));
            worst = fmax(worst, d);
        }
    return scale > 0.0 ? worst / scale : worst;
}

/* The bounds hold at amplitude 1.5. Both kernels' fp32 scores err by
 * about |q| |k| 2^-24 sqrt(hs) (other summation orders), an error every
 * probability then carries relatively, so the bounds of out and lse grow
 * with amp^2: 7.1 at amplitude 4. */
static double peak_factor(float amp) { return amp <= 1.5f ? 1.0 : ((double)amp / 1.5) * ((double)amp / 1.5); }

/* log sum_{j<=t} exp(s_j) of the scaled causal scores, in double. */
static double lse_reference(const float *qkv, const struct shape *s, int64_t b, int64_t h, int64_t t) {
    const int64_t hs = s->C / s->NH, C3 = 3 * s->C;
    double sc[512], mx = -INFINITY, sum = 0.0;
    assert_true(t < 512);
    for (int64_t j = 0; j <= t; j++) {
        const float *q = qkv + (b * s->T + t) * C3 + h * hs, *k = qkv + (b * s->T + j) * C3 + s->C + h * hs;
        double d = 0.0;
        for (int64_t i = 0; i < hs; i++) d += (double)q[i] * k[i];
        sc[j] = d / sqrt((double)hs);
        mx = fmax(mx, sc[j]);
    }
    for (int64_t j = 0; j <= t; j++) sum += exp(sc[j] - mx);
    return mx + log(sum);
}

static void test_against_plain(void **state) {
    (void)state;
    const struct shape shapes[] = {{1, 1, 8, 1, 1.5f},  {2, 2, 8, 2, 1.5f},    {2, 5, 12, 3, 1.5f},
                                   {1, 64, 64, 1, 1.5f}, {2, 65, 64, 2, 1.5f},  {3, 67, 120, 3, 4.0f},
                                   {2, 130, 64, 4, 1.5f}, {1, 200, 128, 2, 4.0f}};
    double worst[5] = {0};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const struct shape *s = &shapes[si];
        const int64_t B = s->B, T = s->T, C = s->C, NH = s->NH, BT = B * T, C3 = 3 * C;
        float *qkv = alloc_f((size_t)(BT * C3)), *dout = alloc_f((size_t)(BT * C));
        fill_uniform(qkv, (size_t)(BT * C3), -s->amp, s->amp, 200 + si);
        fill_uniform(dout, (size_t)(BT * C), -1.0f, 1.0f, 300 + si);
        float *out = alloc_f((size_t)(BT * C)), *att = alloc_f((size_t)(B * NH * T * T));
        float *dqkv = alloc_f((size_t)(BT * C3)), *scr = alloc_f(attention_backward_scratch(B, T, NH));
        struct exec_ctx fc = {0};
        attention_forward(out, att, qkv, B, T, C, NH, &fc);
        attention_backward(dqkv, dout, qkv, att, scr, B, T, C, NH, &fc);

        float *out2 = alloc_f((size_t)(BT * C)), *lse = alloc_f((size_t)(B * NH * T));
        float *dqkv2 = alloc_f((size_t)(BT * C3)), *scr2 = alloc_f(attention_lse_backward_scratch(B, T, NH));
        assert_int_equal(attention_lse_backward_scratch(B, T, NH), (size_t)(B * NH * T));
        fill_const(out2, (size_t)(BT * C), NAN);
        fill_const(lse, (size_t)(B * NH * T), NAN);
        fill_const(dqkv2, (size_t)(BT * C3), NAN);
        fill_const(scr2, attention_lse_backward_scratch(B, T, NH), NAN);
        attention_lse_forward(out2, lse, qkv, B, T, C, NH, &fc);
        attention_lse_backward(dqkv2, scr2, dout, qkv, out2, lse, B, T, C, NH, &fc);

        double e_out = normwise(out, out2, (size_t)(BT * C), (size_t)C, (size_t)C), e_lse = 0.0, e_d[3];
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < NH; h++)
                for (int64_t t = 0; t < T; t++) {
                    double ref = lse_reference(qkv, s, b, h, t), got = lse[(b * NH + h) * T + t];
                    double e = fabs(got - ref) / fmax(1.0, fabs(ref));
                    e_lse = isnan(e) ? INFINITY : fmax(e_lse, e);
                }
        for (int part = 0; part < 3; part++)
            e_d[part] = normwise(dqkv + part * C, dqkv2 + part * C, (size_t)(BT * C), (size_t)C3, (size_t)C);
        printf("  B %lld T %lld C %lld NH %lld amplitude %.1f: out %.1e, lse %.1e, dq %.1e dk %.1e dv %.1e\n",
               (long long)B, (long long)T, (long long)C, (long long)NH, (double)s->amp, e_out, e_lse, e_d[0], e_d[1],
               e_d[2]);
        const double k = peak_factor(s->amp);
        assert_true(e_out <= OUT_BOUND * k);
        assert_true(e_lse <= LSE_BOUND * k);
        for (int part = 0; part < 3; part++) assert_true(e_d[part] <= GRAD_BOUND);
        double e[5] = {e_out, e_lse, e_d[0], e_d[1], e_d[2]};
        for (int i = 0; i < 5; i++) worst[i] = fmax(worst[i], e[i]);
        if (T == 1) /* a softmax over one key: dq and dk are exactly 0 (P = 1, dP = D) */
            for (int64_t i = 0; i < BT * C3; i++)
                if (i % C3 < 2 * C) assert_true(dqkv2[i] == 0.0f);
        free(qkv), free(dout), free(out), free(att), free(dqkv), free(scr);
        free(out2), free(lse), free(dqkv2), free(scr2);
    }
    printf("  worst: out %.1e, lse %.1e, dq %.1e, dk %.1e, dv %.1e\n", worst[0], worst[1], worst[2], worst[3],
           worst[4]);
}

enum { B = 2, T = 5, C = 8, NH = 2, C3 = 3 * C };

struct lse_ctx {
    float *out, *lse, *qkv, *g;
};

static double lse_loss(void *p) {
    struct lse_ctx *a = p;
    struct exec_ctx fc = {0};
    attention_lse_forward(a->out, a->lse, a->qkv, B, T, C, NH, &fc);
    return dot_loss(a->out, a->g, (size_t)B * T * C);
}

static void test_grad_finite_differences(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    float *qkv = alloc_f(B * T * C3), *out = alloc_f(B * T * C), *lse = alloc_f(B * NH * T);
    float *g = alloc_f(B * T * C), *dqkv = alloc_f(B * T * C3), *scratch = alloc_f(attention_lse_backward_scratch(B, T, NH));
    fill_uniform(qkv, B * T * C3, -1.5f, 1.5f, 100);
    fill_uniform(g, B * T * C, -1, 1, 101);
    attention_lse_forward(out, lse, qkv, B, T, C, NH, &fc);
    fill_const(dqkv, B * T * C3, 1e3f); /* overwritten */
    attention_lse_backward(dqkv, scratch, g, qkv, out, lse, B, T, C, NH, &fc);
    struct lse_ctx a = {out, lse, qkv, g};
    assert_int_equal(gc_compare("attention_lse.dqkv", lse_loss, &a, qkv, dqkv, B * T * C3, GC_H, 1), 0);
    for (int part = 0; part < 3; part++) { /* each of dq, dk, dv carries a gradient */
        double mx = 0;
        for (int bt = 0; bt < B * T; bt++)
            for (int c = 0; c < C; c++) mx = fmax(mx, fabs(dqkv[(size_t)bt * C3 + part * C + c]));
        assert_true(mx > 1e-2);
    }
    free(qkv), free(out), free(lse), free(g), free(dqkv), free(scratch);
}

/* layers.h's counts: per head, S = T (T+1)/2 causal scores; forward
 * products 2 x 2 hs S, elementwise 5 S + tiles (hs + 4) + T (hs + 3), with
 * tiles = sum over rows of ceil((t+1)/64); backward products 5 x 2 hs S,
 * elementwise 5 S + 4 hs T. */
static void check_flops(int64_t b, int64_t t, int64_t c, int64_t nh, double tiles) {
    const double heads = (double)(b * nh), hs = (double)(c / nh), S = (double)t * (t + 1) / 2;
    float *qkv = alloc_f((size_t)(b * t * 3 * c)), *out = alloc_f((size_t)(b * t * c)), *lse = alloc_f((size_t)(b * nh * t));
    float *dqkv = alloc_f((size_t)(b * t * 3 * c)), *scratch = alloc_f(attention_lse_backward_scratch(b, t, nh));
    fill_uniform(qkv, (size_t)(b * t * 3 * c), -1, 1, 7);
    struct exec_ctx fwd = {0}, bwd = {0};
    attention_lse_forward(out, lse, qkv, b, t, c, nh, &fwd);
    attention_lse_backward(dqkv, scratch, out, qkv, out, lse, b, t, c, nh, &bwd);
    assert_true(fwd.attention == heads * 4 * hs * S);
    assert_true(fwd.attention == 2.0 * b * c * t * (t + 1)); /* the theory's 2 B C T (T+1) */
    assert_true(fwd.other == heads * (5 * S + tiles * (hs + 4) + (double)t * (hs + 3)));
    assert_true(bwd.attention == 5.0 * b * c * t * (t + 1));
    assert_true(bwd.other == heads * (5 * S + 4 * hs * (double)t));
    assert_true(fwd.gemm == 0.0 && bwd.gemm == 0.0);
    free(qkv), free(out), free(lse), free(dqkv), free(scratch);
}

static void test_flops(void **state) {
    (void)state;
    check_flops(B, T, C, NH, 5);         /* one tile per row */
    check_flops(1, 130, 64, 2, 64 + 128 + 6); /* rows 0-63: 1 tile, 64-127: 2, 128-129: 3 */
    /* against the plain attention: 7 B C T (T+1) causal products instead of
     * 12 B C T^2 issued on full squares (PaLM's model count: 6 B C T^2) */
    struct exec_ctx plain = {0}, lse = {0};
    float *qkv = alloc_f(B * T * C3), *out = alloc_f(B * T * C), *att = alloc_f(B * NH * T * T);
    float *l = alloc_f(B * NH * T), *dqkv = alloc_f(B * T * C3);
    float *s1 = alloc_f(attention_backward_scratch(B, T, NH)), *s2 = alloc_f(attention_lse_backward_scratch(B, T, NH));
    fill_uniform(qkv, B * T * C3, -1, 1, 8);
    attention_forward(out, att, qkv, B, T, C, NH, &plain);
    attention_backward(dqkv, out, qkv, att, s1, B, T, C, NH, &plain);
    attention_lse_forward(out, l, qkv, B, T, C, NH, &lse);
    attention_lse_backward(dqkv, s2, out, qkv, out, l, B, T, C, NH, &lse);
    assert_true(plain.attention == 12.0 * B * C * T * T);
    assert_true(lse.attention == 7.0 * B * C * T * (T + 1));
    free(qkv), free(out), free(att), free(l), free(dqkv), free(s1), free(s2);
}

static void test_thread_count_invariant(void **state) {
    (void)state;
    const int64_t b = 3, t = 70, c = 48, nh = 4, BT = b * t;
    const int threads[] = {1, 3, 4};
    float *qkv = alloc_f((size_t)(BT * 3 * c)), *dout = alloc_f((size_t)(BT * c));
    fill_uniform(qkv, (size_t)(BT * 3 * c), -2, 2, 9);
    fill_uniform(dout, (size_t)(BT * c), -1, 1, 10);
    float *ref[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; k++) {
        omp_set_num_threads(threads[k]);
        float *out = alloc_f((size_t)(BT * c)), *lse = alloc_f((size_t)(b * nh * t)), *dqkv = alloc_f((size_t)(BT * 3 * c));
        float *scratch = alloc_f(attention_lse_backward_scratch(b, t, nh));
        struct exec_ctx fc = {0};
        attention_lse_forward(out, lse, qkv, b, t, c, nh, &fc);
        attention_lse_backward(dqkv, scratch, dout, qkv, out, lse, b, t, c, nh, &fc);
        float *got[3] = {out, lse, dqkv};
        size_t n[3] = {(size_t)(BT * c), (size_t)(b * nh * t), (size_t)(BT * 3 * c)};
        for (int i = 0; i < 3; i++) {
            if (k == 0) ref[i] = got[i];
            else {
                assert_memory_equal(ref[i], got[i], n[i] * sizeof(float));
                free(got[i]);
            }
        }
        free(scratch);
    }
    omp_set_num_threads(1);
    free(ref[0]), free(ref[1]), free(ref[2]), free(qkv), free(dout);
}

static int setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_plain),
        cmocka_unit_test(test_grad_finite_differences),
        cmocka_unit_test(test_flops),
        cmocka_unit_test(test_thread_count_invariant),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
