/* Gradient checks for the GPT-2 layers (attention lives in
 * test_layers_attention.c): every backward is compared element by element
 * with central finite differences of a scalar loss; see gradcheck.h for the
 * technique and the tolerance. Accumulating gradients are pre-filled with a
 * known value to prove they are added to; overwritten ones with a sentinel
 * to prove they are overwritten. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bufops.h"
#include "gradcheck.h"
#include "layers.h"

enum { B = 2, T = 5, C = 8, OC = 12, V = 11, VP = 16, N = B * T };

/* ---------------------------------------------------------------- checker */

/* The checker itself must reject a wrong gradient: loss = sum(x_i^2 * c_i)
 * has gradient 2 c_i x_i; a 5% error in one element, a dropped factor 2
 * and an all-zero gradient must all be caught. */
struct quad_ctx { float *x, *c; };
static double quad_loss(void *p) {
    struct quad_ctx *q = p;
    double s = 0;
    for (int i = 0; i < 16; i++) s += (double)q->c[i] * q->x[i] * q->x[i];
    return s;
}

static void test_gradcheck_rejects_wrong_gradients(void **state) {
    (void)state;
    float x[16], c[16], ana[16];
    fill_uniform(x, 16, -1.0f, 1.0f, 1);
    fill_uniform(c, 16, 0.5f, 1.5f, 2);
    struct quad_ctx q = {x, c};
    for (int i = 0; i < 16; i++) ana[i] = 2.0f * c[i] * x[i];
    assert_int_equal(gc_compare("quad", quad_loss, &q, x, ana, 16, GC_H, 0), 0);
    ana[3] *= 1.05f;
    assert_true(gc_compare("quad", quad_loss, &q, x, ana, 16, GC_H, 0) > 0);
    for (int i = 0; i < 16; i++) ana[i] = c[i] * x[i]; /* factor 2 dropped */
    assert_true(gc_compare("quad", quad_loss, &q, x, ana, 16, GC_H, 0) > 0);
    memset(ana, 0, sizeof ana);
    for (int i = 0; i < 16; i++) c[i] = 0.0f; /* true gradient is 0 too */
    assert_true(gc_compare("quad", quad_loss, &q, x, ana, 16, GC_H, 0) > 0);
}

/* ---------------------------------------------------------------- encoder */

struct enc_ctx { float *out, *wte, *wpe, *g; const int32_t *inp; };
static double enc_loss(void *p) {
    struct enc_ctx *e = p;
    encoder_forward(MEM_HOST, e->out, e->inp, e->wte, e->wpe, B, T, C);
    return dot_loss(e->out, e->g, (size_t)N * C);
}

static void test_encoder(void **state) {
    (void)state;
    /* token 3 appears 4 times and token 7 three times: their dwte rows must
     * accumulate every occurrence; tokens 2, 4, 6, 8, 9 never appear. */
    const int32_t inp[N] = {3, 7, 3, 0, 10, 7, 7, 1, 3, 3};
    float *wte = alloc_f(V * C), *wpe = alloc_f(T * C), *out = alloc_f(N * C), *g = alloc_f(N * C);
    float *dwte = alloc_f(V * C), *dwpe = alloc_f(T * C);
    fill_uniform(wte, V * C, -1, 1, 10);
    fill_uniform(wpe, T * C, -1, 1, 11);
    fill_uniform(g, N * C, -1, 1, 12);
    const float pre = 0.5f; /* gradients accumulate: start from a known value */
    fill_const(dwte, V * C, pre);
    fill_const(dwpe, T * C, pre);

    encoder_forward(MEM_HOST, out, inp, wte, wpe, B, T, C);
    for (int bt = 0; bt < N; bt++)
        for (int c = 0; c < C; c++)
            assert_near(out[bt * C + c], wte[inp[bt] * C + c] + wpe[(bt % T) * C + c], 0.0f);

    encoder_backward(MEM_HOST, dwte, dwpe, g, inp, B, T, C);
    for (int i = 0; i < V * C; i++) dwte[i] -= pre;
    for (int i = 0; i < T * C; i++) dwpe[i] -= pre;
    /* direct check of the accumulation into the repeated row (token 3) */
    for (int c = 0; c < C; c++) {
        float want = g[0 * C + c] + g[2 * C + c] + g[8 * C + c] + g[9 * C + c];
        assert_near(dwte[3 * C + c], want, 1e-6f);
        assert_near(dwte[2 * C + c], 0.0f, 0.0f); /* unused token: untouched */
    }
    struct enc_ctx e = {out, wte, wpe, g, inp};
    assert_int_equal(gc_compare("encoder.dwte", enc_loss, &e, wte, dwte, V * C, GC_H, 1), 0);
    assert_int_equal(gc_compare("encoder.dwpe", enc_loss, &e, wpe, dwpe, T * C, GC_H, 1), 0);
    free(wte), free(wpe), free(out), free(g), free(dwte), free(dwpe);
}

/* -------------------------------------------------------------- layernorm */

struct ln_ctx { float *out, *mean, *rstd, *inp, *w, *b, *g; };
static double ln_loss(void *p) {
    struct ln_ctx *l = p;
    struct exec_ctx fc = {0};
    layernorm_forward(l->out, l->mean, l->rstd, l->inp, l->w, l->b, N, C, &fc);
    return dot_loss(l->out, l->g, (size_t)N * C);
}

static void test_layernorm_grad(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    float *inp = alloc_f(N * C), *w = alloc_f(C), *b = alloc_f(C), *out = alloc_f(N * C), *g = alloc_f(N * C);
    float *mean = alloc_f(N), *rstd = alloc_f(N);
    float *dinp = alloc_f(N * C), *dinp0 = alloc_f(N * C), *dw = alloc_f(C), *db = alloc_f(C);
    fill_uniform(inp, N * C, -2, 2, 20);
    fill_uniform(w, C, 0.5f, 1.5f, 21);
    fill_uniform(b, C, -0.5f, 0.5f, 22);
    fill_uniform(g, N * C, -1, 1, 23);
    const float pre = 0.25f;
    fill_const(dinp, N * C, pre); /* dinp accumulates (residual stream) */
    fill_const(dw, C, pre);
    fill_const(db, C, pre);

    layernorm_forward(out, mean, rstd, inp, w, b, N, C, &fc);
    layernorm_backward(dinp, dw, db, g, inp, w, mean, rstd, N, C, &fc);
    layernorm_backward(dinp0, dw, db, g, inp, w, mean, rstd, N, C, &fc); /* dinp0 from zero; dw, db twice */
    for (int i = 0; i < N * C; i++) {
        assert_near(dinp[i], pre + dinp0[i], 1e-6f); /* was added to, not overwritten */
    }
    for (int c = 0; c < C; c++) { /* two backward calls accumulated on top of pre */
        dw[c] = (dw[c] - pre) / 2;
        db[c] = (db[c] - pre) / 2;
    }
    struct ln_ctx l = {out, mean, rstd, inp, w, b, g};
    assert_int_equal(gc_compare("layernorm.dinp", ln_loss, &l, inp, dinp0, N * C, GC_H, 1), 0);
    assert_int_equal(gc_compare("layernorm.dw", ln_loss, &l, w, dw, C, GC_H, 1), 0);
    assert_int_equal(gc_compare("layernorm.db", ln_loss, &l, b, db, C, GC_H, 1), 0);
    free(inp), free(w), free(b), free(out), free(g), free(mean), free(rstd);
    free(dinp), free(dinp0), free(dw), free(db);
}

static void test_layernorm_normalises(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    float *inp = alloc_f(N * C), *w = alloc_f(C), *b = alloc_f(C), *out = alloc_f(N * C);
    float *mean = alloc_f(N), *rstd = alloc_f(N);
    fill_uniform(inp, N * C, -3, 3, 30);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) inp[i * C + c] += (float)(i - 4); /* row offsets */
    fill_const(w, C, 1.0f);
    layernorm_forward(out, mean, rstd, inp, w, b, N, C, &fc);
    for (int i = 0; i < N; i++) {
        double m = 0, v = 0, rm = 0, rv = 0;
        for (int c = 0; c < C; c++) rm += inp[i * C + c];
        rm /= C;
        for (int c = 0; c < C; c++) rv += (inp[i * C + c] - rm) * (inp[i * C + c] - rm);
        rv /= C;
        assert_near(mean[i], rm, 1e-5);
        assert_near(rstd[i], 1.0 / sqrt(rv + 1e-5), 1e-5 / sqrt(rv));
        for (int c = 0; c < C; c++) m += out[i * C + c];
        m /= C;
        for (int c = 0; c < C; c++) v += (out[i * C + c] - m) * (out[i * C + c] - m);
        v /= C;
        assert_true(fabs(m) < 1e-6);
        /* var = rv / (rv + eps); rv >= ~0.5 here so eps moves it by < 2e-5 */
        assert_near(v, 1.0, 1e-4);
    }
    free(inp), free(w), free(b), free(out), free(mean), free(rstd);
}

/* ----------------------------------------------------------------- matmul */

struct mm_ctx { float *out, *inp, *w, *bias, *g; };
static double mm_loss(void *p) {
    struct mm_ctx *m = p;
    struct exec_ctx fc = {0};
    matmul_forward(m->out, m->inp, m->w, m->bias, N, C, OC, &fc);
    return dot_loss(m->out, m->g, (size_t)N * OC);
}

static void check_matmul(int with_bias) {
    struct exec_ctx fc = {0};
    float *inp = alloc_f(N * C), *w = alloc_f(OC * C), *bias = with_bias ? alloc_f(OC) : NULL;
    float *out = alloc_f(N * OC), *g = alloc_f(N * OC);
    float *dinp = alloc_f(N * C), *dw = alloc_f(OC * C), *db = with_bias ? alloc_f(OC) : NULL;
    fill_uniform(inp, N * C, -1, 1, 40);
    fill_uniform(w, OC * C, -1, 1, 41);
    if (bias) fill_uniform(bias, OC, -1, 1, 42);
    fill_uniform(g, N * OC, -1, 1, 43);

    matmul_forward(out, inp, w, bias, N, C, OC, &fc);
    assert_near(fc.gemm, 2.0 * N * C * OC, 0.0);
    for (int i = 0; i < N; i++) /* naive double reference */
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += (double)inp[i * C + c] * w[o * C + c];
            assert_near(out[i * OC + o], s, 1e-5);
        }

    const float sentinel = 1e3f, pre = 0.5f;
    fill_const(dinp, N * C, sentinel); /* dinp is overwritten */
    fill_const(dw, OC * C, pre);       /* dweight, dbias accumulate */
    if (db) fill_const(db, OC, pre);
    matmul_backward(dinp, dw, db, g, inp, w, N, C, OC, &fc);
    for (int i = 0; i < OC * C; i++) dw[i] -= pre;
    if (db)
        for (int o = 0; o < OC; o++) db[o] -= pre;

    struct mm_ctx m = {out, inp, w, bias, g};
    assert_int_equal(gc_compare("matmul.dinp", mm_loss, &m, inp, dinp, N * C, GC_H, 1), 0);
    assert_int_equal(gc_compare("matmul.dw", mm_loss, &m, w, dw, OC * C, GC_H, 1), 0);
    if (bias) assert_int_equal(gc_compare("matmul.db", mm_loss, &m, bias, db, OC, GC_H, 1), 0);
    free(inp), free(w), free(bias), free(out), free(g), free(dinp), free(dw), free(db);
}

static void test_matmul_bias(void **state) { (void)state; check_matmul(1); }
static void test_matmul_nobias(void **state) { (void)state; check_matmul(0); }

/* ------------------------------------------------------- gelu & residual */

static double gelu_ref(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void test_gelu_forward_formula(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    float x[] = {-6.0f, -3.0f, -1.0f, -0.5f, -1e-3f, 0.0f, 1e-3f, 0.5f, 1.0f, 2.0f, 3.0f, 6.0f};
    enum { NX = sizeof x / sizeof x[0] };
    float y[NX];
    gelu_forward(y, x, NX, &fc);
    for (int i = 0; i < NX; i++) assert_near(y[i], gelu_ref(x[i]), 1e-6 + 1e-6 * fabs(gelu_ref(x[i])));
    assert_near(y[5], 0.0f, 0.0f);
    assert_near(y[8], 0.8411920f, 1e-6f); /* 0.5 (1 + tanh(sqrt(2/pi) 1.044715)) */
    assert_near(y[11], 6.0f, 1e-6f);      /* ~identity for large x, ~0 for very negative */
    assert_near(y[0], 0.0f, 1e-6f);
}

struct gelu_ctx { float *out, *inp, *g; };
static double gelu_loss(void *p) {
    struct gelu_ctx *c = p;
    struct exec_ctx fc = {0};
    gelu_forward(c->out, c->inp, N * C, &fc);
    return dot_loss(c->out, c->g, (size_t)N * C);
}

static void test_gelu_grad(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    float *inp = alloc_f(N * C), *out = alloc_f(N * C), *g = alloc_f(N * C), *dinp = alloc_f(N * C);
    float *inplace = alloc_f(N * C);
    fill_uniform(inp, N * C, -4, 4, 50);
    fill_uniform(g, N * C, -1, 1, 51);
    fill_const(dinp, N * C, 1e3f); /* overwritten */
    gelu_backward(dinp, inp, g, N * C, &fc);
    memcpy(inplace, g, sizeof(float) * N * C); /* dinp may alias dout */
    gelu_backward(inplace, inp, inplace, N * C, &fc);
    assert_memory_equal(inplace, dinp, sizeof(float) * N * C);
    struct gelu_ctx c = {out, inp, g};
    assert_int_equal(gc_compare("gelu.dinp", gelu_loss, &c, inp, dinp, N * C, GC_H, 1), 0);
    free(inp), free(out), free(g), free(dinp), free(inplace);
}

/* The forms on saved bf16 copies: the bits of their compositions (round
 * and narrow, gelu_forward, narrow; widen, gelu_backward), and not the
 * unrounded GELU's (the rounding happened). */
static void test_gelu_bf16_forms(void **state) {
    (void)state;
    enum { NB = 1001 };
    static float pre[NB], rounded[NB], g[NB], y[NB], d[NB], want[NB];
    static bf16 out[NB], store[NB], out_w[NB], store_w[NB];
    struct exec_ctx fa = {0}, fb = {0};
    fill_uniform(pre, NB, -6, 6, 60);
    fill_uniform(d, NB, -1, 1, 61);
    gelu_forward_bf16(out, store, pre, NB, &fa);
    memcpy(rounded, pre, sizeof pre);
    buf_round_narrow(MEM_HOST, store_w, rounded, NB);
    gelu_forward(g, rounded, NB, &fb);
    buf_narrow(MEM_HOST, out_w, g, NB);
    assert_memory_equal(store, store_w, sizeof store);
    assert_memory_equal(out, out_w, sizeof out);
    gelu_forward(y, pre, NB, &fb);
    buf_narrow(MEM_HOST, out_w, y, NB);
    assert_memory_not_equal(out, out_w, sizeof out);
    memcpy(y, d, sizeof d); /* dinp aliases dout */
    gelu_backward_bf16(y, store, y, NB, &fa);
    gelu_backward(want, rounded, d, NB, &fb);
    assert_memory_equal(y, want, sizeof y);
    assert_true(fa.other == (8.0 + 16.0) * NB && fb.other == (8.0 + 8.0 + 16.0) * NB);
}

/* There is no residual_backward: d(a+b)/da = d(a+b)/db = identity, so the
 * analytic gradient for both inputs is dout itself (the model adds it into
 * the residual stream). Check the forward and that identity numerically. */
struct res_ctx { float *out, *a, *b, *g; };
static double res_loss(void *p) {
    struct res_ctx *r = p;
    struct exec_ctx fc = {0};
    residual_forward(r->out, r->a, r->b, N * C, &fc);
    return dot_loss(r->out, r->g, (size_t)N * C);
}

static void test_residual(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    float *a = alloc_f(N * C), *b = alloc_f(N * C), *out = alloc_f(N * C), *g = alloc_f(N * C);
    fill_uniform(a, N * C, -1, 1, 60);
    fill_uniform(b, N * C, -1, 1, 61);
    fill_uniform(g, N * C, -1, 1, 62);
    residual_forward(out, a, b, N * C, &fc);
    for (int i = 0; i < N * C; i++) assert_near(out[i], a[i] + b[i], 0.0f);
    struct res_ctx r = {out, a, b, g};
    assert_int_equal(gc_compare("residual.da", res_loss, &r, a, g, N * C, GC_H, 1), 0);
    assert_int_equal(gc_compare("residual.db", res_loss, &r, b, g, N * C, GC_H, 1), 0);
    free(a), free(b), free(out), free(g);
}

/* ----------------------------------------------------------- crossentropy */

/* mean loss over N rows, logits untouched (dloss = 0 must not write them) */
struct ce_ctx { float *logits, *scratch, *losses; const int32_t *targets; };
static double ce_loss(void *p) {
    struct ce_ctx *c = p;
    struct exec_ctx fc = {0};
    memcpy(c->scratch, c->logits, sizeof(float) * N * VP);
    return crossentropy_forward_backward(c->scratch, c->losses, c->targets, N, V, VP, 0.0f, &fc) / N;
}

static void make_ce_inputs(float *logits, int32_t *targets, float row3_offset) {
    fill_uniform(logits, N * VP, -3, 3, 70);
    for (int i = 0; i < N; i++) {
        targets[i] = (int32_t)(rng_u32(1234, 71, (uint64_t)i) % V);
        for (int v = V; v < VP; v++) logits[i * VP + v] = 300.0f; /* padding: ignored, also by the max */
    }
    for (int v = 0; v < V; v++) logits[3 * VP + v] += row3_offset; /* a row that needs the max shift */
}

static void test_crossentropy_loss(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    float *logits = alloc_f(N * VP), *work = alloc_f(N * VP), *losses = alloc_f(N);
    int32_t targets[N];
    make_ce_inputs(logits, targets, 1000.0f);
    double ref_total = 0;
    for (int i = 0; i < N; i++) { /* naive double log-sum-exp */
        const float *l = logits + i * VP;
        double m = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) m = l[v] > m ? l[v] : m;
        for (int v = 0; v < V; v++) s += exp((double)l[v] - m);
        double ref = log(s) + m - l[targets[i]];
        ref_total += ref;
        losses[i] = (float)ref;
    }
    float *ref_losses = alloc_f(N);
    memcpy(ref_losses, losses, sizeof(float) * N);
    memcpy(work, logits, sizeof(float) * N * VP);
    double total = crossentropy_forward_backward(work, losses, targets, N, V, VP, 0.0f, &fc);
    assert_memory_equal(work, logits, sizeof(float) * N * VP); /* dloss = 0: logits untouched */
    assert_true(fabs(total - ref_total) <= 1e-4 * fabs(ref_total));
    /* the 1000-offset row loses precision in fp32 (ulp(1000) = 6e-5) */
    for (int i = 0; i < N; i++) assert_near(losses[i], ref_losses[i], 1e-4 + 1e-4 * ref_losses[i]);
    double total2 = crossentropy_forward_backward(work, losses, targets, N, V, VP, 1.0f / N, &fc);
    assert_true(fabs(total2 - ref_total) <= 1e-4 * fabs(ref_total)); /* same sum with backward on */
    free(logits), free(work), free(losses), free(ref_losses);
}

static void test_crossentropy_grad(void **state) {
    (void)state;
    struct exec_ctx fc = {0};
    float *logits = alloc_f(N * VP), *dlogits = alloc_f(N * VP), *scratch = alloc_f(N * VP), *losses = alloc_f(N);
    int32_t targets[N];
    /* no 1000 offset here: at |logit| ~ 1000 the fp32 loss itself is only
     * good to ulp(1000) = 6e-5, too coarse for finite differences */
    make_ce_inputs(logits, targets, 0.0f);
    memcpy(dlogits, logits, sizeof(float) * N * VP);
    crossentropy_forward_backward(dlogits, losses, targets, N, V, VP, 1.0f / N, &fc); /* in place */
    for (int i = 0; i < N; i++) {
        double rowsum = 0;
        for (int v = V; v < VP; v++) assert_near(dlogits[i * VP + v], 0.0f, 0.0f); /* padding */
        for (int v = 0; v < V; v++) rowsum += dlogits[i * VP + v];
        assert_near(rowsum, 0.0, 1e-7); /* softmax - onehot sums to 0 */
        assert_true(dlogits[i * VP + targets[i]] < 0.0f);
        /* the closed form (softmax - onehot) / N in double: tighter than FD,
         * which matters because these gradients are only ~0.1 / N */
        const float *l = logits + i * VP;
        double m = -INFINITY, z = 0;
        for (int v = 0; v < V; v++) m = l[v] > m ? l[v] : m;
        for (int v = 0; v < V; v++) z += exp((double)l[v] - m);
        for (int v = 0; v < V; v++)
            assert_near(dlogits[i * VP + v], (exp((double)l[v] - m) / z - (v == targets[i])) / N, 1e-7);
    }
    /* FD over the real (non-padding) columns; padding is checked above */
    struct ce_ctx c = {logits, scratch, losses, targets};
    int bad = 0;
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "ce.dlogits[%d]", i);
        bad += gc_compare(name, ce_loss, &c, logits + i * VP, dlogits + i * VP, V, GC_H, i == 0);
    }
    assert_int_equal(bad, 0);
    free(logits), free(dlogits), free(scratch), free(losses);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_rejects_wrong_gradients),
        cmocka_unit_test(test_encoder),
        cmocka_unit_test(test_layernorm_grad),
        cmocka_unit_test(test_layernorm_normalises),
        cmocka_unit_test(test_matmul_bias),
        cmocka_unit_test(test_matmul_nobias),
        cmocka_unit_test(test_gelu_forward_formula),
        cmocka_unit_test(test_gelu_grad),
        cmocka_unit_test(test_gelu_bf16_forms),
        cmocka_unit_test(test_residual),
        cmocka_unit_test(test_crossentropy_loss),
        cmocka_unit_test(test_crossentropy_grad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
