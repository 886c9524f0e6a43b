/* The update rules added beside AdamW, 8-bit AdamW and SGD: Lion and
 * Adafactor against plain versions in double, lion8bit and sgd8bit against a plain float
 * version of the same block-wise algorithm (codes, block maxima and weights
 * bit for bit), each 8-bit rule near its 32-bit twin, the one-state codec's
 * round trip, the rule table's bytes, and the config's refusals: an unknown
 * optimizer lists the choices, a key of another rule names both. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../train/config/config.h"
#include "grid.h"
#include "optim.h"
#include "qmap_brute.h"
#include "rng.h"

enum { N = 1000, NB = 4, STEPS = 4 };

static float uni(uint64_t idx, float lo, float hi) { return lo + (hi - lo) * rng_uniform(13, 5, idx); }

static float grad_at(int t, int i) {
    /* every third element a small one, so blocks mix magnitudes */
    return i % 3 ? uni(100000 * (uint64_t)t + (uint64_t)i, -1.0f, 1.0f)
                 : 1e-4f * uni(100000 * (uint64_t)t + (uint64_t)i + 50000, -1.0f, 1.0f);
}


/* ---- Lion in double: Chen et al. 2023, Program 1 */
static void test_lion_vs_double(void **state) {
    (void)state;
    float w[N], m[N] = {0}, g[N];
    double rw[N], rm[N] = {0};
    for (int i = 0; i < N; i++) w[i] = uni(9000000 + (uint64_t)i, -0.5f, 0.5f), rw[i] = w[i];
    const struct lion_hparams h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.99f, .weight_decay = 0.1f,
                                   .grad_scale = 0.5f};
    for (int t = 1; t <= STEPS; t++) {
        for (int i = 0; i < N; i++) g[i] = grad_at(t, i);
        struct exec_ctx fc = {0};
        lion_update(&h, N, w, m, g, DTYPE_FP32, &(struct param_writeback){.params = NULL}, &fc);
        assert_true(fc.other == 11.0 * N);
        /* the float hyperparameters' values, in double */
        const double lr = h.lr, b1 = h.beta1, b2 = h.beta2, wd = h.weight_decay;
        for (int i = 0; i < N; i++) {
            double gi = (double)g[i] * h.grad_scale, c = b1 * rm[i] + (1 - b1) * gi;
            rw[i] = rw[i] * (1.0 - lr * wd) - lr * (c > 0 ? 1.0 : c < 0 ? -1.0 : 0.0);
            rm[i] = b2 * rm[i] + (1 - b2) * gi;
            if (fabs(w[i] - rw[i]) > 1e-6 || fabs(m[i] - rm[i]) > 1e-5 * (fabs(rm[i]) + 1e-6))
                fail_msg("step %d element %d: w %.9g m %.9g, want %.9g %.9g", t, i, w[i], m[i], rw[i], rm[i]);
        }
    }
    /* every update is exactly lr in size (the sign), on top of the decay */
    float w1[1] = {0.25f}, m1[1] = {0.0f}, g1[1] = {3.0f};
    lion_update(&h, 1, w1, m1, g1, DTYPE_FP32, &(struct param_writeback){.params = NULL},
                &(struct exec_ctx){0});
    assert_true(w1[0] == 0.25f * (1.0f - 1e-3f * 0.1f) - 1e-3f);
}

/* ---- the one-state 8-bit rules against a plain float version: per
 * block dequantize, the rule's float step (NaN/Inf: state 0, weight
 * kept), the new absmax, the codes by brute force with the sign fix. */
enum rule8 { SGD8, LION8 };

static void plain_step(enum rule8 r, const void *hp, int n, float *w, uint8_t *q, float *a, const float *map,
                       const float *graw) {
    for (int lo = 0, b = 0; lo < n; lo += ADAMW8BIT_BLOCK, b++) {
        int len = n - lo < ADAMW8BIT_BLOCK ? n - lo : ADAMW8BIT_BLOCK;
        float s[ADAMW8BIT_BLOCK], mx = 0.0f;
        for (int i = 0; i < len; i++) {
            float x = map[q[lo + i]] * a[b], wi = w[lo + i];
            if (r == SGD8) {
                const struct sgd_hparams *h = hp;
                float g = graw[lo + i] * h->grad_scale, gi = g + h->weight_decay * wi;
                float buf = h->first_step ? gi : h->momentum * x + gi;
                float upd = h->nesterov ? gi + h->momentum * buf : buf;
                x = buf, wi = wi - h->lr * upd;
                if (!isfinite(g)) x = 0.0f, wi = w[lo + i];
            } else {
                const struct lion_hparams *h = hp;
                float g = graw[lo + i] * h->grad_scale, c = h->beta1 * x + (1.0f - h->beta1) * g;
                wi = wi * (1.0f - h->lr * h->weight_decay) - h->lr * (c > 0 ? 1.0f : c < 0 ? -1.0f : c);
                x = h->beta2 * x + (1.0f - h->beta2) * g;
                if (!isfinite(g)) x = 0.0f, wi = w[lo + i];
            }
            s[i] = x, w[lo + i] = wi;
            mx = fmaxf(mx, fabsf(x));
        }
        a[b] = mx;
        for (int i = 0; i < len; i++) {
            uint8_t c = mx > 0 ? nearest_brute(map, s[i] / mx) : nearest_brute(map, 0.0f);
            if (mx > 0 && (map[c] < 0) != (signbit(s[i]) != 0)) c = s[i] > 0 ? c + 1 : c - 1;
            q[lo + i] = c;
        }
    }
}

static void run_rule8(enum rule8 r, enum dtype gd, bool indexed) {
    float map[QMAP_SIZE], w[N], rw[N], g[N], a[NB] = {0}, ra[NB] = {0};
    uint8_t q[N] = {0}, rq[N] = {0};
    bf16 g16[N], p[N];
    qmap_dynamic(map, true);
    struct qmap_index *ix = NULL;
    if (indexed) {
        ix = malloc(sizeof *ix);
        assert_non_null(ix);
        qmap_index_build(ix, map);
    }
    for (int i = 0; i < N; i++) w[i] = rw[i] = uni(8000000 + (uint64_t)i, -0.5f, 0.5f);
    const struct param_writeback out = {.params = p, .rounding = ROUND_STOCHASTIC, .seed = 3, .noise_index = 99};
    for (int t = 1; t <= STEPS; t++) {
        for (int i = 0; i < N; i++) {
            g[i] = grad_at(t, i);
            if (gd == DTYPE_BF16) g16[i] = f32_to_bf16(g[i]), g[i] = bf16_to_f32(g16[i]);
        }
        if (t == 2) g[17] = NAN, g[600] = -INFINITY, g16[17] = f32_to_bf16(NAN), g16[600] = f32_to_bf16(-INFINITY);
        const void *gp = gd == DTYPE_FP32 ? (const void *)g : (const void *)g16;
        struct exec_ctx fc = {0};
        const struct sgd_hparams sh = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .grad_scale = 0.5f,
                                       .nesterov = t > 2, .first_step = t == 1};
        const struct lion_hparams lh = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.99f, .weight_decay = 0.1f,
                                        .grad_scale = 0.5f};
        if (r == SGD8) {
            sgd8bit_update(&sh, N, w, q, a, map, ix, gp, gd, &out, &fc);
            plain_step(r, &sh, N, rw, rq, ra, map, g);
        } else {
            lion8bit_update(&lh, N, w, q, a, map, ix, gp, gd, &out, &fc);
            plain_step(r, &lh, N, rw, rq, ra, map, g);
        }
        assert_true(fc.other > 0);
        for (int b = 0; b < NB; b++)
            if (a[b] != ra[b]) fail_msg("step %d block %d: absmax %.9g, want %.9g", t, b, a[b], ra[b]);
        for (int i = 0; i < N; i++) {
            if (q[i] != rq[i] || w[i] != rw[i])
                fail_msg("step %d element %d: code %d w %.9g, want %d %.9g", t, i, q[i], w[i], rq[i], rw[i]);
            assert_int_equal(p[i], f32_to_bf16_stochastic(w[i], rng_u32(3, RNG_STREAM_ROUNDING, 99 + (uint64_t)i)));
        }
        if (t == 2) assert_true(map[q[17]] == 0.0f && map[q[600]] == 0.0f);
    }
    free(ix);
}

static void test_sgd8bit_vs_plain(void **state) {
    (void)state;
    run_rule8(SGD8, DTYPE_FP32, false);
    run_rule8(SGD8, DTYPE_BF16, true);
}

static void test_lion8bit_vs_plain(void **state) {
    (void)state;
    run_rule8(LION8, DTYPE_FP32, true);
    run_rule8(LION8, DTYPE_BF16, false);
}

/* ---- each 8-bit rule near its 32-bit twin: after a few steps the weights
 * differ by the quantization of the state only. The dynamic map's codes
 * are at most ~1/20 apart near 1, so a momentum element is off by a
 * fraction of its block's maximum; the weights, by lr times that. */
static void test_near_32bit_twin(void **state) {
    (void)state;
    float map[QMAP_SIZE], w8[N], w32[N], buf[N], g[N], a[NB];
    uint8_t q[N];
    qmap_dynamic(map, true);
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < N; i++) w8[i] = w32[i] = uni(7000000 + (uint64_t)i, -0.5f, 0.5f), buf[i] = 0.0f, q[i] = 0;
        for (int b = 0; b < NB; b++) a[b] = 0.0f;
        int flips = 0;
        for (int t = 1; t <= STEPS; t++) {
            for (int i = 0; i < N; i++) g[i] = grad_at(t, i);
            struct exec_ctx fc = {0};
            const struct param_writeback none = {.params = NULL};
            if (r == 0) {
                const struct sgd_hparams h = {.lr = 0.1f, .momentum = 0.9f, .grad_scale = 1.0f, .first_step = t == 1};
                sgd8bit_update(&h, N, w8, q, a, map, NULL, g, DTYPE_FP32, &none, &fc);
                sgd_update(&h, N, w32, buf, g, DTYPE_FP32, &none, &fc);
            } else {
                const struct lion_hparams h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.99f, .grad_scale = 1.0f};
                lion8bit_update(&h, N, w8, q, a, map, NULL, g, DTYPE_FP32, &none, &fc);
                lion_update(&h, N, w32, buf, g, DTYPE_FP32, &none, &fc);
            }
        }
        for (int i = 0; i < N; i++) {
            double d = fabs((double)w8[i] - w32[i]);
            /* sgd: 4 steps of lr x (a block max ~1 x 3%); lion: a sign may flip where c is near 0 */
            if (r == 0) assert_true(d < 0.1 * 4 * 0.05);
            else flips += d > 1e-6;
        }
        if (r == 1) assert_true(flips < N / 20);
    }
}

/* ---- the codec of one signed state: quantize then dequantize is within
 * half the widest code gap (about 1/10 near +-1) of the block's maximum, and
 * the dequantized values quantize back to their codes under that maximum. */
static void test_codec_round_trip(void **state) {
    (void)state;
    float map[QMAP_SIZE], x[N], y[N], a[NB], a2[NB];
    uint8_t q[N], q2[N];
    qmap_dynamic(map, true);
    for (int i = 0; i < N; i++) x[i] = grad_at(1, i);
    adamw8bit_quantize(MEM_HOST, map, NULL, x, N, q, a);
    adamw8bit_dequantize(MEM_HOST, map, q, a, N, y);
    for (int i = 0; i < N; i++) assert_true(fabsf(x[i] - y[i]) <= 0.05f * a[i / ADAMW8BIT_BLOCK]);
    for (int i = 0; i < N; i++) assert_int_equal(qmap_nearest(map, y[i] / a[i / ADAMW8BIT_BLOCK]), q[i]);
    /* a block's largest |x| is the absmax, and it keeps its sign */
    adamw8bit_quantize(MEM_HOST, map, NULL, y, N, q2, a2);
    for (int b = 0; b < NB; b++) assert_true(a2[b] > 0.9f * a[b] && a2[b] <= a[b]);
}

/* ---- the table: bytes per state and parameter (the seeds' table) */
static void test_rule_table(void **state) {
    (void)state;
    static const struct {
        enum optimizer_kind k;
        const char *name;
        double bytes_per_param; /* fp32 states, per parameter */
        double bytes_8bit;      /* the same state 8-bit, 1000 elements in 4 blocks */
    } want[] = {{OPTIM_ADAMW, "adamw", 8, 0},      {OPTIM_ADAMW8BIT, "adamw8bit", 8, 2 * (1000 + 4 * 4)},
                {OPTIM_SGD, "sgd", 4, 0},          {OPTIM_SGD8BIT, "sgd8bit", 4, 1000 + 4 * 4},
                {OPTIM_LION, "lion", 4, 0},        {OPTIM_LION8BIT, "lion8bit", 4, 1000 + 4 * 4}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct optim_rule *r = optim_rule(want[i].k);
        assert_string_equal(r->name, want[i].name);
        assert_true(optim_state_bytes(r, 0, 0, 1) == want[i].bytes_per_param);
        if (r->quantized) assert_true(optim_state_bytes(r, 1000, 4, 0) == want[i].bytes_8bit);
        assert_true(optim_rule(r->twin)->twin == want[i].k); /* twins pair up */
        assert_true(optim_rule(r->twin)->quantized != r->quantized);
        struct config c;
        config_defaults(&c);
        char err[CONFIG_ERR_LEN];
        assert_int_equal(config_set(&c, "optimizer", want[i].name, err), 0);
        assert_int_equal((int)c.optimizer, (int)want[i].k);
        assert_int_equal(config_validate(&c, err), 0);
    }
}

/* ---- Adafactor against the paper in double (Shazeer & Stern 2018,
 * Algorithm 4 for a matrix with 1^T R, Algorithm 5 for a vector, update
 * clipping; with beta1 a first moment of the clipped update), 4 steps, and
 * the same matrix cut into three pieces whose sums are added (as ZeRO's
 * ranks do) gives the same steps. */
enum { AR = 12, AC = 20, AV = 30 };

static void adafactor_plain(int t, double *w, double *R, double *Cc, double *m, const float *g, int rows, int cols,
                            double lr, double beta1, double wd, double d) {
    const double b2 = 1.0 - pow((double)t, -0.8), eps1 = 1e-30;
    double u[AR * AC], sq = 0.0;
    const int n = rows * cols;
    if (rows > 1) {
        for (int i = 0; i < rows; i++) {
            double s = 0;
            for (int j = 0; j < cols; j++) s += (double)g[i * cols + j] * g[i * cols + j] + eps1;
            R[i] = b2 * R[i] + (1 - b2) * s;
        }
        for (int j = 0; j < cols; j++) {
            double s = 0;
            for (int i = 0; i < rows; i++) s += (double)g[i * cols + j] * g[i * cols + j] + eps1;
            Cc[j] = b2 * Cc[j] + (1 - b2) * s;
        }
        double rt = 0;
        for (int i = 0; i < rows; i++) rt += R[i];
        for (int k = 0; k < n; k++) u[k] = g[k] / sqrt(R[k / cols] * Cc[k % cols] / rt);
    } else {
        for (int k = 0; k < n; k++) {
            R[k] = b2 * R[k] + (1 - b2) * ((double)g[k] * g[k] + eps1);
            u[k] = g[k] / sqrt(R[k]);
        }
    }
    for (int k = 0; k < n; k++) sq += u[k] * u[k];
    const double scale = 1.0 / fmax(1.0, sqrt(sq / n) / d);
    for (int k = 0; k < n; k++) {
        double step = u[k] * scale;
        if (beta1 > 0) step = m[k] = beta1 * m[k] + (1 - beta1) * step;
        w[k] = w[k] * (1 - lr * wd) - lr * step;
    }
}

/* One step of the kernels over `pieces` cuts of a rows x cols tensor. */
static void adafactor_kernels(int t, float *w, float *stat, float *m, const float *g, int rows, int cols,
                              const struct adafactor_hparams *h0, int pieces) {
    struct adafactor_hparams h = *h0;
    h.beta2t = adafactor_beta2t(0.8f, t);
    const size_t n = (size_t)rows * (size_t)cols;
    size_t cut[4] = {0, n / 3 + 1, 2 * n / 3 + 5, n};
    if (pieces == 1) cut[1] = n;
    const bool factored = rows > 1;
    float sums[AR + AC] = {0};
    for (int p = 0; p < pieces; p++) {
        size_t a = cut[p], b = p == pieces - 1 ? n : cut[p + 1];
        if (factored)
            adafactor_square_sums(MEM_HOST, b - a, g + a, DTYPE_FP32, h.grad_scale, h.eps1, a, cols, sums, sums + rows);
        else adafactor_vector_ema(MEM_HOST, b - a, stat + a, g + a, DTYPE_FP32, h.grad_scale, h.eps1, h.beta2t);
    }
    float total = 0;
    if (factored) {
        adafactor_ema(MEM_HOST, (size_t)rows + (size_t)cols, stat, sums, h.beta2t);
        for (int j = 0; j < cols; j++) total += stat[rows + j];
    }
    double sq = 0;
    struct adafactor_moment s[3];
    for (int p = 0; p < pieces; p++) {
        size_t a = cut[p], b = p == pieces - 1 ? n : cut[p + 1];
        s[p] = factored ? (struct adafactor_moment){.rows = stat, .cols = stat + rows, .col_total = &total, .c0 = a,
                                                    .ncols = cols}
                        : (struct adafactor_moment){.v = stat + a};
        adafactor_update_squares(MEM_HOST, b - a, g + a, DTYPE_FP32, h.grad_scale, &s[p], &sq);
    }
    const float clip = (float)(1.0 / fmax(1.0, sqrt(sq / (double)n) / h.clip));
    for (int p = 0; p < pieces; p++) {
        size_t a = cut[p], b = p == pieces - 1 ? n : cut[p + 1];
        struct exec_ctx fc = {0};
        adafactor_apply(&h, b - a, w + a, m ? m + a : NULL, g + a, DTYPE_FP32, &s[p], clip,
                        &(struct param_writeback){.params = NULL}, &fc);
        assert_true(fc.other > 0);
    }
}

static void check_adafactor(int rows, int cols, double beta1, float scale_g, int pieces) {
    const int n = rows * cols;
    float w[AR * AC], g[AR * AC], stat[AR * AC + AC] = {0}, m[AR * AC] = {0};
    double rw[AR * AC], R[AR * AC] = {0}, Cc[AC] = {0}, rm[AR * AC] = {0};
    for (int k = 0; k < n; k++) w[k] = uni(6000000 + (uint64_t)k, -0.5f, 0.5f), rw[k] = w[k];
    const struct adafactor_hparams h = {.lr = 1e-2f, .beta1 = (float)beta1, .eps1 = 1e-30f, .clip = 1.0f,
                                        .weight_decay = 0.1f, .grad_scale = 1.0f};
    for (int t = 1; t <= STEPS; t++) {
        for (int k = 0; k < n; k++) g[k] = scale_g * grad_at(t, k);
        adafactor_kernels(t, w, stat, beta1 > 0 ? m : NULL, g, rows, cols, &h, pieces);
        adafactor_plain(t, rw, R, Cc, rm, g, rows, cols, h.lr, h.beta1, h.weight_decay, h.clip);
        for (int k = 0; k < n; k++)
            if (fabs(w[k] - rw[k]) > 2e-6 * (1 + fabs(rw[k])))
                fail_msg("%dx%d beta1 %g pieces %d step %d element %d: w %.9g, want %.9g", rows, cols, beta1, pieces, t,
                         k, w[k], rw[k]);
    }
}

static void test_adafactor_vs_paper(void **state) {
    (void)state;
    check_adafactor(AR, AC, 0.0, 1.0f, 1);   /* factored, clipping active (the first steps' RMS is ~1 or more) */
    check_adafactor(AR, AC, 0.9, 1e-3f, 1);  /* a first moment, small gradients */
    check_adafactor(1, AV, 0.0, 1.0f, 1);    /* a vector */
    check_adafactor(AR, AC, 0.0, 1.0f, 3);   /* cut in three, as over ranks */
    check_adafactor(1, AV, 0.9, 1.0f, 3);
    /* beta2_t = 1 - t^-0.8: 0 at the first step (the moment is the square itself) */
    assert_true(adafactor_beta2t(0.8f, 1) == 0.0f);
    assert_true(fabsf(adafactor_beta2t(0.8f, 10) - (1.0f - powf(10.0f, -0.8f))) < 1e-7f);
}

/* ---- bad input */
static void test_config_refusals(void **state) {
    (void)state;
    struct config c;
    char err[CONFIG_ERR_LEN];
    config_defaults(&c);
    assert_int_equal(config_set(&c, "optimizer", "adafactorr", err), -1);
    assert_non_null(strstr(err, "adamw adamw8bit sgd sgd8bit lion lion8bit adafactor"));
    static const struct {
        const char *opt, *key, *value, *keys;
    } bad[] = {{"sgd", "beta2", "0.99", "(its keys: momentum nesterov)"},
               {"sgd8bit", "eps", "0.001", "(its keys: momentum nesterov min_8bit_size)"},
               {"lion", "momentum", "0.5", "(its keys: beta1 beta2)"},
               {"adamw", "min_8bit_size", "1024", "(its keys: beta1 beta2 eps)"},
               {"lion8bit", "nesterov", "1", "(its keys: beta1 beta2 min_8bit_size)"},
               {"adafactor", "beta1", "0.5", "(its keys: adafactor_beta1 adafactor_decay adafactor_eps adafactor_clip)"},
               {"adamw", "adafactor_clip", "2", "(its keys: beta1 beta2 eps)"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        config_defaults(&c);
        assert_int_equal(config_set(&c, "optimizer", bad[i].opt, err), 0);
        assert_int_equal(config_set(&c, bad[i].key, bad[i].value, err), 0);
        assert_int_equal(config_validate(&c, err), -1);
        char want[200];
        snprintf(want, sizeof want, "%s = %s does not belong to optimizer %s %s", bad[i].key, bad[i].value,
                 bad[i].opt, bad[i].keys);
        if (!strstr(err, want)) fail_msg("got '%s', want '%s'", err, want);
    }
    /* a key of the rule is fine; another rule's key left unset too */
    config_defaults(&c);
    assert_int_equal(config_set(&c, "optimizer", "lion", err), 0);
    assert_int_equal(config_set(&c, "beta2", "0.99", err), 0);
    assert_int_equal(config_validate(&c, err), 0);
    /* ... but set, even to its default value (momentum's 0.9, beta2's
     * 0.95), it is an error naming the key and the rule */
    assert_int_equal(config_set(&c, "momentum", "0.9", err), 0);
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "momentum = 0.9 (set explicitly, to its default) does not belong to optimizer lion "
                                "(its keys: beta1 beta2)"));
    config_defaults(&c);
    assert_int_equal(config_set(&c, "optimizer", "sgd", err), 0);
    assert_int_equal(config_validate(&c, err), 0);
    assert_int_equal(config_set(&c, "beta2", "0.95", err), 0);
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "beta2 = 0.95 (set explicitly, to its default) does not belong to optimizer sgd"));
    /* the same from a config file's line */
    static const char text[] = "optimizer = adafactor\neps = 1e-08\n";
    FILE *f = fmemopen((void *)text, sizeof text - 1, "r");
    assert_non_null(f);
    config_defaults(&c);
    assert_int_equal(config_load_stream(&c, f, "t.conf", err), 0);
    fclose(f);
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "eps = 1e-08 (set explicitly, to its default) does not belong to optimizer adafactor"));
}

/* Runs config_parse_args over the NULL-terminated options (argv[0] added). */
static int parse(struct config *c, const char *const *opts, char err[CONFIG_ERR_LEN]) {
    char *argv[16] = {"train"};
    int argc = 1;
    while (*opts && argc < 16) argv[argc++] = (char *)*opts++;
    bool help;
    config_defaults(c);
    return config_parse_args(c, argc, argv, &help, err) != 0 ? -1 : config_validate(c, err);
}

/* beta2's default follows the rule where it is not set: AdamW's 0.95 (the
 * key table's), Lion's 0.99 (Chen et al. 2023) under lion and lion8bit;
 * a set beta2 is kept, its default value included. The banner prints it. */
static void test_lion_beta2_default(void **state) {
    (void)state;
    struct config c;
    char err[CONFIG_ERR_LEN];
    assert_int_equal(parse(&c, (const char *[]){"--optimizer", "lion", NULL}, err), 0);
    assert_true(c.beta2 == 0.99f);
    assert_int_equal(parse(&c, (const char *[]){"--optimizer=lion8bit", NULL}, err), 0);
    assert_true(c.beta2 == 0.99f);
    assert_int_equal(parse(&c, (const char *[]){"--optimizer", "lion", "--beta2", "0.95", NULL}, err), 0);
    assert_true(c.beta2 == 0.95f);
    assert_int_equal(parse(&c, (const char *[]){"--beta2", "0.9", "--optimizer", "lion", NULL}, err), 0);
    assert_true(c.beta2 == 0.9f);
    assert_int_equal(parse(&c, (const char *[]){NULL}, err), 0);
    assert_true(c.beta2 == 0.95f);
    assert_int_equal(parse(&c, (const char *[]){"--optimizer", "adamw8bit", NULL}, err), 0);
    assert_true(c.beta2 == 0.95f);
    /* config_rule_defaults alone (a caller of config_set), and once only */
    config_defaults(&c);
    assert_int_equal(config_set(&c, "optimizer", "lion", err), 0);
    assert_true(config_rule_defaults(&c));
    assert_false(config_rule_defaults(&c));
    assert_true(c.beta2 == 0.99f);
    /* the banner's line says whose default it is */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    config_print_optimizer(f, &c);
    c.optim_keys_set |= 1u << OKEY_BETA2;
    config_print_optimizer(f, &c);
    fclose(f);
    assert_non_null(strstr(text, "optimizer: lion, beta1 0.9, beta2 0.99 (this rule's default), weight_decay 0.1\n"
                                 "optimizer: lion, beta1 0.9, beta2 0.99, weight_decay 0.1\n"));
    free(text);
    /* --help says so */
    f = open_memstream(&text, &len);
    assert_non_null(f);
    config_print_help(f, "train", false);
    fclose(f);
    assert_non_null(strstr(text, "whose default, where beta2 is not set, is the paper's 0.99 instead"));
    free(text);
}

/* Adafactor runs on every tp and pp layout (the sums over tp and the
 * tied wte's statistics: include/factored.h); the 8-bit rules' pp x ZeRO
 * refusal is kept (on every rank: the trainer agrees on
 * config_check_grid's answer). */
static void test_adafactor_grids(void **state) {
    (void)state;
    struct config c;
    char err[CONFIG_ERR_LEN];
    config_defaults(&c);
    c.optimizer = OPTIM_ADAFACTOR;
    c.n_head = 4, c.d_model = 64, c.sample_tokens = 0;
    struct grid g = {.dp = 1, .cp = 1, .tp = 1, .pp = 1};
    assert_int_equal(config_check_grid(&c, &g, err), 0);
    g.tp = 2;
    assert_int_equal(config_check_grid(&c, &g, err), 0);
    g.tp = 1, g.pp = 2, g.dp = 2, c.zero = 1;
    assert_int_equal(config_check_grid(&c, &g, err), 0);
    g.tp = 2, c.zero = 3;
    assert_int_equal(config_check_grid(&c, &g, err), 0);
    g.tp = 1, g.pp = 1, g.dp = 1, c.zero = 0;
    /* the 8-bit rules' pp x ZeRO refusal names the rule and its 32-bit twin */
    c.optimizer = OPTIM_LION8BIT;
    g.pp = 2, g.dp = 2, c.zero = 2;
    assert_int_equal(config_check_grid(&c, &g, err), -1);
    assert_non_null(strstr(err, "lion8bit with pp = 2, ZeRO-2 over dp = 2"));
    assert_non_null(strstr(err, "or lion)"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lion_vs_double),     cmocka_unit_test(test_sgd8bit_vs_plain),
        cmocka_unit_test(test_lion8bit_vs_plain),  cmocka_unit_test(test_near_32bit_twin),
        cmocka_unit_test(test_codec_round_trip),   cmocka_unit_test(test_rule_table),
        cmocka_unit_test(test_config_refusals),    cmocka_unit_test(test_adafactor_vs_paper),
        cmocka_unit_test(test_adafactor_grids), cmocka_unit_test(test_lion_beta2_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
