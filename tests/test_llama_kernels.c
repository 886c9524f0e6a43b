/* LLaMA 3's row and elementwise kernels (model/cpu/rmsnorm.c, rope.c,
 * swiglu.c): the fp32 forms against double-precision references written
 * here, every backward against finite differences (gradcheck.h), the bf16
 * forms against the fp32 ones within layers.h's stated bound (and their
 * "widen, fp32 kernel, narrow" bits), RoPE's rotation against its
 * complex-number form and, with LLaMA 3.1's scaling, against numbers
 * computed by the PyTorch reference (bench/llama3_fixture.py --rope). */
#include <complex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gradcheck.h"
#include "llama_layers.h"
#include "llama_check.h"

enum { N = 6, C = 8, HS = 8, NH = 2, KV = 1, ROW = (NH + 2 * KV) * HS };
#define RMS_EPS 1e-5f
#define PREFILL 0.25f   /* accumulated gradients start here: proves they are added to */
#define FWD_RTOL 2e-6   /* fp32 kernel vs double: a few fp32 roundings of O(1) values */
#define NORM_RTOL 1e-6  /* a rotation keeps a pair's norm up to fp32 rounding */

/* ---------------------------------------------------------------- RMSNorm */

struct rms_ctx { float *inp, *w, *g, *out, *rstd; };

static double rms_loss(void *p) {
    struct rms_ctx *r = p;
    struct exec_ctx fc = {0};
    rmsnorm_forward(r->out, r->rstd, r->inp, r->w, RMS_EPS, N, C, &fc);
    return dot_loss(r->out, r->g, N * C);
}

static void test_rmsnorm_forward_matches_double(void **state) {
    (void)state;
    float inp[N * C], w[C], out[N * C], rstd[N];
    fill_uniform(inp, N * C, -2.0f, 2.0f, 1);
    fill_uniform(w, C, 0.5f, 1.5f, 2);
    struct exec_ctx fc = {0};
    rmsnorm_forward(out, rstd, inp, w, RMS_EPS, N, C, &fc);
    for (int i = 0; i < N; i++) {
        double ms = 0;
        for (int c = 0; c < C; c++) ms += (double)inp[i * C + c] * inp[i * C + c];
        double s = 1.0 / sqrt(ms / C + RMS_EPS);
        assert_near(rstd[i], s, FWD_RTOL * s);
        for (int c = 0; c < C; c++) {
            double ref = inp[i * C + c] * s * w[c];
            assert_near(out[i * C + c], ref, FWD_RTOL * (fabs(ref) + 1.0));
        }
    }
    assert_true(fc.other > 0);
}

static void test_rmsnorm_grad(void **state) {
    (void)state;
    float inp[N * C], w[C], g[N * C], out[N * C], rstd[N], dinp[N * C], dw[C];
    fill_uniform(inp, N * C, -2.0f, 2.0f, 3);
    fill_uniform(w, C, 0.5f, 1.5f, 4);
    fill_uniform(g, N * C, -1.0f, 1.0f, 5);
    fill_const(dinp, N * C, PREFILL);
    fill_const(dw, C, PREFILL);
    struct rms_ctx r = {inp, w, g, out, rstd};
    struct exec_ctx fc = {0};
    rmsnorm_forward(out, rstd, inp, w, RMS_EPS, N, C, &fc);
    rmsnorm_backward(dinp, dw, g, inp, w, rstd, N, C, &fc);
    for (int i = 0; i < N * C; i++) dinp[i] -= PREFILL;
    for (int c = 0; c < C; c++) dw[c] -= PREFILL;
    assert_int_equal(gc_compare("rmsnorm.dinp", rms_loss, &r, inp, dinp, N * C, GC_H, 1), 0);
    assert_int_equal(gc_compare("rmsnorm.dw", rms_loss, &r, w, dw, C, GC_H, 1), 0);
}

static void test_rmsnorm_bf16_within_bound(void **state) {
    (void)state;
    float inp[N * C], w[C], g[N * C], out[N * C], rstd[N], rstd16[N], dinp[N * C] = {0}, dw[C] = {0}, dw16[C] = {0};
    bf16 inp16[N * C], out16[N * C], dinp16[N * C] = {0};
    fill_uniform(inp, N * C, -2.0f, 2.0f, 6);
    fill_uniform(w, C, 0.5f, 1.5f, 7);
    fill_uniform(g, N * C, -1.0f, 1.0f, 8);
    narrow_inputs(inp16, inp, N * C);
    struct exec_ctx fc = {0};
    rmsnorm_forward(out, rstd, inp, w, RMS_EPS, N, C, &fc);
    rmsnorm_forward_bf16(out16, rstd16, inp16, w, RMS_EPS, N, C, &fc);
    int not_bits;
    assert_int_equal(bf16_outside_bound(out16, out, N * C, &not_bits), 0);
    assert_int_equal(not_bits, 0);
    assert_memory_equal(rstd, rstd16, sizeof rstd);
    rmsnorm_backward(dinp, dw, g, inp, w, rstd, N, C, &fc);
    rmsnorm_backward_bf16(act_out_bf16(dinp16, MEM_HOST), dw16, g, inp16, w, rstd16, N, C, &fc);
    assert_int_equal(bf16_outside_bound(dinp16, dinp, N * C, &not_bits), 0);
    assert_int_equal(not_bits, 0);
    assert_memory_equal(dw, dw16, sizeof dw);
    float dinp32[N * C] = {0}; /* an fp32 dinp: the fp32 form's bits */
    rmsnorm_backward_bf16(act_out_f32(dinp32, MEM_HOST), dw16, g, inp16, w, rstd16, N, C, &fc);
    assert_memory_equal(dinp32, dinp, sizeof dinp);
}

/* ------------------------------------------------------------------- RoPE */

#define THETA_LLAMA2 10000.0f
#define THETA_LLAMA3 500000.0f
/* LLaMA 3.1's scaling constants (the reference's apply_scaling). */
static const struct rope_config ROPE_31 = {.theta = THETA_LLAMA3, .scaled = true, .factor = 8.0,
                                           .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                                           .original_context = 8192.0};
static const struct rope_config ROPE_PLAIN = {.theta = THETA_LLAMA2};

/* Positions per row, as a context-parallel rank would hold them: not one
 * run from 0 (load-balanced chunks from both ends of the sequence). */
static const int32_t POS[N] = {0, 1, 2, 13, 14, 15};

/* The reference's form: pair i of a head as the complex x[2i] + i x[2i+1]
 * times e^{i pos freq_i}, in double. */
static void rope_complex_ref(double *out, const float *x, const float *freqs, int32_t pos) {
    for (int i = 0; i < HS / 2; i++) {
        double complex z = (x[2 * i] + I * x[2 * i + 1]) * cexp(I * ((double)pos * freqs[i]));
        out[2 * i] = creal(z);
        out[2 * i + 1] = cimag(z);
    }
}

static void test_rope_freqs_by_hand(void **state) {
    (void)state;
    float f[HS / 2];
    rope_freqs(f, HS, &ROPE_PLAIN);
    /* theta^(-2i/hs) for hs 8: 1, 10000^-1/4 = 0.1, 10000^-1/2 = 0.01, 10000^-3/4 = 0.001 */
    const double want[HS / 2] = {1.0, 0.1, 0.01, 0.001};
    for (int i = 0; i < HS / 2; i++) assert_near(f[i], want[i], FWD_RTOL * want[i]);
}

/* Rotates q and k heads of GQA rows in place; v's columns are untouched;
 * each pair keeps its norm; every head equals the complex form. */
static void test_rope_matches_complex_form(void **state) {
    (void)state;
    float qkv[N * ROW], orig[N * ROW], f[HS / 2];
    fill_uniform(qkv, N * ROW, -1.0f, 1.0f, 9);
    memcpy(orig, qkv, sizeof qkv);
    rope_freqs(f, HS, &ROPE_PLAIN);
    struct exec_ctx fc = {0};
    rope_forward(qkv, qkv, ROW, f, POS, N, NH + KV, HS, &fc);
    for (int r = 0; r < N; r++) {
        for (int h = 0; h < NH + KV; h++) {
            double ref[HS];
            const float *x = orig + r * ROW + h * HS, *y = qkv + r * ROW + h * HS;
            rope_complex_ref(ref, x, f, POS[r]);
            for (int d = 0; d < HS; d++) assert_near(y[d], ref[d], FWD_RTOL);
            for (int i = 0; i < HS / 2; i++) {
                double n0 = hypot(x[2 * i], x[2 * i + 1]), n1 = hypot(y[2 * i], y[2 * i + 1]);
                assert_near(n1, n0, NORM_RTOL * (n0 + 1.0));
            }
        }
        for (int d = (NH + KV) * HS; d < ROW; d++) assert_true(qkv[r * ROW + d] == orig[r * ROW + d]);
    }
}

/* Hand-computed: position 0 is the identity; position 1 with freq 1 turns
 * (1, 0) into (cos 1, sin 1); position 3 with freq 0.1 (pair 1) turns
 * (0, 1) into (-sin 0.3, cos 0.3). */
static void test_rope_hand_positions(void **state) {
    (void)state;
    float f[HS / 2], x[HS] = {1, 0, 0, 1, 0, 0, 0, 0}, y[HS];
    rope_freqs(f, HS, &ROPE_PLAIN);
    struct exec_ctx fc = {0};
    const int32_t p0 = 0, p1 = 1, p3 = 3;
    rope_forward(y, x, HS, f, &p0, 1, 1, HS, &fc);
    assert_memory_equal(y, x, sizeof x);
    rope_forward(y, x, HS, f, &p1, 1, 1, HS, &fc);
    assert_near(y[0], cos(1.0), FWD_RTOL);
    assert_near(y[1], sin(1.0), FWD_RTOL);
    rope_forward(y, x, HS, f, &p3, 1, 1, HS, &fc);
    assert_near(y[2], -sin(0.3), FWD_RTOL);
    assert_near(y[3], cos(0.3), FWD_RTOL);
}

/* bench/llama3_fixture.py --rope: theta 500000 with LLaMA 3.1's scaling,
 * hs 8, x = (1..8), at positions 0, 1, 7, 100, 5000. The four frequencies
 * fall in each of apply_scaling's regions: kept (1, 0.0376), blended
 * (5.2e-4), divided by 8 (6.6e-6). */
enum { ROPE_REF_POSITIONS = 5 };
static const float ROPE_REF_FREQS[HS / 2] = {1.000000000e+00f, 3.760603070e-02f, 5.248460802e-04f, 6.647869668e-06f};
static const int32_t ROPE_REF_POS[ROPE_REF_POSITIONS] = {0, 1, 7, 100, 5000};
static const float ROPE_REF_OUT[ROPE_REF_POSITIONS][HS] = {
    {1.000000000e+00f, 2.000000000e+00f, 3.000000000e+00f, 4.000000000e+00f, 5.000000000e+00f, 6.000000000e+00f,
     7.000000000e+00f, 8.000000000e+00f},
    {-1.142639637e+00f, 1.922075510e+00f, 2.847490311e+00f, 4.109963417e+00f, 4.996850491e+00f, 6.002623081e+00f,
     6.999946594e+00f, 8.000046730e+00f},
    {-5.600709319e-01f, 2.164791107e+00f, 1.855804324e+00f, 4.642842770e+00f, 4.977922916e+00f, 6.018329144e+00f,
     6.999627590e+00f, 8.000326157e+00f},
    {1.875050187e+00f, 1.218272090e+00f, -1.224417686e-01f, -4.998500824e+00f, 4.678351879e+00f, 6.254040718e+00f,
     6.994679928e+00f, 8.004652023e+00f},
    {2.130601168e+00f, -6.786296368e-01f, 4.476065159e+00f, 2.228192568e+00f, -7.313169956e+00f, -2.741814137e+00f,
     6.730267525e+00f, 8.228213310e+00f}};
/* Both sides round the angle to fp32 the same way; what differs is cosf
 * and sinf against PyTorch's (an ulp or two) and the products' order:
 * a few fp32 ulps of values up to 8. */
#define ROPE_REF_ATOL 1e-5

static void test_rope_scaled_matches_pytorch(void **state) {
    (void)state;
    float f[HS / 2], x[ROPE_REF_POSITIONS * HS], y[ROPE_REF_POSITIONS * HS];
    rope_freqs(f, HS, &ROPE_31);
    for (int i = 0; i < HS / 2; i++) assert_near(f[i], ROPE_REF_FREQS[i], FWD_RTOL * ROPE_REF_FREQS[i]);
    for (int r = 0; r < ROPE_REF_POSITIONS; r++)
        for (int d = 0; d < HS; d++) x[r * HS + d] = (float)(d + 1);
    struct exec_ctx fc = {0};
    rope_forward(y, x, HS, f, ROPE_REF_POS, ROPE_REF_POSITIONS, 1, HS, &fc);
    for (int r = 0; r < ROPE_REF_POSITIONS; r++)
        for (int d = 0; d < HS; d++) assert_near(y[r * HS + d], ROPE_REF_OUT[r][d], ROPE_REF_ATOL);
}

struct rope_ctx { float *inp, *out, *g, *freqs; };

static double rope_loss(void *p) {
    struct rope_ctx *r = p;
    struct exec_ctx fc = {0};
    rope_forward(r->out, r->inp, ROW, r->freqs, POS, N, NH + KV, HS, &fc);
    return dot_loss(r->out, r->g, N * ROW);
}

static void test_rope_grad(void **state) {
    (void)state;
    float inp[N * ROW], out[N * ROW] = {0}, g[N * ROW], din[N * ROW], f[HS / 2];
    fill_uniform(inp, N * ROW, -1.0f, 1.0f, 10);
    fill_uniform(g, N * ROW, -1.0f, 1.0f, 11);
    for (int r = 0; r < N; r++) /* the v columns: not RoPE's, their gradient passes untouched */
        for (int d = (NH + KV) * HS; d < ROW; d++) g[r * ROW + d] = 0.0f;
    rope_freqs(f, HS, &ROPE_31);
    memcpy(din, g, sizeof g);
    struct exec_ctx fc = {0};
    rope_backward(din, din, ROW, f, POS, N, NH + KV, HS, &fc); /* in place, as the model will */
    struct rope_ctx r = {inp, out, g, f};
    assert_int_equal(gc_compare("rope.dinp", rope_loss, &r, inp, din, N * ROW, GC_H, 1), 0);
}

static void test_rope_bf16_within_bound(void **state) {
    (void)state;
    float x[N * ROW], y[N * ROW], dx[N * ROW], f[HS / 2];
    bf16 x16[N * ROW], y16[N * ROW], dx16[N * ROW];
    fill_uniform(x, N * ROW, -2.0f, 2.0f, 12);
    narrow_inputs(x16, x, N * ROW);
    rope_freqs(f, HS, &ROPE_31);
    struct exec_ctx fc = {0};
    memcpy(y, x, sizeof x);
    memcpy(y16, x16, sizeof x16);
    rope_forward(y, x, ROW, f, POS, N, NH + KV, HS, &fc);
    rope_forward_bf16(y16, x16, ROW, f, POS, N, NH + KV, HS, &fc);
    int not_bits;
    assert_int_equal(bf16_outside_bound(y16, y, N * ROW, &not_bits), 0);
    assert_int_equal(not_bits, 0);
    memcpy(dx, x, sizeof x);
    memcpy(dx16, x16, sizeof x16);
    rope_backward(dx, x, ROW, f, POS, N, NH + KV, HS, &fc);
    rope_backward_bf16(dx16, x16, ROW, f, POS, N, NH + KV, HS, &fc);
    assert_int_equal(bf16_outside_bound(dx16, dx, N * ROW, &not_bits), 0);
    assert_int_equal(not_bits, 0);
}

/* ----------------------------------------------------------------- SwiGLU */

enum { SN = 40 };

static double silu_ref(double g) { return g / (1.0 + exp(-g)); }

struct swiglu_ctx { float *up, *gate, *out, *g; };

static double swiglu_loss(void *p) {
    struct swiglu_ctx *s = p;
    struct exec_ctx fc = {0};
    swiglu_forward(s->out, s->up, s->gate, SN, &fc);
    return dot_loss(s->out, s->g, SN);
}

static void test_swiglu_forward_matches_double(void **state) {
    (void)state;
    float up[SN], gate[SN], out[SN];
    fill_uniform(up, SN, -3.0f, 3.0f, 13);
    fill_uniform(gate, SN, -6.0f, 6.0f, 14);
    struct exec_ctx fc = {0};
    swiglu_forward(out, up, gate, SN, &fc);
    for (int i = 0; i < SN; i++) {
        double ref = silu_ref(gate[i]) * up[i];
        assert_near(out[i], ref, FWD_RTOL * (fabs(ref) + 1.0));
    }
}

static void test_swiglu_grad(void **state) {
    (void)state;
    float up[SN], gate[SN], out[SN], g[SN], dup[SN], dgate[SN];
    fill_uniform(up, SN, -2.0f, 2.0f, 15);
    fill_uniform(gate, SN, -3.0f, 3.0f, 16);
    fill_uniform(g, SN, -1.0f, 1.0f, 17);
    struct exec_ctx fc = {0};
    swiglu_backward(dup, dgate, g, up, gate, SN, &fc);
    struct swiglu_ctx s = {up, gate, out, g};
    assert_int_equal(gc_compare("swiglu.dup", swiglu_loss, &s, up, dup, SN, GC_H, 1), 0);
    assert_int_equal(gc_compare("swiglu.dgate", swiglu_loss, &s, gate, dgate, SN, GC_H, 1), 0);
}

static void test_swiglu_bf16_within_bound(void **state) {
    (void)state;
    float up[SN], gate[SN], g[SN], out[SN], dup[SN], dgate[SN], dup32[SN], dgate32[SN];
    bf16 up16[SN], gate16[SN], g16[SN], out16[SN], dup16[SN], dgate16[SN];
    fill_uniform(up, SN, -2.0f, 2.0f, 18);
    fill_uniform(gate, SN, -3.0f, 3.0f, 19);
    fill_uniform(g, SN, -1.0f, 1.0f, 20);
    narrow_inputs(up16, up, SN);
    narrow_inputs(gate16, gate, SN);
    narrow_inputs(g16, g, SN);
    struct exec_ctx fc = {0};
    int not_bits;
    swiglu_forward(out, up, gate, SN, &fc);
    swiglu_forward_bf16(out16, up16, gate16, SN, &fc);
    assert_int_equal(bf16_outside_bound(out16, out, SN, &not_bits), 0);
    assert_int_equal(not_bits, 0);
    swiglu_backward(dup, dgate, g, up, gate, SN, &fc);
    swiglu_backward_bf16(dup32, dgate32, g, up16, gate16, SN, &fc);
    assert_memory_equal(dup, dup32, sizeof dup); /* fp32 grads: the fp32 form's bits on the widened inputs */
    assert_memory_equal(dgate, dgate32, sizeof dgate);
    swiglu_backward_bf16_grads(dup16, dgate16, g16, up16, gate16, SN, &fc);
    assert_int_equal(bf16_outside_bound(dup16, dup, SN, &not_bits), 0);
    assert_int_equal(not_bits, 0);
    assert_int_equal(bf16_outside_bound(dgate16, dgate, SN, &not_bits), 0);
    assert_int_equal(not_bits, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_forward_matches_double),
        cmocka_unit_test(test_rmsnorm_grad),
        cmocka_unit_test(test_rmsnorm_bf16_within_bound),
        cmocka_unit_test(test_rope_freqs_by_hand),
        cmocka_unit_test(test_rope_matches_complex_form),
        cmocka_unit_test(test_rope_hand_positions),
        cmocka_unit_test(test_rope_scaled_matches_pytorch),
        cmocka_unit_test(test_rope_grad),
        cmocka_unit_test(test_rope_bf16_within_bound),
        cmocka_unit_test(test_swiglu_forward_matches_double),
        cmocka_unit_test(test_swiglu_grad),
        cmocka_unit_test(test_swiglu_bf16_within_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
