/* The bf16 data path's kernels (include/layers.h: layernorm_forward_bf16,
 * layernorm_backward_bf16 with an fp32 or a bf16 dinp, residual_forward_bf16,
 * gelu_backward_bf16_grads and embedding_rows_backward_bf16 on the bf16
 * activation gradients; the plain attention's attention_forward_bf16 and
 * attention_backward_bf16, and flash's attention_lse_*_bf16, both storing a
 * bf16 dqkv, test_attention_bf16 and test_attention_lse_bf16, whose
 * comments say how), held to what a GPU port of them will be held to:
 *
 * - against an fp64 reference of the same math on the same bf16 inputs
 *   (widened: exact). Forward bound per element: the one rounding to bf16
 *   (nearest even, unit roundoff 2^-8: at most 2^-8 |y| off) plus the
 *   fp32 arithmetic's error, which for a LayerNorm output y = xhat w + b
 *   is a few fp32 roundings of its terms (<= 2^-19 (|xhat w| + |b|), a
 *   wide margin for C = 96 sums) and for the residual one fp32 add
 *   (2^-24 |a + b|);
 * - the backward against central finite differences of the fp64
 *   reference loss sum(g * LayerNorm(x)) (h = 1e-3 in fp64: truncation
 *   ~h^2 ~ 1e-6, far below the bound 1e-4 + 1e-3 |grad|), for the input,
 *   the weight and the bias; dinp, dweight and dbias are accumulated;
 * - bit for bit against the fp32 kernels on the widened inputs followed by
 *   a narrow (the model's old path, include/layers.h), so the bf16 path
 *   changes no value the fp32 path computes;
 * - that the rounding happens (outputs differ from the unrounded ones),
 *   and the FLOP counts equal the fp32 forms'. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bufops.h"
#include "gradcheck.h"
#include "layers.h"

enum { R = 7, CH = 96, NE = R * CH };

static const double LN_EPS = 1e-5;

/* Inputs: x as bf16 (and its exact fp32 widening), LayerNorm weight and bias
 * fp32, the upstream gradient g; rows at several offsets and scales, as
 * the residual stream has. */
struct ln_case {
    bf16 x16[NE];
    float x[NE], w[CH], b[CH], g[NE];
};

static void make_case(struct ln_case *k) {
    fill_uniform(k->x, NE, -2, 2, 90);
    for (int i = 0; i < R; i++)
        for (int c = 0; c < CH; c++) k->x[i * CH + c] = k->x[i * CH + c] * (float)(1 + i) + 0.5f * (float)i;
    for (int i = 0; i < NE; i++) {
        k->x16[i] = f32_to_bf16(k->x[i]);
        k->x[i] = bf16_to_f32(k->x16[i]);
    }
    fill_uniform(k->w, CH, 0.5f, 1.5f, 91);
    fill_uniform(k->b, CH, -0.5f, 0.5f, 92);
    fill_uniform(k->g, NE, -1, 1, 93);
}

/* LayerNorm of row x in fp64 into y (NULL: none); returns sum(g y). */
static double ln_row64(const double *x, const double *w, const double *b, const float *g, double *y) {
    double m = 0, v = 0, loss = 0;
    for (int c = 0; c < CH; c++) m += x[c];
    m /= CH;
    for (int c = 0; c < CH; c++) v += (x[c] - m) * (x[c] - m);
    v /= CH;
    double s = 1.0 / sqrt(v + LN_EPS);
    for (int c = 0; c < CH; c++) {
        double o = (x[c] - m) * s * w[c] + b[c];
        if (y) y[c] = o;
        loss += (double)g[c] * o;
    }
    return loss;
}

/* The fp64 reference's loss sum(g * LayerNorm(x)) over all rows. */
struct ref64 {
    double x[NE], w[CH], b[CH];
    const float *g;
};

static double ref_loss(const struct ref64 *r) {
    double loss = 0;
    for (int i = 0; i < R; i++) loss += ln_row64(r->x + i * CH, r->w, r->b, r->g + i * CH, NULL);
    return loss;
}

/* d loss / d p[j] by a central difference in fp64 */
static double central64(struct ref64 *r, double *p, int j) {
    const double h = 1e-3;
    double p0 = p[j];
    p[j] = p0 + h;
    double lp = ref_loss(r);
    p[j] = p0 - h;
    double lm = ref_loss(r);
    p[j] = p0;
    return (lp - lm) / (2 * h);
}

/* Every element of ana (n of them, `pre` added before) against the fp64
 * finite difference with respect to p; some gradient must be non-trivial.
 * stored: the relative error of ana's own store (0: fp32; a bf16 store's
 * one rounding, 2^-8, of the accumulated value pre + gradient). */
static void check_fd(const char *what, struct ref64 *r, double *p, const float *ana, int n, float pre, double stored) {
    double most = 0;
    for (int j = 0; j < n; j++) {
        double num = central64(r, p, j), an = (double)ana[j] - pre;
        if (!(fabs(num - an) <= 1e-4 + 1e-3 * fabs(num) + stored * fabs((double)ana[j])))
            fail_msg("%s[%d]: numeric %.9g, analytic %.9g", what, j, num, an);
        most = fmax(most, fabs(an));
    }
    assert_true(most > GC_MIN_GRAD);
}

static void test_layernorm_forward_bf16(void **state) {
    (void)state;
    static struct ln_case k;
    make_case(&k);
    static bf16 out[NE], want16[NE];
    static float mean[R], rstd[R], mean32[R], rstd32[R], out32[NE];
    struct exec_ctx fa = {0}, fb = {0};
    layernorm_forward_bf16(out, mean, rstd, k.x16, k.w, k.b, R, CH, &fa);

    /* fp64 reference on the same (widened) inputs */
    double worst = 0;
    int rounded = 0;
    for (int i = 0; i < R; i++) {
        double x[CH], w[CH], b[CH], y[CH];
        for (int c = 0; c < CH; c++) x[c] = k.x[i * CH + c], w[c] = k.w[c], b[c] = k.b[c];
        ln_row64(x, w, b, k.g, y);
        double m = 0;
        for (int c = 0; c < CH; c++) m += x[c];
        for (int c = 0; c < CH; c++) {
            double got = bf16_to_f32(out[i * CH + c]), xhat_w = fabs((x[c] - m / CH) * rstd[i] * w[c]);
            double bound = ldexp(fabs(y[c]), -8) + ldexp(xhat_w + fabs(b[c]), -19);
            if (!(fabs(got - y[c]) <= bound))
                fail_msg("layernorm_forward_bf16[%d][%d] = %.9g, fp64 %.9g: off by %.3g > %.3g", i, c, got, y[c],
                         fabs(got - y[c]), bound);
            worst = fmax(worst, fabs(got - y[c]) / fabs(y[c]));
            rounded += (float)got != (float)y[c];
        }
    }
    printf("  layernorm_forward_bf16 vs fp64: worst relative error %.3g (2^-8 = %.3g)\n", worst, ldexp(1, -8));
    assert_true(rounded > NE / 2); /* the output was rounded to bf16 */

    /* the fp32 kernel on the widened input, then narrowed: the same bits */
    layernorm_forward(out32, mean32, rstd32, k.x, k.w, k.b, R, CH, &fb);
    buf_narrow(MEM_HOST, want16, out32, NE);
    assert_memory_equal(out, want16, sizeof out);
    assert_memory_equal(mean, mean32, sizeof mean);
    assert_memory_equal(rstd, rstd32, sizeof rstd);
    assert_true(fa.other == fb.other && fa.other > 0);
}

static void test_layernorm_backward_bf16(void **state) {
    (void)state;
    static struct ln_case k;
    make_case(&k);
    static bf16 out[NE];
    static float mean[R], rstd[R], dinp[NE], dw[CH], db[CH], dinp32[NE], dw32[CH], db32[CH];
    struct exec_ctx fa = {0}, fb = {0};
    layernorm_forward_bf16(out, mean, rstd, k.x16, k.w, k.b, R, CH, &fa);
    const float pre = 0.25f; /* all three accumulate */
    fill_const(dinp, NE, pre), fill_const(dw, CH, pre), fill_const(db, CH, pre);
    fill_const(dinp32, NE, pre), fill_const(dw32, CH, pre), fill_const(db32, CH, pre);
    layernorm_backward_bf16(act_out_f32(dinp, MEM_HOST), dw, db, k.g, k.x16, k.w, mean, rstd, R, CH, &fa);

    static struct ref64 r;
    for (int i = 0; i < NE; i++) r.x[i] = k.x[i];
    for (int c = 0; c < CH; c++) r.w[c] = k.w[c], r.b[c] = k.b[c];
    r.g = k.g;
    check_fd("layernorm_backward_bf16.dinp", &r, r.x, dinp, NE, pre, 0);
    check_fd("layernorm_backward_bf16.dweight", &r, r.w, dw, CH, pre, 0);
    check_fd("layernorm_backward_bf16.dbias", &r, r.b, db, CH, pre, 0);

    /* the fp32 kernel on the widened input: the same bits */
    layernorm_backward(dinp32, dw32, db32, k.g, k.x, k.w, mean, rstd, R, CH, &fb);
    assert_memory_equal(dinp, dinp32, sizeof dinp);
    assert_memory_equal(dw, dw32, sizeof dw);
    assert_memory_equal(db, db32, sizeof db);

    /* dinp bf16 (the bf16 data path's stream gradient): accumulated onto
     * pre (exact in bf16) in fp32 and rounded once, the fp32 dinp
     * narrowed; against the finite differences within that rounding
     * (2^-8 of the stored value) */
    static bf16 dinp16[NE], want16[NE];
    static float dinp_w[NE];
    for (int i = 0; i < NE; i++) dinp16[i] = f32_to_bf16(pre);
    fill_const(dw, CH, pre), fill_const(db, CH, pre);
    layernorm_backward_bf16(act_out_bf16(dinp16, MEM_HOST), dw, db, k.g, k.x16, k.w, mean, rstd, R, CH, &fa);
    buf_narrow(MEM_HOST, want16, dinp32, NE);
    assert_memory_equal(dinp16, want16, sizeof dinp16);
    assert_memory_equal(dw, dw32, sizeof dw);
    assert_memory_equal(db, db32, sizeof db);
    buf_widen(MEM_HOST, dinp_w, dinp16, NE);
    check_fd("layernorm_backward_bf16.dinp (bf16)", &r, r.x, dinp_w, NE, pre, ldexp(1, -8));
    int rounded = 0;
    for (int i = 0; i < NE; i++) rounded += dinp_w[i] != dinp32[i];
    assert_true(rounded > NE / 2); /* the rounding happened */
}

static void test_residual_forward_bf16(void **state) {
    (void)state;
    static bf16 a16[NE], out[NE], want16[NE];
    static float a[NE], b[NE], out32[NE];
    fill_uniform(a, NE, -3, 3, 94);
    fill_uniform(b, NE, -0.1f, 0.1f, 95); /* a layer's update is small beside the stream */
    for (int i = 0; i < NE; i++) {
        a16[i] = f32_to_bf16(a[i]);
        a[i] = bf16_to_f32(a16[i]);
    }
    struct exec_ctx fa = {0}, fb = {0};
    residual_forward_bf16(out, a16, b, NE, &fa);
    int rounded = 0;
    for (int i = 0; i < NE; i++) {
        double y = (double)a[i] + (double)b[i], got = bf16_to_f32(out[i]);
        double bound = ldexp(fabs(y), -8) + ldexp(fabs(y), -24);
        if (!(fabs(got - y) <= bound))
            fail_msg("residual_forward_bf16[%d] = %.9g, fp64 %.9g: off by %.3g > %.3g", i, got, y, fabs(got - y), bound);
        rounded += (float)got != (float)y;
    }
    assert_true(rounded > NE / 2);
    residual_forward(out32, a, b, NE, &fb);
    buf_narrow(MEM_HOST, want16, out32, NE);
    assert_memory_equal(out, want16, sizeof out);
    assert_true(fa.other == fb.other && fa.other == NE);
}

/* GELU's backward on bf16 gradients (gelu_backward_bf16_grads): the bits
 * of gelu_backward on the widened pre-activation and dout, narrowed
 * (dinp aliasing dout, as the model calls it); against the fp64 derivative
 * of GPT-2's GELU by central differences (h = 1e-4: truncation ~1e-8)
 * times dout, within the store's one rounding (2^-8 |dinp|) plus the fp32
 * kernel's own error (fast_tanhf's absolute ~1e-7 in tanh, times |x dout|
 * terms of at most ~6: 1e-5 absolute, and 1e-4 relative for the sums). */
static double gelu64(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

static void test_gelu_backward_bf16_grads(void **state) {
    (void)state;
    enum { NB = 1001 };
    static float pre[NB], d[NB], want[NB], got[NB];
    static bf16 pre16[NB], d16[NB], y16[NB], want16[NB];
    fill_uniform(pre, NB, -6, 6, 70);
    fill_uniform(d, NB, -1, 1, 71);
    for (int i = 0; i < NB; i++) {
        pre16[i] = f32_to_bf16(pre[i]), pre[i] = bf16_to_f32(pre16[i]);
        d16[i] = f32_to_bf16(d[i]), d[i] = bf16_to_f32(d16[i]);
    }
    struct exec_ctx fa = {0}, fb = {0};
    memcpy(y16, d16, sizeof y16); /* dinp aliases dout */
    gelu_backward_bf16_grads(y16, pre16, y16, NB, &fa);
    gelu_backward(want, pre, d, NB, &fb);
    buf_narrow(MEM_HOST, want16, want, NB);
    assert_memory_equal(y16, want16, sizeof y16);
    assert_true(fa.other == fb.other && fa.other > 0);
    buf_widen(MEM_HOST, got, y16, NB);
    const double h = 1e-4;
    int rounded = 0;
    for (int i = 0; i < NB; i++) {
        double x = pre[i], num = (gelu64(x + h) - gelu64(x - h)) / (2 * h) * d[i], an = got[i];
        double bound = ldexp(fabs(an), -8) + 1e-5 + 1e-4 * fabs(num);
        if (!(fabs(an - num) <= bound))
            fail_msg("gelu_backward_bf16_grads[%d] (x %.6g) = %.9g, fp64 %.9g: off by %.3g > %.3g", i, x, an, num,
                     fabs(an - num), bound);
        rounded += got[i] != want[i];
    }
    assert_true(rounded > NB / 2);
}

/* The embedding's backward from the bf16 stream gradient
 * (embedding_rows_backward_bf16): the bits of embedding_rows_backward on
 * the widened gradient (exact), accumulated onto non-zero gradients, rows
 * of another rank's vocabulary slice skipped; test_layers holds the fp32
 * form to finite differences (the loss is linear in the tables). */
static void test_embedding_rows_backward_bf16(void **state) {
    (void)state;
    enum { EB = 2, ET = 5, EC = 8, ROWS = 6, V0 = 2, NT = EB * ET * EC };
    const int32_t tok[EB * ET] = {2, 7, 3, 0, 2, 5, 9, 4, 2, 1};
    static float d[NT], dte[ROWS * EC], dpe[ET * EC], dte32[ROWS * EC], dpe32[ET * EC];
    static bf16 d16[NT];
    fill_uniform(d, NT, -1, 1, 72);
    for (int i = 0; i < NT; i++) d16[i] = f32_to_bf16(d[i]), d[i] = bf16_to_f32(d16[i]);
    fill_uniform(dte, ROWS * EC, -1, 1, 73), fill_uniform(dpe, ET * EC, -1, 1, 74);
    memcpy(dte32, dte, sizeof dte), memcpy(dpe32, dpe, sizeof dpe);
    struct exec_ctx fa = {0}, fb = {0};
    embedding_rows_backward_bf16(dte, dpe, d16, tok, V0, ROWS, EB, ET, EC, &fa);
    embedding_rows_backward(dte32, dpe32, d, tok, V0, ROWS, EB, ET, EC, &fb);
    assert_memory_equal(dte, dte32, sizeof dte);
    assert_memory_equal(dpe, dpe32, sizeof dpe);
    fill_uniform(dte32, ROWS * EC, -1, 1, 73);
    assert_memory_not_equal(dte, dte32, sizeof dte); /* it added something */
}

/* The attention's shape: T not a multiple of anything, three heads of 8,
 * two sequences (six heads for the threads to share). */
enum { AB = 2, AT = 13, AC = 24, ANH = 3, AHS = AC / ANH, AQKV = AB * AT * 3 * AC, AY = AB * AT * AC,
       AP = AB * ANH * AT * AT };

/* sum(dout * out) of the causal attention in fp64 on qkv (B, T, 3C), C =
 * AC, ANH heads: the loss whose gradient the attention backward gives. */
static double attention_loss64(const double *qkv, const float *dout, int T) {
    double loss = 0;
    for (int b = 0; b < AB; b++)
        for (int h = 0; h < ANH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + (b * T + t) * 3 * AC + h * AHS;
                double sc[ATTENTION_LSE_TILE + 6], mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + (b * T + j) * 3 * AC + AC + h * AHS;
                    sc[j] = 0;
                    for (int d = 0; d < AHS; d++) sc[j] += q[d] * k[d];
                    sc[j] /= sqrt((double)AHS);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= t; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int d = 0; d < AHS; d++) {
                    double y = 0;
                    for (int j = 0; j <= t; j++) y += sc[j] / sum * qkv[(b * T + j) * 3 * AC + 2 * AC + h * AHS + d];
                    loss += (double)dout[(b * T + t) * AC + h * AHS + d] * y;
                }
            }
    return loss;
}

/* The finite differences of attention_loss64 (h = 1e-3 in fp64) against
 * the widened bf16 dqkv (n values): returns ||dqkv - num|| / ||num||,
 * and with elementwise > 0 also holds every element within the fp32
 * kernel's error (1e-4 + 1e-3 |num|) plus elementwise times |dqkv| (the
 * store's rounding). */
static double check_attention_fd(const char *what, const float *qkv, const float *dout, const bf16 *dqkv16, int T,
                                 double elementwise) {
    const size_t n = (size_t)(AB * T * 3 * AC);
    double *x = malloc(n * sizeof *x), d2 = 0, n2 = 0;
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = qkv[i];
    for (size_t i = 0; i < n; i++) {
        const double h = 1e-3, x0 = x[i];
        x[i] = x0 + h;
        double lp = attention_loss64(x, dout, T);
        x[i] = x0 - h;
        double lm = attention_loss64(x, dout, T);
        x[i] = x0;
        double num = (lp - lm) / (2 * h), an = bf16_to_f32(dqkv16[i]);
        if (elementwise > 0 && !(fabs(an - num) <= 1e-4 + 1e-3 * fabs(num) + elementwise * fabs(an)))
            fail_msg("%s[%zu]: numeric %.9g, analytic %.9g", what, i, num, an);
        d2 += (an - num) * (an - num), n2 += num * num;
    }
    free(x);
    assert_true(n2 > 0);
    printf("  %s vs fp64 finite differences: relative L2 %.3g\n", what, sqrt(d2 / n2));
    return sqrt(d2 / n2);
}

/* The plain attention's bf16 forms against the fp32 kernels on the
 * widened qkv (and, backward, the widened stored probabilities): outputs
 * narrowed, bit for bit; the fp32-destination form (selective
 * recompute's) bit for bit unnarrowed; FLOP counts equal. The arithmetic
 * is the fp32 kernels' (test_layers_attention holds those to finite
 * differences), so the forward's output is also held to an fp64
 * reference: one bf16 rounding (2^-8 |y|) plus fp32 sums (1e-5 of
 * sum_j P_j |v_j|). */
static void test_attention_bf16(void **state) {
    (void)state;
    static bf16 qkv16[AQKV], out16[AY], att16[AP], want16[AY], wantp16[AP];
    static float qkv[AQKV], out32[AY], att32[AP], outf[AY], attf[AP], dout[AY], dq32[AQKV], p32[AP];
    static bf16 dq[AQKV], dqw[AQKV];
    fill_uniform(qkv, AQKV, -2, 2, 96);
    fill_uniform(dout, AY, -1, 1, 97);
    for (int i = 0; i < AQKV; i++) {
        qkv16[i] = f32_to_bf16(qkv[i]);
        qkv[i] = bf16_to_f32(qkv16[i]);
    }
    float *scratch = malloc(attention_bf16_scratch(AB, AT, AC, ANH) * sizeof *scratch);
    float *scratch32 = malloc(attention_backward_scratch(AB, AT, ANH) * sizeof *scratch32);
    assert_non_null(scratch);
    assert_non_null(scratch32);
    struct exec_ctx fa = {0}, fb = {0}, ff = {0};
    attention_forward_bf16(act_out_bf16(out16, MEM_HOST), act_out_bf16(att16, MEM_HOST), qkv16, scratch, AB, AT, AC,
                           ANH, &fa);
    attention_forward(out32, att32, qkv, AB, AT, AC, ANH, &fb);
    buf_narrow(MEM_HOST, want16, out32, AY);
    buf_narrow(MEM_HOST, wantp16, att32, AP);
    assert_memory_equal(out16, want16, sizeof out16);
    assert_memory_equal(att16, wantp16, sizeof att16);
    attention_forward_bf16(act_out_f32(outf, MEM_HOST), act_out_f32(attf, MEM_HOST), qkv16, scratch, AB, AT, AC,
                           ANH, &ff);
    assert_memory_equal(outf, out32, sizeof outf);
    assert_memory_equal(attf, att32, sizeof attf);
    /* selective recompute's forms: the probabilities not stored (the
     * output alike), and stored as fp32 rounded to bf16's values (the
     * widened bf16 store's bits, no pass of their own) */
    static float attr[AP], outn[AY];
    attention_forward_bf16(act_out_f32(outn, MEM_HOST), act_out_none(), qkv16, scratch, AB, AT, AC, ANH, &ff);
    assert_memory_equal(outn, out32, sizeof outn);
    attention_forward_bf16(act_out_f32(outn, MEM_HOST), act_out_bf16_values(attr, MEM_HOST), qkv16,
                           scratch, AB, AT, AC, ANH, &ff);
    buf_widen(MEM_HOST, p32, wantp16, AP);
    assert_memory_equal(attr, p32, sizeof attr);
    assert_true(fa.attention == fb.attention && fa.other == fb.other && fa.attention > 0);
    /* fp64: out_t = sum_{j<=t} softmax(q_t.k_j / sqrt(hs))_j v_j */
    int rounded = 0;
    for (int b = 0; b < AB; b++)
        for (int h = 0; h < ANH; h++)
            for (int t = 0; t < AT; t++) {
                const float *q = qkv + (b * AT + t) * 3 * AC + h * AHS;
                double sc[AT], mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + (b * AT + j) * 3 * AC + AC + h * AHS;
                    sc[j] = 0;
                    for (int d = 0; d < AHS; d++) sc[j] += (double)q[d] * k[d];
                    sc[j] /= sqrt((double)AHS);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= t; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int d = 0; d < AHS; d++) {
                    double y = 0, mag = 0;
                    for (int j = 0; j <= t; j++) {
                        double v = qkv[(b * AT + j) * 3 * AC + 2 * AC + h * AHS + d];
                        y += sc[j] / sum * v;
                        mag += sc[j] / sum * fabs(v);
                    }
                    double got = bf16_to_f32(out16[(b * AT + t) * AC + h * AHS + d]);
                    double bound = ldexp(fabs(y), -8) + 1e-5 * mag;
                    if (!(fabs(got - y) <= bound))
                        fail_msg("attention_forward_bf16 (%d,%d,%d,%d) = %.9g, fp64 %.9g", b, h, t, d, got, y);
                    rounded += (float)got != (float)y;
                }
            }
    assert_true(rounded > AY / 2);
    /* backward from the stored probabilities, and from an fp32 copy of
     * them: dqkv the fp32 kernel's narrowed */
    struct exec_ctx ga = {0}, gb = {0};
    buf_widen(MEM_HOST, p32, att16, AP);
    attention_backward_bf16(dq, dout, qkv16, operand_bf16(att16, MEM_HOST), scratch, AB, AT, AC, ANH, &ga);
    attention_backward(dq32, dout, qkv, p32, scratch32, AB, AT, AC, ANH, &gb);
    buf_narrow(MEM_HOST, dqw, dq32, AQKV);
    assert_memory_equal(dq, dqw, sizeof dq);
    assert_true(ga.attention == gb.attention && ga.other == gb.other && ga.attention > 0);
    memset(dq, 0, sizeof dq);
    attention_backward_bf16(dq, dout, qkv16, operand_f32(p32, MEM_HOST), scratch, AB, AT, AC, ANH, &ga);
    assert_memory_equal(dq, dqw, sizeof dq);
    /* from the unrounded fp32 probabilities (the store's rounding alone):
     * every element within the fp32 kernel's error plus 2^-8 |dqkv| */
    attention_backward_bf16(dq, dout, qkv16, operand_f32(attf, MEM_HOST), scratch, AB, AT, AC, ANH, &ga);
    check_attention_fd("attention_backward_bf16 dqkv", qkv, dout, dq, AT, ldexp(1, -8));
    free(scratch);
    free(scratch32);
}

/* The flash attention's bf16 forms against the fp32 kernels on the
 * widened qkv and (backward) the widened stored output: the output
 * narrowed, the lse and dqkv bit for bit; FLOP counts equal. T = 13 and
 * T = 70 (rows over one and two key tiles of ATTENTION_LSE_TILE). (The
 * fp32 arithmetic is held to finite differences in test_attention_lse.) */
static void check_attention_lse_bf16(int64_t T) {
    const size_t nq = (size_t)(AB * T * 3 * AC), ny = (size_t)(AB * T * AC), nl = (size_t)(AB * ANH * T);
    bf16 *qkv16 = malloc(nq * sizeof *qkv16), *out16 = malloc(ny * sizeof *out16), *want16 = malloc(ny * 2);
    float *qkv = malloc(nq * 4), *out32 = malloc(ny * 4), *y32 = malloc(ny * 4), *dout = malloc(ny * 4);
    bf16 *dq = malloc(nq * sizeof *dq), *dqw = malloc(nq * sizeof *dqw);
    float *dq32 = malloc(nq * 4), *lse = malloc(nl * 4), *lse32 = malloc(nl * 4);
    float *scratch = malloc(attention_lse_bf16_scratch(AB, T, AC, ANH) * sizeof *scratch);
    float *D = malloc(attention_lse_backward_scratch(AB, T, ANH) * sizeof *D);
    assert_true(qkv16 && out16 && want16 && qkv && out32 && y32 && dout && dq && dqw && dq32 && lse && lse32 && scratch &&
                D);
    fill_uniform(qkv, nq, -2, 2, 98);
    fill_uniform(dout, ny, -1, 1, 99);
    for (size_t i = 0; i < nq; i++) {
        qkv16[i] = f32_to_bf16(qkv[i]);
        qkv[i] = bf16_to_f32(qkv16[i]);
    }
    struct exec_ctx fa = {0}, fb = {0};
    attention_lse_forward_bf16(out16, lse, qkv16, scratch, AB, T, AC, ANH, &fa);
    attention_lse_forward(out32, lse32, qkv, AB, T, AC, ANH, &fb);
    buf_narrow(MEM_HOST, want16, out32, ny);
    assert_memory_equal(out16, want16, ny * sizeof *out16);
    assert_memory_equal(lse, lse32, nl * sizeof *lse);
    buf_widen(MEM_HOST, y32, out16, ny);
    attention_lse_backward_bf16(dq, scratch, dout, qkv16, out16, lse, AB, T, AC, ANH, &fa);
    attention_lse_backward(dq32, D, dout, qkv, y32, lse32, AB, T, AC, ANH, &fb);
    buf_narrow(MEM_HOST, dqw, dq32, nq);
    assert_memory_equal(dq, dqw, nq * sizeof *dq);
    assert_true(fa.attention == fb.attention && fa.other == fb.other && fa.attention > 0);
    /* Normwise against the finite differences: dqkv's one rounding
     * (2^-8 relative) and D = rowsum(dout * out) from the rounded output
     * (out off by 2^-8 relative, so D by 2^-8 sum |dout out|, which enters
     * every dS = P (dP - D) of the row): two errors of about 2^-8 each,
     * held to 2^-6 (a margin of about 2). */
    assert_true(check_attention_fd("attention_lse_backward_bf16 dqkv", qkv, dout, dq, (int)T, 0) <= ldexp(1, -6));
    free(qkv16), free(out16), free(want16), free(qkv), free(out32), free(y32), free(dout);
    free(dq), free(dqw), free(dq32), free(lse), free(lse32), free(scratch), free(D);
}

static void test_attention_lse_bf16(void **state) {
    (void)state;
    check_attention_lse_bf16(AT);
    check_attention_lse_bf16(ATTENTION_LSE_TILE + 6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm_forward_bf16),
        cmocka_unit_test(test_layernorm_backward_bf16),
        cmocka_unit_test(test_residual_forward_bf16),
        cmocka_unit_test(test_gelu_backward_bf16_grads),
        cmocka_unit_test(test_embedding_rows_backward_bf16),
        cmocka_unit_test(test_attention_bf16),
        cmocka_unit_test(test_attention_lse_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
