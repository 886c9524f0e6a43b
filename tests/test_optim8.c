/* 8-bit AdamW and SGD: the dynamic quantization maps against the values of
 * THEORY.md 2.2, the nearest-code search against brute force, the block-wise
 * quantization error, 3 steps of adamw8bit against a plain float version of
 * the same algorithm, one step from zero against fp32 AdamW, and SGD against
 * steps worked out by hand in double. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "optim.h"
#include "qmap_brute.h"
#include "rng.h"

static const struct param_writeback NO_WRITEBACK = {.params = NULL};

/* A kernel set's name, for the messages below. */
static const char *qmap_isa_name(enum qmap_isa isa) {
    static const char *const names[QMAP_NUM_ISAS] = {"scalar", "avx2", "avx512"};
    return isa >= 0 && isa < QMAP_NUM_ISAS ? names[isa] : "unknown";
}

/* uniform in [lo, hi) from a fixed counter, so every run sees the same data */
static float uni(uint64_t idx, float lo, float hi) { return lo + (hi - lo) * rng_uniform(7, 99, idx); }

/* log-uniform magnitude in [1e-9, 1) with a random sign: reaches every decade */
static float spread(uint64_t idx) {
    float mag = powf(10.0f, uni(2 * idx, -9.0f, 0.0f));
    return uni(2 * idx + 1, 0.0f, 1.0f) < 0.5f ? -mag : mag;
}

/* |got - want| <= tol * max(|want|, 1): for O(1) weights that end near 0
 * after cancellation, where a relative test would measure the cancellation. */
static void assert_close(double got, double want, double tol, const char *what, int i) {
    double err = fabs(got - want), scale = fmax(fabs(want), 1.0);
    if (!(err <= tol * scale)) fail_msg("%s[%d]: got %.12g, want %.12g (err %.3g)", what, i, got, want, err);
}

static void assert_rel(double got, double want, double tol, const char *what, int i) {
    double err = fabs(got - want), scale = fabs(want);
    if (!(err <= tol * (scale > 0 ? scale : 1.0)))
        fail_msg("%s[%d]: got %.12g, want %.12g (rel err %.3g > %.3g)", what, i, got, want,
                 scale > 0 ? err / scale : err, tol);
}

/* ---- maps ---- */

static void test_map_values(void **state) {
    (void)state;
    float s[QMAP_SIZE], u[QMAP_SIZE];
    qmap_dynamic(s, true);
    qmap_dynamic(u, false);
    assert_rel(s[0], -0.99296875, 1e-7, "signed", 0);
    assert_true(s[127] == 0.0f);
    assert_rel(s[128], 5.5e-7, 1e-7, "signed", 128);
    assert_rel(s[126], -5.5e-7, 1e-7, "signed", 126);
    assert_rel(s[254], 0.99296875, 1e-7, "signed", 254);
    assert_true(s[255] == 1.0f);
    assert_true(u[0] == 0.0f);
    assert_rel(u[1], 3.25e-7, 1e-7, "unsigned", 1);
    assert_rel(u[254], 0.996484375, 1e-7, "unsigned", 254);
    assert_true(u[255] == 1.0f);
    for (int i = 1; i < QMAP_SIZE; i++) {
        if (!(s[i - 1] < s[i])) fail_msg("signed map not strictly ascending at %d", i);
        if (!(u[i - 1] < u[i])) fail_msg("unsigned map not strictly ascending at %d", i);
    }
    /* the signed map is symmetric apart from 1.0 (-1 is not a code) */
    for (int i = 0; i < 127; i++) assert_true(s[i] == -s[254 - i]);
}

/* ---- nearest code ---- */

static void test_nearest_exact_codes(void **state) {
    (void)state;
    float maps[2][QMAP_SIZE];
    qmap_dynamic(maps[0], true);
    qmap_dynamic(maps[1], false);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < QMAP_SIZE; i++) assert_int_equal(qmap_nearest(maps[k], maps[k][i]), i);
}

/* An exact tie at the float midpoint goes to the even index (bitsandbytes'
 * tree search always ends at an even leaf and keeps it on a tie). */
static void test_nearest_ties_to_even(void **state) {
    (void)state;
    float maps[2][QMAP_SIZE];
    qmap_dynamic(maps[0], true);
    qmap_dynamic(maps[1], false);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i + 1 < QMAP_SIZE; i++) {
            float mid = (maps[k][i] + maps[k][i + 1]) * 0.5f;
            assert_int_equal(qmap_nearest(maps[k], mid), i % 2 == 0 ? i : i + 1);
            assert_int_equal(qmap_nearest(maps[k], nextafterf(mid, -2.0f)), i);
            assert_int_equal(qmap_nearest(maps[k], nextafterf(mid, 2.0f)), i + 1);
        }
}

/* No entry is nearer than the one returned. The search rounds at the float
 * midpoint fl((a+b)/2), which can sit half an ulp of x off the true one, so
 * the comparison (in double) allows one float ulp of x. */
static void check_nearest_bruteforce(const float *map, float x) {
    int r = qmap_nearest(map, x);
    double dr = fabs((double)map[r] - x), slack = (double)nextafterf(fabsf(x), 2.0f) - fabsf(x);
    for (int j = 0; j < QMAP_SIZE; j++)
        if (fabs((double)map[j] - x) + slack < dr)
            fail_msg("x=%.9g: got code %d (%.9g), code %d (%.9g) is nearer", x, r, map[r], j, map[j]);
}

static void test_nearest_bruteforce(void **state) {
    (void)state;
    float s[QMAP_SIZE], u[QMAP_SIZE];
    qmap_dynamic(s, true);
    qmap_dynamic(u, false);
    for (uint64_t i = 0; i < 20000; i++) {
        float x = uni(1000000 + i, -1.0f, 1.0f), y = spread(2000000 + i);
        check_nearest_bruteforce(s, x);
        check_nearest_bruteforce(s, y);
        check_nearest_bruteforce(u, fabsf(x));
        check_nearest_bruteforce(u, fabsf(y));
    }
    /* outside the map: the end codes */
    assert_int_equal(qmap_nearest(s, -1.0f), 0);
    assert_int_equal(qmap_nearest(s, 2.0f), 255);
    assert_int_equal(qmap_nearest(u, -0.5f), 0);
}

/* ---- quantization error, through the kernel ---- */

/* The largest error nearest-rounding y may make on the map, times absmax: half
 * the gap of the bracket around y, the full gap where the sign fix moves a
 * tiny negative m off 0, and the distance to map[0] below the map. */
static double error_bound(const float *map, bool is_m, double y, double absmax) {
    if (y <= map[0]) return (map[0] - y) * absmax;
    int k = 0;
    while (k + 1 < QMAP_SIZE - 1 && map[k + 1] < y) k++;
    double gap = (double)map[k + 1] - map[k];
    double b = (is_m && y < 0 && map[k + 1] == 0.0f) ? gap : gap / 2;
    return b * absmax * (1 + 1e-6) + 1e-30;
}

/* With beta1 = beta2 = 0 and lr = 0 the kernel's new state is exactly m = g,
 * v = g*g, quantized: a direct view of its block-wise quantizer. */
static void test_quantization_error(void **state) {
    (void)state;
    enum { NB = 12, N = NB * ADAMW8BIT_BLOCK - 100 };
    float s[QMAP_SIZE], u[QMAP_SIZE];
    qmap_dynamic(s, true);
    qmap_dynamic(u, false);
    static float w[N], g[N], a1[NB], a2[NB];
    static uint8_t q1[N], q2[N];
    for (int i = 0; i < N; i++) {
        int b = i / ADAMW8BIT_BLOCK;
        /* each block its own scale; odd blocks log-spread, even uniform */
        float scale = powf(10.0f, (float)(b % 6) - 3.0f);
        g[i] = scale * (b % 2 ? spread(3000000 + i) : uni(4000000 + i, -1.0f, 1.0f));
        w[i] = 1.0f;
    }
    g[5] = -4.0f;                      /* block 0: the absmax element is negative */
    g[ADAMW8BIT_BLOCK + 9] = 40.0f;    /* block 1: positive */
    struct adamw_hparams h = {.lr = 0.0f, .beta1 = 0.0f, .beta2 = 0.0f, .eps = 1.0f, .grad_scale = 1.0f, .t = 1};
    struct exec_ctx fc = {0};
    adamw8bit_update(&h, N, w, q1, q2, a1, a2, s, u, NULL, NULL, g, DTYPE_FP32, &NO_WRITEBACK, &fc);
    for (int b = 0; b < NB; b++) {
        int lo = b * ADAMW8BIT_BLOCK, hi = lo + ADAMW8BIT_BLOCK < N ? lo + ADAMW8BIT_BLOCK : N;
        float max1 = 0, max2 = 0;
        for (int i = lo; i < hi; i++) {
            max1 = fmaxf(max1, fabsf(g[i]));
            max2 = fmaxf(max2, g[i] * g[i]);
        }
        assert_true(a1[b] == max1);
        assert_true(a2[b] == max2);
        for (int i = lo; i < hi; i++) {
            double m = (double)s[q1[i]] * a1[b], v = (double)u[q2[i]] * a2[b];
            double vv = (double)(g[i] * g[i]);
            if (!(fabs(m - g[i]) <= error_bound(s, true, (double)g[i] / a1[b], a1[b])))
                fail_msg("m[%d]: %.9g dequantizes to %.9g", i, g[i], m);
            if (!(fabs(v - vv) <= error_bound(u, false, vv / a2[b], a2[b])))
                fail_msg("v[%d]: %.9g dequantizes to %.9g", i, vv, v);
            if (g[i] == max1) assert_true((float)m == max1); /* y = 1 is code 255, exactly */
            if (vv == max2) assert_true((float)v == max2);
            assert_true(w[i] == 1.0f);
        }
    }
    assert_int_equal(q1[5], 0); /* -1 rounds to -0.99296875 */
    assert_int_equal(q1[ADAMW8BIT_BLOCK + 9], 255);
    assert_true(fc.other > 0);
}

/* ---- the update against a plain float version of the same algorithm ---- */


/* One step, plainly: per block dequantize, update m, v in float (same
 * expressions as adamw.c), new absmax, decay then the bias-corrected step,
 * re-quantize with the sign fix for m. */
static void reference_step(const struct adamw_hparams *h, int n, float *w, uint8_t *q1, uint8_t *q2, float *a1,
                           float *a2, const float *s, const float *u, const float *g_raw) {
    const float b1 = h->beta1, b2 = h->beta2;
    const float step_size = h->lr / (1.0f - powf(b1, (float)h->t));
    const float isb = 1.0f / sqrtf(1.0f - powf(b2, (float)h->t));
    const float decay = 1.0f - h->lr * h->weight_decay;
    for (int lo = 0, b = 0; lo < n; lo += ADAMW8BIT_BLOCK, b++) {
        int len = n - lo < ADAMW8BIT_BLOCK ? n - lo : ADAMW8BIT_BLOCK;
        float m[ADAMW8BIT_BLOCK], v[ADAMW8BIT_BLOCK], max1 = 0, max2 = 0;
        for (int i = 0; i < len; i++) {
            float g = g_raw[lo + i] * h->grad_scale;
            m[i] = s[q1[lo + i]] * a1[b];
            v[i] = u[q2[lo + i]] * a2[b];
            if (!isfinite(g)) {
                m[i] = v[i] = 0.0f; /* weight untouched */
            } else {
                v[i] = b2 * v[i] + (1.0f - b2) * g * g;
                m[i] = b1 * m[i] + (1.0f - b1) * g;
                w[lo + i] = w[lo + i] * decay - step_size * m[i] / (sqrtf(v[i]) * isb + h->eps);
            }
            max1 = fmaxf(max1, fabsf(m[i]));
            max2 = fmaxf(max2, v[i]);
        }
        a1[b] = max1;
        a2[b] = max2;
        for (int i = 0; i < len; i++) {
            uint8_t c1 = max1 > 0 ? nearest_brute(s, m[i] / max1) : 127;
            if (max1 > 0 && (s[c1] < 0) != (signbit(m[i]) != 0)) c1 = m[i] > 0 ? c1 + 1 : c1 - 1;
            q1[lo + i] = c1;
            q2[lo + i] = max2 > 0 ? nearest_brute(u, v[i] / max2) : 0;
        }
    }
}

static void run_vs_reference(enum dtype grad_dtype) {
    enum { N = 1000, NB = 4 };
    assert_int_equal(adamw8bit_blocks(N), NB);
    float s[QMAP_SIZE], u[QMAP_SIZE];
    qmap_dynamic(s, true);
    qmap_dynamic(u, false);
    float w[N], rw[N], g[N], ra1[NB] = {0}, ra2[NB] = {0}, a1[NB] = {0}, a2[NB] = {0};
    uint8_t q1[N] = {0}, q2[N] = {0}, rq1[N] = {0}, rq2[N] = {0};
    bf16 g16[N], p[N];
    for (int i = 0; i < N; i++) w[i] = rw[i] = uni(5000000 + i, -0.5f, 0.5f);
    const struct param_writeback out = {.params = p, .rounding = ROUND_STOCHASTIC, .seed = 11, .noise_index = 777};
    for (int t = 1; t <= 3; t++) {
        for (int i = 0; i < N; i++) {
            g[i] = (i % 3 ? uni(6000000 + 10000 * t + i, -1.0f, 1.0f) : spread(7000000 + 10000 * t + i));
            if (grad_dtype == DTYPE_BF16) g16[i] = f32_to_bf16(g[i]), g[i] = bf16_to_f32(g16[i]);
        }
        if (t == 2) g[17] = NAN, g[600] = -INFINITY, g16[17] = f32_to_bf16(NAN), g16[600] = f32_to_bf16(-INFINITY);
        struct adamw_hparams h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                  .weight_decay = 0.1f, .grad_scale = 0.5f, .t = t};
        struct exec_ctx fc = {0};
        adamw8bit_update(&h, N, w, q1, q2, a1, a2, s, u, NULL, NULL, grad_dtype == DTYPE_FP32 ? (void *)g : (void *)g16,
                         grad_dtype, &out, &fc);
        reference_step(&h, N, rw, rq1, rq2, ra1, ra2, s, u, g);
        for (int b = 0; b < NB; b++) {
            if (a1[b] != ra1[b] || a2[b] != ra2[b])
                fail_msg("step %d block %d: absmax %.9g %.9g, want %.9g %.9g", t, b, a1[b], a2[b], ra1[b], ra2[b]);
        }
        for (int i = 0; i < N; i++) {
            if (q1[i] != rq1[i] || q2[i] != rq2[i])
                fail_msg("step %d element %d: codes %d %d, want %d %d", t, i, q1[i], q2[i], rq1[i], rq2[i]);
            assert_rel(w[i], rw[i], 1e-6, "w", i);
            assert_int_equal(p[i], f32_to_bf16_stochastic(w[i], rng_u32(11, RNG_STREAM_ROUNDING, 777 + (uint64_t)i)));
        }
        assert_true(fc.other > 0);
    }
}

static void test_vs_reference_fp32(void **state) {
    (void)state;
    run_vs_reference(DTYPE_FP32);
}

static void test_vs_reference_bf16(void **state) {
    (void)state;
    run_vs_reference(DTYPE_BF16);
}

/* A NaN or Inf gradient: that element's m and v become 0 and its weight is
 * not touched (no step, no decay); the rest of the block updates. */
static void test_nonfinite_grad(void **state) {
    (void)state;
    enum { N = 300 };
    float s[QMAP_SIZE], u[QMAP_SIZE], w[N], g[N], a1[2] = {0}, a2[2] = {0};
    uint8_t q1[N] = {0}, q2[N] = {0};
    qmap_dynamic(s, true);
    qmap_dynamic(u, false);
    for (int i = 0; i < N; i++) w[i] = 1.0f, g[i] = 0.25f;
    g[3] = NAN;
    g[260] = INFINITY;
    struct adamw_hparams h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                              .weight_decay = 0.1f, .grad_scale = 1.0f, .t = 1};
    struct exec_ctx fc = {0};
    adamw8bit_update(&h, N, w, q1, q2, a1, a2, s, u, NULL, NULL, g, DTYPE_FP32, &NO_WRITEBACK, &fc);
    assert_true(w[3] == 1.0f && w[260] == 1.0f);
    assert_true(w[4] < 1.0f && w[259] < 1.0f);
    assert_true(s[q1[3]] == 0.0f && u[q2[3]] == 0.0f && s[q1[260]] == 0.0f && u[q2[260]] == 0.0f);
    assert_true(isfinite(a1[0]) && isfinite(a2[0]) && a1[0] > 0);
}

/* From codes 0 and absmax 0 the dequantized state is exactly 0 (and a block
 * whose new state is all zero stores the zero code, not 0/0). */
static void test_zero_state(void **state) {
    (void)state;
    enum { N = 260 };
    float s[QMAP_SIZE], u[QMAP_SIZE], w[N], g[N] = {0}, a1[2] = {0}, a2[2] = {0};
    uint8_t q1[N] = {0}, q2[N] = {0};
    qmap_dynamic(s, true);
    qmap_dynamic(u, false);
    for (int i = 0; i < N; i++) w[i] = 2.0f;
    g[259] = 1.0f; /* block 1 gets a state, block 0 stays zero */
    struct adamw_hparams h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                              .weight_decay = 0.0f, .grad_scale = 1.0f, .t = 1};
    struct exec_ctx fc = {0};
    adamw8bit_update(&h, N, w, q1, q2, a1, a2, s, u, NULL, NULL, g, DTYPE_FP32, &NO_WRITEBACK, &fc);
    assert_true(a1[0] == 0.0f && a2[0] == 0.0f);
    for (int i = 0; i < 256; i++) {
        assert_true(w[i] == 2.0f);
        assert_int_equal(q1[i], 127);
        assert_int_equal(q2[i], 0);
    }
    assert_true(a1[1] > 0 && a2[1] > 0 && !isnan(w[259]) && w[259] < 2.0f);
}

/* ---- against fp32 AdamW ---- */

/* Step 1 from a zero state: the dequantized moments are exactly 0 and the
 * parameter step uses the fp32 moments of this step (quantization happens
 * after it), with the same float expressions as adamw.c, so the weights agree
 * bit for bit. Step 2 then sees the quantized m, v; measured below. */
static void test_vs_fp32_adamw(void **state) {
    (void)state;
    enum { N = 4096 };
    float s[QMAP_SIZE], u[QMAP_SIZE];
    qmap_dynamic(s, true);
    qmap_dynamic(u, false);
    static float w8[N], w32[N], m[N], v[N], g[N], a1[N / ADAMW8BIT_BLOCK], a2[N / ADAMW8BIT_BLOCK];
    static uint8_t q1[N], q2[N];
    for (int i = 0; i < N; i++) w8[i] = w32[i] = uni(8000000 + i, -1.0f, 1.0f);
    struct exec_ctx fc = {0};
    const float lr = 1e-3f;
    double max_diff[3] = {0}, mean_diff = 0;
    for (int t = 1; t <= 2; t++) {
        for (int i = 0; i < N; i++) g[i] = uni(9000000 + 10000 * t + i, -1.0f, 1.0f);
        struct adamw_hparams h = {.lr = lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                  .weight_decay = 0.1f, .grad_scale = 1.0f, .t = t};
        adamw8bit_update(&h, N, w8, q1, q2, a1, a2, s, u, NULL, NULL, g, DTYPE_FP32, &NO_WRITEBACK, &fc);
        adamw_update(&h, N, w32, m, v, g, DTYPE_FP32, &NO_WRITEBACK, &fc);
        for (int i = 0; i < N; i++) max_diff[t] = fmax(max_diff[t], fabs((double)w8[i] - w32[i]));
    }
    for (int i = 0; i < N; i++) mean_diff += fabs((double)w8[i] - w32[i]) / N;
    print_message("adamw8bit vs adamw: max |dw| step 1 = %.3g; step 2 max %.3g, mean %.3g (lr %.0e)\n", max_diff[1],
                  max_diff[2], mean_diff, (double)lr);
    assert_true(max_diff[1] == 0.0);
    /* Step 2 moves each weight by about lr (|m_hat/sqrt(v_hat)| ~ 1 here).
     * Quantizing m changes that move by the relative error of m's code: the
     * smallest |g| of a 256-block of U(-1,1) is ~1/256, so |m|/absmax ~ 4e-3
     * sits in the 1e-3..1e-2 decade (16 codes, half gap 2.8e-4), about 7% of
     * m. Measured: 6.4e-5 = 0.064 lr at most, 0.0036 lr on average. lr/10
     * holds that with margin and fails on any real divergence. */
    assert_true(max_diff[2] > 0.0 && max_diff[2] < lr / 10);
}

/* ---- SGD ---- */

static void test_sgd_hand_steps(void **state) {
    (void)state;
    enum { N = 3, T = 3 };
    const float w0[N] = {1.0f, -0.5f, 0.25f};
    const float gs[T][N] = {{0.5f, -1.25f, 2.0f}, {-0.3f, 0.7f, 0.1f}, {1.5f, 0.2f, -0.9f}};
    for (int nesterov = 0; nesterov <= 1; nesterov++) {
        float w[N], buf[N] = {NAN, NAN, NAN}; /* first_step must ignore it */
        double rw[N], rbuf[N];
        memcpy(w, w0, sizeof w);
        for (int i = 0; i < N; i++) rw[i] = w0[i];
        /* the float hyperparameters as the kernel sees them */
        const double lr = 0.1f, mom = 0.9f, wd = 0.01f, scale = 0.5f;
        for (int t = 0; t < T; t++) {
            struct sgd_hparams h = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .grad_scale = 0.5f,
                                    .nesterov = nesterov, .first_step = t == 0};
            struct exec_ctx fc = {0};
            sgd_update(&h, N, w, buf, gs[t], DTYPE_FP32, &NO_WRITEBACK, &fc);
            assert_true(fc.other > 0);
            for (int i = 0; i < N; i++) {
                double g = gs[t][i] * scale + wd * rw[i];
                rbuf[i] = t == 0 ? g : mom * rbuf[i] + g;
                rw[i] -= lr * (nesterov ? g + mom * rbuf[i] : rbuf[i]);
                assert_close(buf[i], rbuf[i], 1e-6, "buf", i);
                assert_close(w[i], rw[i], 1e-6, "w", i);
            }
        }
    }
    /* one value checked by hand: element 0, first step, no nesterov:
     * g = 0.5*0.5 + 0.01*1 = 0.26, buf = 0.26, w = 1 - 0.1*0.26 = 0.974 */
    float w[1] = {1.0f}, buf[1] = {123.0f};
    struct sgd_hparams h = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .grad_scale = 0.5f,
                            .first_step = true};
    struct exec_ctx fc = {0};
    sgd_update(&h, 1, w, buf, gs[0], DTYPE_FP32, &NO_WRITEBACK, &fc);
    assert_rel(buf[0], 0.26, 1e-6, "buf", 0);
    assert_rel(w[0], 0.974, 1e-6, "w", 0);
}

/* bf16 gradients and bf16 writeback (nearest) go through the same element. */
static void test_sgd_bf16(void **state) {
    (void)state;
    enum { N = 100 };
    float w[N], w2[N], buf[N], buf2[N], g[N];
    bf16 g16[N], p[N];
    for (int i = 0; i < N; i++) {
        g16[i] = f32_to_bf16(uni(10000000 + i, -1.0f, 1.0f));
        g[i] = bf16_to_f32(g16[i]);
        w[i] = w2[i] = uni(11000000 + i, -1.0f, 1.0f);
    }
    struct sgd_hparams h = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.0f, .grad_scale = 1.0f,
                            .nesterov = true, .first_step = true};
    const struct param_writeback out = {.params = p, .rounding = ROUND_NEAREST};
    struct exec_ctx fc = {0};
    sgd_update(&h, N, w, buf, g16, DTYPE_BF16, &out, &fc);
    sgd_update(&h, N, w2, buf2, g, DTYPE_FP32, &NO_WRITEBACK, &fc);
    for (int i = 0; i < N; i++) {
        assert_true(w[i] == w2[i] && buf[i] == buf2[i]);
        assert_int_equal(p[i], f32_to_bf16(w[i]));
    }
}

/* The search index gives qmap_nearest's answer for every code, every
 * midpoint and its neighbours, and dense random inputs (both maps). */
static void test_index_matches_search(void **state) {
    (void)state;
    static float maps[2][QMAP_SIZE];
    static struct qmap_index ix[2];
    qmap_dynamic(maps[0], true);
    qmap_dynamic(maps[1], false);
    for (int k = 0; k < 2; k++) {
        qmap_index_build(&ix[k], maps[k]);
        for (int i = 0; i + 1 < QMAP_SIZE; i++) {
            float mid = (maps[k][i] + maps[k][i + 1]) * 0.5f;
            float xs[] = {maps[k][i], mid, nextafterf(mid, -2.0f), nextafterf(mid, 2.0f)};
            for (int j = 0; j < 4; j++)
                assert_int_equal(qmap_nearest_indexed(maps[k], &ix[k], xs[j]), qmap_nearest(maps[k], xs[j]));
        }
        uint64_t r = 12345;
        for (int i = 0; i < 200000; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            float x = (float)((double)(r >> 11) / 9007199254740992.0 * 2.2 - 1.1);
            if (i % 2) x *= powf(10.0f, -(float)(i % 8)); /* every decade of the map */
            assert_int_equal(qmap_nearest_indexed(maps[k], &ix[k], x), qmap_nearest(maps[k], x));
        }
    }
}

/* ---- the vector kernels against the scalar definition ---- */

/* Inputs that probe every decision of the search: every code, every
 * midpoint and its float neighbours, +-0, NaNs of both signs, +-Inf, values
 * beyond the map's ends, denormals, and log-spread random values; n is no
 * multiple of any vector width, so the tails run too. */
static size_t codec_inputs(const float *map, float scale, float *x, size_t cap) {
    size_t n = 0;
    for (int i = 0; i < QMAP_SIZE; i++) {
        float mid = i + 1 < QMAP_SIZE ? (map[i] + map[i + 1]) * 0.5f : map[i];
        float c[] = {map[i], mid, nextafterf(mid, -2.0f), nextafterf(mid, 2.0f), -map[i], -mid};
        for (size_t j = 0; j < sizeof c / sizeof c[0]; j++) x[n++] = c[j] * scale;
    }
    const float edge[] = {0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY, 1.5f, -1.5f, 1e30f, -1e30f,
                          1e-40f, -1e-40f, 1.4e-45f, -1.4e-45f, 1.1754942e-38f, -1.1754942e-38f, 1.0f, -1.0f};
    for (size_t j = 0; j < sizeof edge / sizeof edge[0]; j++) x[n++] = edge[j];
    for (uint64_t i = 0; n < cap - 1; i++) x[n++] = spread(5000000 + i) * scale * (i % 3 ? 1.0f : 1.7f);
    return n; /* cap - 1: an odd count */
}

/* The checkpoints' codec (adamw8bit_quantize / _dequantize) against its
 * definition: absmax = the largest |x| of each 256-block, NaN skipped; codes
 * qmap_nearest(x / absmax), of 0 for an all-zero block (-0 included), no sign
 * fix; the same codes with and without the search index; values map * absmax. */
static void test_state_codec(void **state) {
    (void)state;
    enum { N = 700 }; /* blocks of 256, 256, 188 */
    float map[QMAP_SIZE], x[N], out[N], absmax[3], absmax2[3];
    uint8_t q[N], q2[N];
    qmap_dynamic(map, true);
    struct qmap_index *ix = malloc(sizeof *ix);
    assert_non_null(ix);
    qmap_index_build(ix, map);
    for (int i = 0; i < N; i++) x[i] = spread(5000 + (uint64_t)i);
    for (int i = 256; i < 512; i++) x[i] = i % 2 ? -0.0f : 0.0f;
    x[600] = NAN;
    adamw8bit_quantize(MEM_HOST, map, ix, x, N, q, absmax);
    adamw8bit_quantize(MEM_HOST, map, NULL, x, N, q2, absmax2);
    assert_memory_equal(q, q2, N);
    assert_memory_equal(absmax, absmax2, sizeof absmax);
    for (int b = 0; b < 3; b++) {
        float mx = 0.0f;
        for (int i = 256 * b; i < N && i < 256 * (b + 1); i++)
            if (!isnan(x[i])) mx = fmaxf(mx, fabsf(x[i]));
        assert_true(f32_bits(absmax[b]) == f32_bits(mx));
    }
    assert_true(absmax[0] > 0.1f && absmax[1] == 0.0f && !signbit(absmax[1]) && absmax[2] > 0.1f);
    for (int i = 0; i < N; i++) {
        float a = absmax[i / 256];
        uint8_t want = a > 0.0f ? qmap_nearest(map, x[i] / a) : qmap_nearest(map, 0.0f);
        if (q[i] != want) fail_msg("code %d: %u, want %u", i, q[i], want);
    }
    assert_int_equal(q[600], 0); /* NaN */
    adamw8bit_dequantize(MEM_HOST, map, q, absmax, N, out);
    for (int i = 0; i < N; i++) assert_true(f32_bits(out[i]) == f32_bits(map[q[i]] * absmax[i / 256]));
    assert_true(fabsf(out[3] - x[3]) <= 0.1f * absmax[0]); /* a value comes back near where it was */
    free(ix);
}

static void test_codec_isas_match_scalar(void **state) {
    (void)state;
    enum { CAP = 4099 };
    static float maps[2][QMAP_SIZE], x[CAP], got_f[CAP], want_f[CAP];
    static struct qmap_index ix[2];
    static uint8_t got[CAP], want[CAP], codes[CAP];
    const float absmax[] = {1.0f, 2.0f, 0.37f, 3e-30f, 7e20f};
    int tested = 0;
    for (int k = 0; k < 2; k++) {
        qmap_dynamic(maps[k], k == 0);
        qmap_index_build(&ix[k], maps[k]);
        /* on these maps the vector kernels apply: the index picks the best */
        assert_int_equal(ix[k].isa, qmap_isa_best());
        assert_int_equal(ix[k].n_negative, k == 0 ? 127 : 0);
    }
    for (int isa = QMAP_ISA_SCALAR + 1; isa < QMAP_NUM_ISAS; isa++) {
        if (!qmap_isa_available((enum qmap_isa)isa)) continue;
        tested++;
        for (int k = 0; k < 2; k++)
            for (size_t a = 0; a < sizeof absmax / sizeof absmax[0]; a++) {
                size_t n = codec_inputs(maps[k], absmax[a], x, CAP);
                for (int fix = 0; fix < 2; fix++)
                    for (size_t len = n; len + 64 > n; len -= 13) { /* tails of every length class */
                        qmap_quantize(maps[k], &ix[k], QMAP_ISA_SCALAR, absmax[a], x, len, fix, want);
                        qmap_quantize(maps[k], &ix[k], (enum qmap_isa)isa, absmax[a], x, len, fix, got);
                        for (size_t i = 0; i < len; i++)
                            if (got[i] != want[i])
                                fail_msg("%s quantize (map %d, absmax %g, sign fix %d): x[%zu] = %.9g gives %d, "
                                         "scalar %d", qmap_isa_name((enum qmap_isa)isa), k, absmax[a], fix, i, x[i],
                                         got[i], want[i]);
                    }
                for (size_t i = 0; i < n; i++) codes[i] = (uint8_t)(i < QMAP_SIZE ? i : rng_u32(3, 4, i));
                for (size_t len = n; len + 64 > n; len -= 13) {
                    qmap_dequantize(maps[k], &ix[k], QMAP_ISA_SCALAR, absmax[a], codes, len, want_f);
                    memset(got_f, 0xff, sizeof got_f);
                    qmap_dequantize(maps[k], &ix[k], (enum qmap_isa)isa, absmax[a], codes, len, got_f);
                    if (memcmp(got_f, want_f, len * sizeof *got_f) != 0)
                        fail_msg("%s dequantize (map %d, absmax %g, %zu codes) differs from scalar",
                                 qmap_isa_name((enum qmap_isa)isa), k, absmax[a], len);
                    assert_true(f32_bits(got_f[len]) == 0xffffffffu); /* nothing written past the end */
                }
            }
    }
    print_message("vector kernels compared with scalar: %d (best here: %s)\n", tested, qmap_isa_name(qmap_isa_best()));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_matches_search),
        cmocka_unit_test(test_codec_isas_match_scalar),
        cmocka_unit_test(test_state_codec),
        cmocka_unit_test(test_map_values),
        cmocka_unit_test(test_nearest_exact_codes),
        cmocka_unit_test(test_nearest_ties_to_even),
        cmocka_unit_test(test_nearest_bruteforce),
        cmocka_unit_test(test_quantization_error),
        cmocka_unit_test(test_vs_reference_fp32),
        cmocka_unit_test(test_vs_reference_bf16),
        cmocka_unit_test(test_nonfinite_grad),
        cmocka_unit_test(test_zero_state),
        cmocka_unit_test(test_vs_fp32_adamw),
        cmocka_unit_test(test_sgd_hand_steps),
        cmocka_unit_test(test_sgd_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
