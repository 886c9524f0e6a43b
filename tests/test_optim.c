/* The optimizer: AdamW against a step worked out in double here, gradient
 * scaling, the bf16 gradient path, bf16 writeback (nearest and stochastic),
 * the LR schedule and global-norm clipping. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <omp.h>

#include "bufops.h"
#include "optim.h"

static void assert_rel(double got, double want, double tol, const char *what, int i) {
    double err = fabs(got - want), scale = fabs(want);
    if (!(err <= tol * (scale > 0 ? scale : 1.0)))
        fail_msg("%s[%d]: got %.12g, want %.12g (rel err %.3g > %.3g)", what, i, got, want,
                 scale > 0 ? err / scale : err, tol);
}

static const struct param_writeback NO_WRITEBACK = {.params = NULL};

enum { N3 = 3 };
static const float G3[N3] = {0.5f, -1.25f, 2.0f};
static const float M3[N3] = {0.1f, -0.2f, 0.0f};
static const float V3[N3] = {0.01f, 0.04f, 0.0f};
static const float W3[N3] = {1.0f, -0.5f, 0.25f};

/* One AdamW step in double, PyTorch's order, from the float hyperparameters
 * as the kernel sees them:
 *   m' = b1 m + (1 - b1) g
 *   v' = b2 v + (1 - b2) g^2
 *   w' = w (1 - lr wd) - (lr / (1 - b1^t)) m' / (sqrt(v') / sqrt(1 - b2^t) + eps) */
static void adamw_reference(const struct adamw_hparams *h, int n, const float *g, const float *m, const float *v,
                            const float *w, double *m2, double *v2, double *w2) {
    const double lr = h->lr, b1 = h->beta1, b2 = h->beta2, eps = h->eps, wd = h->weight_decay;
    const double t = (double)h->t;
    for (int i = 0; i < n; i++) {
        double gi = (double)g[i] * (double)h->grad_scale;
        m2[i] = b1 * m[i] + (1.0 - b1) * gi;
        v2[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
        w2[i] = w[i] * (1.0 - lr * wd) - (lr / (1.0 - pow(b1, t))) * m2[i] / (sqrt(v2[i]) / sqrt(1.0 - pow(b2, t)) + eps);
    }
}

static void check_hand_step(int64_t t, float grad_scale) {
    struct adamw_hparams h = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                              .weight_decay = 0.1f, .grad_scale = grad_scale, .t = t};
    float w[N3], m[N3], v[N3];
    memcpy(w, W3, sizeof w);
    memcpy(m, M3, sizeof m);
    memcpy(v, V3, sizeof v);
    struct exec_ctx fc = {0};
    adamw_update(&h, N3, w, m, v, G3, DTYPE_FP32, &NO_WRITEBACK, &fc);
    double m2[N3], v2[N3], w2[N3];
    adamw_reference(&h, N3, G3, M3, V3, W3, m2, v2, w2);
    for (int i = 0; i < N3; i++) {
        assert_rel(m[i], m2[i], 1e-6, "m", i);
        assert_rel(v[i], v2[i], 1e-6, "v", i);
        assert_rel(w[i], w2[i], 1e-6, "w", i);
        /* The update itself, not only w: the kernel computes 1 - b2^t in
         * float (as llm.c does), which loses ~1e-5 relative at t > 1. */
        double step_got = (double)W3[i] * (1.0 - (double)h.lr * h.weight_decay) - w[i];
        double step_want = (double)W3[i] * (1.0 - (double)h.lr * h.weight_decay) - w2[i];
        assert_rel(step_got, step_want, 1e-4, "update", i);
        assert_true(fabs(step_want) > 1e-3); /* every element really moved */
    }
    assert_true(fc.other > 0.0);
}

static void test_adamw_hand_step_t1(void **state) {
    (void)state;
    check_hand_step(1, 1.0f);
    /* The numbers spelled out for element 0 at t = 1 (b1 = 0.9, b2 = 0.999,
     * lr = 0.01, wd = 0.1, g = 0.5, m = 0.1, v = 0.01, w = 1):
     * m' = 0.09 + 0.05 = 0.14, v' = 0.00999 + 0.00025 = 0.01024,
     * mhat = 1.4, sqrt(vhat) = sqrt(10.24) = 3.2,
     * w' = 0.999 - 0.01 * 1.4 / 3.2 = 0.999 - 0.004375 = 0.994625. */
    struct adamw_hparams h = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                              .weight_decay = 0.1f, .grad_scale = 1.0f, .t = 1};
    float w[N3], m[N3], v[N3];
    memcpy(w, W3, sizeof w);
    memcpy(m, M3, sizeof m);
    memcpy(v, V3, sizeof v);
    struct exec_ctx fc = {0};
    adamw_update(&h, N3, w, m, v, G3, DTYPE_FP32, &NO_WRITEBACK, &fc);
    assert_rel(m[0], 0.14, 1e-6, "m literal", 0);
    assert_rel(v[0], 0.01024, 1e-6, "v literal", 0);
    assert_rel(w[0], 0.994625, 1e-6, "w literal", 0);
    assert_true(fc.other == 14.0 * N3);
}

static void test_adamw_hand_step_t3(void **state) {
    (void)state;
    check_hand_step(3, 1.0f);
}

static void test_adamw_grad_scale(void **state) {
    (void)state;
    check_hand_step(1, 0.37f);
    check_hand_step(3, 0.37f);
    /* A power-of-two scale is exact: scaled gradients give the same bits. */
    struct adamw_hparams h = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                              .weight_decay = 0.1f, .grad_scale = 0.25f, .t = 2};
    float wa[N3], ma[N3], va[N3], wb[N3], mb[N3], vb[N3], gb[N3];
    memcpy(wa, W3, sizeof wa);
    memcpy(ma, M3, sizeof ma);
    memcpy(va, V3, sizeof va);
    memcpy(wb, W3, sizeof wb);
    memcpy(mb, M3, sizeof mb);
    memcpy(vb, V3, sizeof vb);
    for (int i = 0; i < N3; i++) gb[i] = G3[i] * 0.25f;
    struct exec_ctx fc = {0};
    adamw_update(&h, N3, wa, ma, va, G3, DTYPE_FP32, &NO_WRITEBACK, &fc);
    h.grad_scale = 1.0f;
    adamw_update(&h, N3, wb, mb, vb, gb, DTYPE_FP32, &NO_WRITEBACK, &fc);
    assert_memory_equal(wa, wb, sizeof wa);
    assert_memory_equal(ma, mb, sizeof ma);
    assert_memory_equal(va, vb, sizeof va);
    /* and the scale really matters */
    float wc[N3], mc[N3], vc[N3];
    memcpy(wc, W3, sizeof wc);
    memcpy(mc, M3, sizeof mc);
    memcpy(vc, V3, sizeof vc);
    adamw_update(&h, N3, wc, mc, vc, G3, DTYPE_FP32, &NO_WRITEBACK, &fc);
    assert_true(mc[0] != ma[0]);
}

enum { NB = 257 };

static void fill_state(float *w, float *m, float *v, int n) {
    for (int i = 0; i < n; i++) {
        w[i] = 0.8f * sinf(0.37f * (float)i) + 0.01f * (float)(i % 7);
        m[i] = 0.05f * cosf(0.11f * (float)i);
        v[i] = 0.001f * (float)(1 + i % 5);
    }
}

static void test_adamw_bf16_grads_match_fp32(void **state) {
    (void)state;
    float g32[NB];
    bf16 g16[NB];
    for (int i = 0; i < NB; i++) {
        g16[i] = f32_to_bf16(1.7f * sinf(0.9f * (float)i) - 0.3f);
        g32[i] = bf16_to_f32(g16[i]); /* bf16-representable, so both paths see the same numbers */
    }
    float wa[NB], ma[NB], va[NB], wb[NB], mb[NB], vb[NB];
    fill_state(wa, ma, va, NB);
    fill_state(wb, mb, vb, NB);
    struct adamw_hparams h = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                              .weight_decay = 0.1f, .grad_scale = 0.8f, .t = 5};
    struct exec_ctx fc = {0};
    adamw_update(&h, NB, wa, ma, va, g32, DTYPE_FP32, &NO_WRITEBACK, &fc);
    adamw_update(&h, NB, wb, mb, vb, g16, DTYPE_BF16, &NO_WRITEBACK, &fc);
    assert_memory_equal(wa, wb, sizeof wa);
    assert_memory_equal(ma, mb, sizeof ma);
    assert_memory_equal(va, vb, sizeof va);
    float w0[NB], m0[NB], v0[NB];
    fill_state(w0, m0, v0, NB);
    int moved = 0;
    for (int i = 0; i < NB; i++) moved += wa[i] != w0[i];
    assert_true(moved > NB / 2);
}

static void test_adamw_bf16_writeback_nearest(void **state) {
    (void)state;
    float g[NB], wa[NB], ma[NB], va[NB], wb[NB], mb[NB], vb[NB];
    for (int i = 0; i < NB; i++) g[i] = 0.3f * cosf(1.3f * (float)i);
    fill_state(wa, ma, va, NB);
    fill_state(wb, mb, vb, NB);
    bf16 params[NB];
    memset(params, 0xff, sizeof params);
    struct adamw_hparams h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                              .weight_decay = 0.05f, .grad_scale = 1.0f, .t = 7};
    struct param_writeback out = {.params = params, .rounding = ROUND_NEAREST, .seed = 42};
    struct exec_ctx fc = {0};
    adamw_update(&h, NB, wa, ma, va, g, DTYPE_FP32, &out, &fc);
    adamw_update(&h, NB, wb, mb, vb, g, DTYPE_FP32, &NO_WRITEBACK, &fc);
    /* the fp32 master copy is the same as without writeback */
    assert_memory_equal(wa, wb, sizeof wa);
    assert_memory_equal(ma, mb, sizeof ma);
    int inexact = 0;
    for (int i = 0; i < NB; i++) {
        if (params[i] != f32_to_bf16(wa[i]))
            fail_msg("params[%d] = 0x%04x, want f32_to_bf16(%.9g) = 0x%04x", i, params[i], (double)wa[i],
                     f32_to_bf16(wa[i]));
        /* nearest: no bf16 value is closer than the one written */
        float p = bf16_to_f32(params[i]);
        uint16_t up = (uint16_t)(params[i] + 1), down = (uint16_t)(params[i] - 1);
        assert_true(fabsf(p - wa[i]) <= fabsf(bf16_to_f32(up) - wa[i]));
        assert_true(fabsf(p - wa[i]) <= fabsf(bf16_to_f32(down) - wa[i]));
        inexact += p != wa[i];
    }
    assert_true(inexact > NB / 2); /* the test exercised real rounding */
}

/* The two bf16 neighbours of f: truncation and one ulp away from zero. */
static void bf16_neighbours(float f, bf16 *lo, bf16 *hi) {
    uint32_t u = f32_bits(f);
    *lo = (bf16)(u >> 16);
    *hi = (u & 0xffffu) ? (bf16)((u >> 16) + 1) : *lo;
}

enum { NS = 4096 };

static void stochastic_run(uint64_t seed, size_t lo, size_t n, const float *g, float *w, float *m, float *v,
                           bf16 *params) {
    fill_state(w, m, v, NS);
    struct adamw_hparams h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                              .weight_decay = 0.05f, .grad_scale = 1.0f, .t = 3};
    struct param_writeback out = {.params = params + lo, .rounding = ROUND_STOCHASTIC, .seed = seed,
                                  .noise_index = 1000 + lo};
    struct exec_ctx fc = {0};
    adamw_update(&h, n, w + lo, m + lo, v + lo, g + lo, DTYPE_FP32, &out, &fc);
}

static void test_adamw_stochastic_writeback(void **state) {
    (void)state;
    static float g[NS], w[NS], m[NS], v[NS], w2[NS], m2[NS], v2[NS];
    static bf16 pa[NS], pb[NS], pc[NS], pd[NS];
    for (int i = 0; i < NS; i++) g[i] = 0.2f * sinf(0.7f * (float)i + 0.1f);
    stochastic_run(7, 0, NS, g, w, m, v, pa);
    int up = 0;
    for (int i = 0; i < NS; i++) {
        bf16 lo, hi;
        bf16_neighbours(w[i], &lo, &hi);
        if (pa[i] != lo && pa[i] != hi)
            fail_msg("params[%d] = 0x%04x is not a neighbour (0x%04x, 0x%04x) of %.9g", i, pa[i], lo, hi,
                     (double)w[i]);
        up += pa[i] != lo;
    }
    assert_true(up > NS / 10 && up < NS * 9 / 10); /* both neighbours occur */

    /* same (seed, index): same bits */
    stochastic_run(7, 0, NS, g, w2, m2, v2, pb);
    assert_memory_equal(pa, pb, sizeof pa);
    assert_memory_equal(w, w2, sizeof w);
    /* the noise comes from the global index: updating a shard of the range
     * with its own noise_index gives the same bits as the whole range */
    memset(pc, 0, sizeof pc);
    stochastic_run(7, 1234, NS - 1234, g, w2, m2, v2, pc);
    assert_memory_equal(pa + 1234, pc + 1234, (NS - 1234) * sizeof(bf16));
    /* another seed: other draws */
    stochastic_run(8, 0, NS, g, w2, m2, v2, pd);
    int differ = 0;
    for (int i = 0; i < NS; i++) differ += pa[i] != pd[i];
    assert_true(differ > NS / 20);
}

/* Many elements holding the same w' = w (g = m = v = 0, no decay): the mean
 * of the stochastically rounded values is w' within a few standard errors. */
static void test_adamw_stochastic_mean(void **state) {
    (void)state;
    enum { N = 1 << 17 };
    float *w = malloc(N * sizeof *w), *m = calloc(N, sizeof *m), *v = calloc(N, sizeof *v);
    float *g = calloc(N, sizeof *g);
    bf16 *p = malloc(N * sizeof *p);
    assert_true(w && m && v && g && p);
    const float target[] = {1.0f + 0.3f * 0x1p-7f, -0.7123456f, 3.0e-3f, 0x1.0101p0f};
    for (size_t k = 0; k < sizeof target / sizeof *target; k++) {
        const float x = target[k];
        for (int i = 0; i < N; i++) w[i] = x;
        struct adamw_hparams h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                  .weight_decay = 0.0f, .grad_scale = 1.0f, .t = 1};
        struct param_writeback out = {.params = p, .rounding = ROUND_STOCHASTIC, .seed = 99 + k, .noise_index = 0};
        struct exec_ctx fc = {0};
        adamw_update(&h, N, w, m, v, g, DTYPE_FP32, &out, &fc);
        bf16 lo, hi;
        bf16_neighbours(x, &lo, &hi);
        assert_true(lo != hi);
        const double a = bf16_to_f32(lo), b = bf16_to_f32(hi);
        const double q = (x - a) / (b - a); /* P(round to hi) for an unbiased rounding */
        double sum = 0.0;
        for (int i = 0; i < N; i++) {
            assert_true(w[i] == x); /* zero gradient, no decay: w unchanged */
            assert_true(p[i] == lo || p[i] == hi);
            sum += bf16_to_f32(p[i]);
        }
        const double mean = sum / N, se = fabs(b - a) * sqrt(q * (1.0 - q) / N);
        if (!(fabs(mean - x) < 5.0 * se))
            fail_msg("target %.9g: mean %.9g, |diff| %.3g >= 5 se (%.3g)", (double)x, mean, fabs(mean - x), 5 * se);
        /* and it is really random: far from always-nearest */
        const double nearest = bf16_to_f32(f32_to_bf16(x));
        assert_true(fabs(mean - nearest) > 20.0 * se);
    }
    free(w);
    free(m);
    free(v);
    free(g);
    free(p);
}

static void test_adamw_zero_grad_no_decay(void **state) {
    (void)state;
    float w[NB], w0[NB], m[NB] = {0}, v[NB] = {0}, g[NB] = {0}, dummy[NB];
    fill_state(w, dummy, dummy, NB);
    w[0] = 0.0f;
    w[1] = -0.0f;
    w[2] = 1e-30f;
    w[3] = -123456.789f;
    memcpy(w0, w, sizeof w);
    struct adamw_hparams h = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                              .weight_decay = 0.0f, .grad_scale = 1.0f, .t = 1};
    struct exec_ctx fc = {0};
    for (int t = 1; t <= 3; t++) {
        h.t = t;
        adamw_update(&h, NB, w, m, v, g, DTYPE_FP32, &NO_WRITEBACK, &fc);
    }
    assert_memory_equal(w, w0, sizeof w);
    for (int i = 0; i < NB; i++) assert_true(m[i] == 0.0f && v[i] == 0.0f);
    /* with decay and no gradient, w only shrinks by (1 - lr wd) */
    h.weight_decay = 0.5f;
    h.t = 4;
    adamw_update(&h, NB, w, m, v, g, DTYPE_FP32, &NO_WRITEBACK, &fc);
    const float decay = 1.0f - 0.1f * 0.5f;
    for (int i = 0; i < NB; i++) assert_true(w[i] == w0[i] * decay);
}

/* ---- LR schedule ---- */

static struct lr_options sched(float lr, int warmup, int steps, enum lr_schedule s, float min_frac) {
    return (struct lr_options){.lr = lr, .warmup_steps = warmup, .steps = steps, .schedule = s,
                               .min_lr_frac = min_frac};
}

static void test_lr_warmup(void **state) {
    (void)state;
    struct lr_options c = sched(1e-3f, 10, 100, LR_COSINE, 0.1f);
    assert_rel(lr_at(&c, 0), 1e-3 * 1 / 10, 1e-6, "lr warmup", 0);
    assert_rel(lr_at(&c, 1), 1e-3 * 2 / 10, 1e-6, "lr warmup", 1);
    assert_rel(lr_at(&c, 4), 1e-3 * 5 / 10, 1e-6, "lr warmup", 4);
    assert_rel(lr_at(&c, 9), 1e-3, 1e-6, "lr warmup", 9);
    for (int s = 1; s < 10; s++) assert_true(lr_at(&c, s) > lr_at(&c, s - 1));
    /* warmup is the same under the constant schedule */
    struct lr_options k = sched(1e-3f, 10, 100, LR_CONSTANT, 0.1f);
    for (int s = 0; s < 10; s++) assert_true(lr_at(&k, s) == lr_at(&c, s));
}

static void test_lr_cosine(void **state) {
    (void)state;
    const float lr = 6e-4f, frac = 0.1f;
    const int warmup = 10, steps = 100;
    struct lr_options c = sched(lr, warmup, steps, LR_COSINE, frac);
    assert_rel(lr_at(&c, warmup), lr, 1e-6, "first decay step", warmup);
    assert_rel(lr_at(&c, steps - 1), (double)lr * frac, 1e-6, "last step", steps - 1);
    for (int s = warmup + 1; s < steps; s++)
        if (!(lr_at(&c, s) <= lr_at(&c, s - 1))) fail_msg("lr rose at step %d", s);
    assert_true(lr_at(&c, warmup + 1) < lr);
    assert_true(lr_at(&c, steps - 2) > (double)lr * frac);
    /* the cosine itself, at a few steps: min + (lr - min)(1 + cos(pi p))/2,
     * p = (step - warmup) / (steps - warmup - 1) */
    const int probe[] = {20, 54, 77, 98};
    for (size_t i = 0; i < sizeof probe / sizeof *probe; i++) {
        double p = (double)(probe[i] - warmup) / (steps - warmup - 1), mn = (double)lr * frac;
        assert_rel(lr_at(&c, probe[i]), mn + 0.5 * (1 + cos(M_PI * p)) * (lr - mn), 1e-6, "cosine", probe[i]);
    }
    /* halfway through the decay (p = 0.5, an odd number of decay steps) */
    struct lr_options h = sched(1.0f, 0, 11, LR_COSINE, 0.2f);
    assert_rel(lr_at(&h, 5), 0.6, 1e-6, "halfway", 5);
    assert_rel(lr_at(&h, 0), 1.0, 1e-6, "no warmup", 0);
    assert_rel(lr_at(&h, 10), 0.2, 1e-6, "no warmup last", 10);
    /* past the end it stays at the floor */
    assert_rel(lr_at(&c, steps + 50), (double)lr * frac, 1e-6, "past end", steps + 50);
    /* min_lr_frac = 0 decays to zero */
    struct lr_options z = sched(1e-3f, 0, 50, LR_COSINE, 0.0f);
    assert_true(fabsf(lr_at(&z, 49)) < 1e-12f);
}

static void test_lr_constant(void **state) {
    (void)state;
    struct lr_options c = sched(2.5e-4f, 0, 100, LR_CONSTANT, 0.1f);
    for (int s = 0; s < 150; s++) assert_true(lr_at(&c, s) == 2.5e-4f);
    struct lr_options w = sched(2.5e-4f, 5, 100, LR_CONSTANT, 0.1f);
    for (int s = 5; s < 100; s++) assert_true(lr_at(&w, s) == 2.5e-4f);
    /* a one-step cosine run has nothing to decay over */
    struct lr_options one = sched(1e-3f, 0, 1, LR_COSINE, 0.1f);
    assert_true(lr_at(&one, 0) == 1e-3f);
}

/* ---- clipping ---- */

/* The norm's sum of squares is cut into parts by the length alone, so it
 * has the same bits on any number of threads (docs/THREADS.md): the team
 * that follows the load must not change the clip. */
static void test_buf_sum_squares_same_on_any_team(void **state) {
    (void)state;
    enum { LEN = 100003 };
    float *x = malloc(LEN * sizeof *x);
    assert_non_null(x);
    double ref = 0.0;
    for (int i = 0; i < LEN; i++) {
        x[i] = (float)((i * 7919 % 1009) - 504) / 97.0f;
        ref += (double)x[i] * x[i];
    }
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    double one = buf_sum_squares(MEM_HOST, x, DTYPE_FP32, LEN);
    assert_true(fabs(one - ref) <= 1e-12 * ref);
    for (int t = 2; t <= 4; t++) {
        omp_set_num_threads(t);
        double many = buf_sum_squares(MEM_HOST, x, DTYPE_FP32, LEN);
        assert_memory_equal(&many, &one, sizeof one);
    }
    omp_set_num_threads(saved);
    free(x);
}

static void test_buf_sum_squares(void **state) {
    (void)state;
    const float a[] = {3.0f, 4.0f};
    assert_true(buf_sum_squares(MEM_HOST, a, DTYPE_FP32, 2) == 25.0);
    const float b[] = {1.0f, -2.0f, 2.0f, 0.5f, 0.0f};
    assert_true(buf_sum_squares(MEM_HOST, b, DTYPE_FP32, 5) == 9.25);
    assert_true(buf_sum_squares(MEM_HOST, b, DTYPE_FP32, 0) == 0.0);
    assert_true(buf_sum_squares(MEM_HOST, b + 1, DTYPE_FP32, 2) == 8.0);
    const float c[] = {0.1f};
    assert_true(buf_sum_squares(MEM_HOST, c, DTYPE_FP32, 1) == (double)0.1f * (double)0.1f); /* accumulated in double */

    const bf16 hb[] = {0x3f80 /* 1 */, 0xc000 /* -2 */, 0x3fc0 /* 1.5 */, 0xbe80 /* -0.25 */};
    assert_true(buf_sum_squares(MEM_HOST, hb, DTYPE_BF16, 4) == 1.0 + 4.0 + 2.25 + 0.0625);
    bf16 hb2[5];
    for (int i = 0; i < 5; i++) hb2[i] = f32_to_bf16(b[i]);
    assert_true(buf_sum_squares(MEM_HOST, hb2, DTYPE_BF16, 5) == 9.25);

    enum { N = 10001 };
    float *big = malloc(N * sizeof *big);
    bf16 *big16 = malloc(N * sizeof *big16);
    assert_true(big && big16);
    for (int i = 0; i < N; i++) {
        big[i] = (i % 2) ? -0.5f : 0.5f;
        big16[i] = f32_to_bf16(big[i]);
    }
    assert_true(buf_sum_squares(MEM_HOST, big, DTYPE_FP32, N) == 0.25 * N);
    assert_true(buf_sum_squares(MEM_HOST, big16, DTYPE_BF16, N) == 0.25 * N);
    free(big);
    free(big16);
}

static void test_clip_scale(void **state) {
    (void)state;
    assert_true(clip_scale(5.0, 1.0f) == 0.2f);
    assert_true(clip_scale(0.5, 1.0f) == 1.0f);
    assert_true(clip_scale(1.0, 1.0f) == 1.0f);
    assert_true(clip_scale(0.0, 1.0f) == 1.0f);
    assert_true(clip_scale(5.0, 0.0f) == 1.0f);
    assert_true(clip_scale(1e30, 0.0f) == 1.0f);
    assert_true(clip_scale(4.0, 2.0f) == 0.5f);
    assert_rel(clip_scale(3.0, 1.0f), 1.0 / 3.0, 1e-7, "clip", 0);
    /* clipped norm = norm * scale = max_norm */
    const float g[] = {3.0f, 4.0f};
    double norm = sqrt(buf_sum_squares(MEM_HOST, g, DTYPE_FP32, 2));
    assert_rel(norm * clip_scale(norm, 1.0f), 1.0, 1e-7, "clipped norm", 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_hand_step_t1),
        cmocka_unit_test(test_adamw_hand_step_t3),
        cmocka_unit_test(test_adamw_grad_scale),
        cmocka_unit_test(test_adamw_bf16_grads_match_fp32),
        cmocka_unit_test(test_adamw_bf16_writeback_nearest),
        cmocka_unit_test(test_adamw_stochastic_writeback),
        cmocka_unit_test(test_adamw_stochastic_mean),
        cmocka_unit_test(test_adamw_zero_grad_no_decay),
        cmocka_unit_test(test_lr_warmup),
        cmocka_unit_test(test_lr_cosine),
        cmocka_unit_test(test_lr_constant),
        cmocka_unit_test(test_buf_sum_squares), cmocka_unit_test(test_buf_sum_squares_same_on_any_team),
        cmocka_unit_test(test_clip_scale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
