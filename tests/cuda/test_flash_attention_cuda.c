/* Flash attention (model/cuda/flash_attention.cu) against the CPU's plain
 * attention (model/cpu/attention.c on host memory; make cuda-test).
 *
 * Inputs are drawn afresh each run (the seed is printed): qkv uniform in
 * [-a, a), a = 1 or 3 (3 makes the softmax peaked), dout in [-1, 1); some
 * shapes round q, k, v, dout to bf16 first, so that only the kernels' own
 * roundings (the probabilities, dS) and summation order remain. Shapes
 * (B, T, NH, hs) cover T = 1, T not a multiple of the 64-row tile, one tile
 * exactly, 16 tiles, and the head sizes 32, 64, 128. Every device output
 * (out, lse, dqkv) and the backward's scratch is poisoned (0xff bytes, a
 * NaN) first, with a guard past its end that must survive: an element left
 * unwritten fails as a NaN. The backward gets the GPU's own out and lse, as
 * in training. Bounds, from the bf16 operands (8 significant bits; the
 * products accumulate in fp32):
 *   out, dq, dk, dv   normwise 1e-2: max |gpu - cpu| <= 1e-2 max |cpu|
 *                     over each tensor (dq, dk, dv each on its own)
 *   lse               1e-2 absolute, against log-sum-exp in double
 * (At T = 1 the exact dq and dk are 0: they are held to 1e-2 of the size of
 * their terms instead, see test_against_cpu.) Every error reached is
 * printed. On an H100 (5 runs, fresh seeds) the worst were 6.0e-3 normwise
 * (dq, fp32 inputs; about 3e-3 with bf16 inputs) and 2.1e-3 for lse.
 * Also: two runs give the same bits (no atomics), the FLOP formulas on a
 * shape counted by hand, the model FLOPs equal to what the CPU attention
 * counts, and bad shapes (unsupported head sizes among them) refused with a
 * non-zero return. Without a GPU the device tests say "skipped: no CUDA
 * device" and the program exits 0; the FLOP and refusal tests run
 * everywhere. test_timing prints ms per call at B=4, T=1024, NH=12, hs=64
 * (informational, not asserted).
 *
 * layers.h's attention_lse_* (--attention flash; model/cuda/
 * dispatch.c): on device memory they are flash_attention_* bit for
 * bit, adding flash_attention_flops' issued numbers to the counter (FLOP
 * for FLOP), and they meet the CPU's fp32 attention_lse (model/cpu/
 * attention_lse.c as cpu_attention_lse_*) within the bounds above; on host
 * memory they are cpu_attention_lse_* bit for bit (runs everywhere); their
 * one scratch size is flash_attention_backward_scratch's (everywhere); and
 * the trainer's start-up check (device_check_flash_attention) refuses the
 * head sizes the GPU kernel does not take (everywhere). */
#include <cuda_runtime.h>
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../model/cpu/layers_cpu.h"
#include "device.h"
#include "layers.h"
#include "dtype.h"
#include "rng.h"
#include "../../model/cuda/flash_attention.h"
#include "cuda_fixture.h"

#define REL_BOUND 1e-2 /* out, dq, dk, dv: normwise */
#define LSE_BOUND 1e-2 /* lse: absolute */

static uint64_t seed; /* set once in main, read by every test */

#define F(n) ((size_t)(n) * sizeof(float))

/* n uniform values in [-scale, scale), stream by stream. */
static float *rand_f32(size_t n, uint64_t stream, float scale) {
    float *x = malloc(F(n ? n : 1));
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = (rng_uniform(seed, stream, i) * 2.0f - 1.0f) * scale;
    return x;
}

/* A device buffer's contents on the host (the device copy kept), its guard checked. */
static float *peek(const float *dev, size_t bytes, const char *what) {
    unsigned char *h = malloc(bytes + GUARD);
    assert_non_null(h);
    assert_int_equal(cudaMemcpy(h, dev, bytes + GUARD, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = bytes; i < bytes + GUARD; i++)
        if (h[i] != 0xff) fail_msg("%s: byte %zu past the end of its %zu-byte output was written", what, i - bytes, bytes);
    return (float *)(void *)h;
}

/* Normwise error: max |gpu - cpu| / max(max |cpu|, at_least), and where
 * the worst element is (NaN, and at that element, when one is NaN). */
struct error {
    double ratio;
    size_t at;
};

static struct error normwise(const float *want, const float *got, size_t n, double at_least) {
    struct normwise e = normwise_diff(want, got, n, at_least);
    return (struct error){e.scale > 0.0 ? e.worst / e.scale : e.worst, e.at};
}

static void expect_within(const char *what, struct error e, double bound, const float *want, const float *got) {
    if (!(e.ratio <= bound))
        fail_msg("%s: element %zu: cpu %.9g, gpu %.9g: normwise error %.3g > %.0e", what, e.at, (double)want[e.at],
                 (double)got[e.at], e.ratio, bound);
}

/* Column block `part` (0 q, 1 k, 2 v) of a (B T, 3C) array, as (B T, C). */
static float *third(const float *x, int64_t BT, int64_t C, int part) {
    float *y = malloc(F(BT * C));
    assert_non_null(y);
    for (int64_t r = 0; r < BT; r++) memcpy(y + r * C, x + r * 3 * C + part * C, F(C));
    return y;
}

/* lse (B,NH,T) of the scaled causal scores, in double. */
static double *lse_reference(const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
    const int64_t hs = C / NH;
    const double scale = 1.0 / sqrt((double)hs);
    double *lse = malloc((size_t)(B * NH * T) * sizeof *lse), *s = malloc((size_t)T * sizeof *s);
    assert_non_null(lse);
    assert_non_null(s);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t i = 0; i < T; i++) {
                const float *q = qkv + (b * T + i) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j <= i; j++) {
                    const float *k = qkv + (b * T + j) * 3 * C + C + h * hs;
                    double dot = 0.0;
                    for (int64_t d = 0; d < hs; d++) dot += (double)q[d] * k[d];
                    s[j] = dot * scale;
                    mx = fmax(mx, s[j]);
                }
                for (int64_t j = 0; j <= i; j++) sum += exp(s[j] - mx);
                lse[(b * NH + h) * T + i] = mx + log(sum);
            }
    free(s);
    return lse;
}

/* Forward and backward on the device, fresh buffers; returns host copies. */
struct flash_run {
    float *out, *lse, *dqkv;
};

static struct flash_run run_flash(const float *qkv, const float *dout, int64_t B, int64_t T, int64_t C, int64_t NH) {
    const int64_t BT = B * T;
    float *d_qkv = dev_from(qkv, F(BT * 3 * C)), *d_dout = dev_from(dout, F(BT * C));
    float *d_out = dev_poisoned(F(BT * C)), *d_lse = dev_poisoned(F(B * NH * T)), *d_dqkv = dev_poisoned(F(BT * 3 * C));
    float *d_scratch = dev_poisoned(F(flash_attention_backward_scratch(B, T, NH)));
    assert_int_equal(flash_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH), 0);
    assert_int_equal(flash_attention_backward(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, C, NH), 0);
    struct flash_run r = {peek(d_out, F(BT * C), "out"), peek(d_lse, F(B * NH * T), "lse"),
                          peek(d_dqkv, F(BT * 3 * C), "dqkv")};
    peek(d_scratch, F(flash_attention_backward_scratch(B, T, NH)), "scratch"); /* its guard */
    cudaFree(d_qkv), cudaFree(d_dout), cudaFree(d_out), cudaFree(d_lse), cudaFree(d_dqkv), cudaFree(d_scratch);
    return r;
}

static void free_run(struct flash_run *r) { free(r->out), free(r->lse), free(r->dqkv); }

static void test_against_cpu(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    /* B, T, NH, hs, the inputs' amplitude (x10), and whether q, k, v, dout
     * are rounded to bf16 first (the kernels' conversions then exact) */
    const int64_t shapes[][6] = {{1, 1, 1, 64, 10, 0},    {2, 37, 3, 64, 10, 0},   {1, 128, 2, 64, 30, 1},
                                 {2, 257, 4, 64, 10, 0},  {1, 1024, 2, 64, 10, 0}, {1, 1024, 2, 64, 30, 1},
                                 {3, 130, 5, 32, 10, 0},  {3, 130, 5, 32, 30, 1},  {2, 200, 2, 128, 10, 0},
                                 {1, 64, 1, 128, 30, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t B = shapes[s][0], T = shapes[s][1], NH = shapes[s][2], hs = shapes[s][3], C = NH * hs, BT = B * T;
        const double amp = (double)shapes[s][4] / 10.0;
        const bool exact = shapes[s][5];
        float *qkv = rand_f32(BT * 3 * C, 10 + s, (float)amp), *dout = rand_f32(BT * C, 30 + s, 1.0f);
        if (exact) {
            for (int64_t i = 0; i < BT * 3 * C; i++) qkv[i] = round_to_bf16(qkv[i]);
            for (int64_t i = 0; i < BT * C; i++) dout[i] = round_to_bf16(dout[i]);
        }
        /* the CPU: the plain attention's probabilities, out and dqkv */
        float *out = malloc(F(BT * C)), *att = malloc(F(B * NH * T * T)), *dqkv = malloc(F(BT * 3 * C));
        float *scratch = malloc(F(attention_backward_scratch(B, T, NH)));
        assert_true(out && att && dqkv && scratch);
        struct exec_ctx fc = {0};
        attention_forward(out, att, qkv, B, T, C, NH, &fc);
        attention_backward(dqkv, dout, qkv, att, scratch, B, T, C, NH, &fc);
        double *lse = lse_reference(qkv, B, T, C, NH);
        struct flash_run g = run_flash(qkv, dout, B, T, C, NH);

        /* At T = 1 the exact dq and dk are 0 (a softmax over one key is 1
         * whatever the score) and the GPU's are bf16 rounding noise of dS =
         * dP - D, so they are measured against the size of their terms,
         * |dS| <= 2 hs max|dout| max|v|, times max|k| (or |q|) / sqrt(hs). */
        const double term_size = T == 1 ? 2.0 * hs * amp * amp / sqrt((double)hs) : 0.0;
        struct error e_out = normwise(out, g.out, BT * C, 0.0), e_d[3], e_lse = {0.0, 0};
        float *want[3], *got[3];
        for (int part = 0; part < 3; part++) {
            want[part] = third(dqkv, BT, C, part), got[part] = third(g.dqkv, BT, C, part);
            e_d[part] = normwise(want[part], got[part], BT * C, part < 2 ? term_size : 0.0);
        }
        for (int64_t i = 0; i < B * NH * T; i++) {
            const double d = fabs((double)g.lse[i] - lse[i]);
            if (!(d <= e_lse.ratio)) e_lse = (struct error){d, (size_t)i};
        }
        char what[128];
        int len = snprintf(what, sizeof what, "B %lld T %lld NH %lld hs %lld amplitude %.0f%s", (long long)B,
                           (long long)T, (long long)NH, (long long)hs, amp, exact ? " bf16 inputs" : "");
        printf("  %s: normwise out %.1e dq %.1e dk %.1e dv %.1e, lse %.1e absolute\n", what, e_out.ratio,
               e_d[0].ratio, e_d[1].ratio, e_d[2].ratio, e_lse.ratio);
        snprintf(what + len, sizeof what - (size_t)len, ": out");
        expect_within(what, e_out, REL_BOUND, out, g.out);
        for (int part = 0; part < 3; part++) {
            snprintf(what + len, sizeof what - (size_t)len, ": d%c", "qkv"[part]);
            expect_within(what, e_d[part], REL_BOUND, want[part], got[part]);
            free(want[part]), free(got[part]);
        }
        what[len] = '\0';
        if (!(e_lse.ratio <= LSE_BOUND))
            fail_msg("%s: lse %zu: gpu %.9g, want %.9g (bound %g absolute)", what, e_lse.at, (double)g.lse[e_lse.at],
                     lse[e_lse.at], LSE_BOUND);
        free_run(&g);
        free(qkv), free(dout), free(out), free(att), free(dqkv), free(scratch), free(lse);
    }
}

/* Two runs on the same inputs: the same bits (no atomics, fixed orders). */
static void test_deterministic(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    const int64_t B = 2, T = 257, NH = 4, C = 256, BT = B * T;
    float *qkv = rand_f32(BT * 3 * C, 50, 2.0f), *dout = rand_f32(BT * C, 51, 1.0f);
    struct flash_run a = run_flash(qkv, dout, B, T, C, NH), b = run_flash(qkv, dout, B, T, C, NH);
    assert_memory_equal(a.out, b.out, F(BT * C));
    assert_memory_equal(a.lse, b.lse, F(B * NH * T));
    assert_memory_equal(a.dqkv, b.dqkv, F(BT * 3 * C));
    free_run(&a), free_run(&b), free(qkv), free(dout);
}

/* Runs everywhere: the formulas of flash_attention.h on B 2, T 65 (2 tiles,
 * 3 causal pairs), NH 3, hs 64, counted by hand; the model FLOPs equal the
 * CPU attention's fc->attention (its issued full squares). */
static void test_flops(void **state) {
    (void)state;
    const int64_t B = 2, T = 65, NH = 3, C = 192;
    struct flash_attention_flops f = flash_attention_flops(B, T, C, NH);
    /* 6 heads, 3 pairs, G = 2 64 64 64 = 524288 */
    assert_true(f.forward_mma == 6.0 * 3 * 2 * 524288);
    assert_true(f.backward_mma == 6.0 * 3 * 7 * 524288);
    assert_true(f.forward_other == 6.0 * (3 * 4096 * 5 + 3 * 64 * (64 + 5) + 65 * (64 + 3)));
    assert_true(f.backward_other == 6.0 * (3 * 4096 * 10 + 2 * 2 * 64 * 64 + 65 * 2 * 64));
    assert_true(f.forward_model == 4.0 * 6 * 65 * 65 * 64);
    assert_true(f.backward_model == 8.0 * 6 * 65 * 65 * 64);

    float *qkv = rand_f32(B * T * 3 * C, 60, 1.0f), *dout = rand_f32(B * T * C, 61, 1.0f);
    float *out = malloc(F(B * T * C)), *att = malloc(F(B * NH * T * T)), *dqkv = malloc(F(B * T * 3 * C));
    float *scratch = malloc(F(attention_backward_scratch(B, T, NH)));
    assert_true(out && att && dqkv && scratch);
    struct exec_ctx fwd = {0}, bwd = {0};
    attention_forward(out, att, qkv, B, T, C, NH, &fwd);
    attention_backward(dqkv, dout, qkv, att, scratch, B, T, C, NH, &bwd);
    assert_true(f.forward_model == fwd.attention && f.backward_model == bwd.attention);
    free(qkv), free(dout), free(out), free(att), free(dqkv), free(scratch);

    struct flash_attention_flops none = flash_attention_flops(1, 8, 96, 2); /* hs 48: refused, all 0 */
    assert_true(none.forward_mma == 0.0 && none.backward_other == 0.0 && none.forward_model == 0.0);
}

/* Runs everywhere: bad shapes are refused before anything is launched
 * (the pointers are never read), an empty one is accepted. */
static void test_refusals(void **state) {
    (void)state;
    float *p = NULL;
    assert_int_not_equal(flash_attention_forward(p, p, p, 1, 8, 96, 2), 0);  /* hs 48 */
    assert_int_not_equal(flash_attention_backward(p, p, p, p, p, p, 1, 8, 96, 2), 0);
    assert_int_not_equal(flash_attention_forward(p, p, p, 1, 8, 16, 1), 0);  /* hs 16 */
    assert_int_not_equal(flash_attention_forward(p, p, p, 1, 8, 256, 1), 0); /* hs 256 */
    assert_int_not_equal(flash_attention_forward(p, p, p, 1, 8, 100, 3), 0); /* NH does not divide C */
    assert_int_not_equal(flash_attention_forward(p, p, p, -1, 8, 128, 2), 0);
    assert_int_not_equal(flash_attention_forward(p, p, p, 1, 64 * 65536 + 1, 128, 2), 0); /* too many tiles */
    assert_int_equal(flash_attention_check("test", 1, 8, 128, 2), 0);
    assert_int_equal(flash_attention_forward(p, p, p, 0, 8, 128, 2), 0); /* empty: nothing to do */
    assert_int_equal(flash_attention_backward(p, p, p, p, p, p, 3, 0, 128, 2), 0);
}

/* Informational: ms per call and the issued tensor-core TFLOP/s at GPT-2
 * 124M's attention shape per layer, B = 4. Not asserted. */
static void test_timing(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    const int64_t B = 4, T = 1024, NH = 12, C = 768, BT = B * T;
    const int reps = 20;
    float *qkv = rand_f32(BT * 3 * C, 70, 1.0f), *dout = rand_f32(BT * C, 71, 1.0f);
    float *d_qkv = dev_from(qkv, F(BT * 3 * C)), *d_dout = dev_from(dout, F(BT * C));
    float *d_out = dev_poisoned(F(BT * C)), *d_lse = dev_poisoned(F(B * NH * T)), *d_dqkv = dev_poisoned(F(BT * 3 * C));
    float *d_scratch = dev_poisoned(F(flash_attention_backward_scratch(B, T, NH)));
    cudaEvent_t e0, e1, e2;
    assert_int_equal(cudaEventCreate(&e0), cudaSuccess);
    assert_int_equal(cudaEventCreate(&e1), cudaSuccess);
    assert_int_equal(cudaEventCreate(&e2), cudaSuccess);
    for (int warm = 0; warm < 2; warm++) {
        assert_int_equal(flash_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH), 0);
        assert_int_equal(flash_attention_backward(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, C, NH), 0);
    }
    float fwd_ms = 0.0f, bwd_ms = 0.0f;
    for (int r = 0; r < reps; r++) {
        float a, b;
        cudaEventRecord(e0, 0);
        assert_int_equal(flash_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH), 0);
        cudaEventRecord(e1, 0);
        assert_int_equal(flash_attention_backward(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, C, NH), 0);
        cudaEventRecord(e2, 0);
        cudaEventSynchronize(e2);
        cudaEventElapsedTime(&a, e0, e1);
        cudaEventElapsedTime(&b, e1, e2);
        fwd_ms += a / reps, bwd_ms += b / reps;
    }
    struct flash_attention_flops f = flash_attention_flops(B, T, C, NH);
    printf("  timing B 4 T 1024 NH 12 hs 64, mean of %d: forward %.3f ms (%.1f TFLOP/s issued, %.1f model), "
           "backward %.3f ms (%.1f issued, %.1f model)\n",
           reps, (double)fwd_ms, f.forward_mma / fwd_ms * 1e-9, f.forward_model / fwd_ms * 1e-9, (double)bwd_ms,
           f.backward_mma / bwd_ms * 1e-9, f.backward_model / bwd_ms * 1e-9);
    cudaEventDestroy(e0), cudaEventDestroy(e1), cudaEventDestroy(e2);
    cudaFree(d_qkv), cudaFree(d_dout), cudaFree(d_out), cudaFree(d_lse), cudaFree(d_dqkv), cudaFree(d_scratch);
    free(qkv), free(dout);
}

/* layers.h's attention_lse_* on device memory: flash_attention_*'s bits and
 * FLOPs; against the CPU's attention_lse within REL_BOUND / LSE_BOUND. */
static void test_lse_dispatch_device(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    const int64_t shapes[][4] = {{1, 1, 1, 64}, {2, 37, 3, 64}, {1, 130, 2, 32}, {2, 65, 1, 128}}; /* B T NH hs */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t B = shapes[si][0], T = shapes[si][1], NH = shapes[si][2], hs = shapes[si][3];
        const int64_t C = NH * hs, BT = B * T, nl = B * NH * T;
        float *qkv = rand_f32(BT * 3 * C, 80 + si, 1.0f), *dout = rand_f32(BT * C, 90 + si, 1.0f);
        struct flash_run direct = run_flash(qkv, dout, B, T, C, NH);
        /* the layers.h names on fresh device buffers */
        float *d_qkv = dev_from(qkv, F(BT * 3 * C)), *d_dout = dev_from(dout, F(BT * C));
        float *d_out = dev_poisoned(F(BT * C)), *d_lse = dev_poisoned(F(nl)), *d_dqkv = dev_poisoned(F(BT * 3 * C));
        float *d_scratch = dev_poisoned(F(attention_lse_backward_scratch(B, T, NH)));
        struct exec_ctx fc = {.space = MEM_DEVICE};
        attention_lse_forward(d_out, d_lse, d_qkv, B, T, C, NH, &fc);
        attention_lse_backward(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, &fc);
        float *out = peek(d_out, F(BT * C), "out"), *lse = peek(d_lse, F(nl), "lse");
        float *dqkv = peek(d_dqkv, F(BT * 3 * C), "dqkv");
        assert_memory_equal(out, direct.out, F(BT * C));
        assert_memory_equal(lse, direct.lse, F(nl));
        assert_memory_equal(dqkv, direct.dqkv, F(BT * 3 * C));
        struct flash_attention_flops f = flash_attention_flops(B, T, C, NH);
        assert_true(fc.attention == f.forward_mma + f.backward_mma);
        assert_true(fc.other == f.forward_other + f.backward_other);
        assert_true(fc.gemm == 0.0);
        /* the CPU's fp32 attention_lse on the same inputs */
        float *c_out = malloc(F(BT * C)), *c_lse = malloc(F(nl)), *c_dqkv = malloc(F(BT * 3 * C));
        float *c_scratch = malloc(F(attention_lse_backward_scratch(B, T, NH)));
        assert_true(c_out && c_lse && c_dqkv && c_scratch);
        struct exec_ctx cfc = {0};
        attention_lse_forward_cpu(c_out, c_lse, qkv, B, T, C, NH, &cfc);
        attention_lse_backward_cpu(c_dqkv, c_scratch, dout, qkv, c_out, c_lse, B, T, C, NH, &cfc);
        /* T = 1: dq and dk are exactly 0 on the CPU, bf16 noise of dS on the
         * GPU, measured against their terms' size (test_against_cpu) */
        const double term_size = T == 1 ? 2.0 * hs / sqrt((double)hs) : 0.0;
        struct error e_out = normwise(c_out, out, BT * C, 0.0), e_lse = {0.0, 0};
        for (int64_t i = 0; i < nl; i++) {
            const double d = fabs((double)lse[i] - c_lse[i]);
            if (!(d <= e_lse.ratio)) e_lse = (struct error){d, (size_t)i};
        }
        printf("  attention_lse B %lld T %lld NH %lld hs %lld: gpu vs cpu normwise out %.1e", (long long)B,
               (long long)T, (long long)NH, (long long)hs, e_out.ratio);
        expect_within("attention_lse out", e_out, REL_BOUND, c_out, out);
        for (int part = 0; part < 3; part++) {
            float *want = third(c_dqkv, BT, C, part), *got = third(dqkv, BT, C, part);
            struct error e = normwise(want, got, BT * C, part < 2 ? term_size : 0.0);
            printf(" d%c %.1e", "qkv"[part], e.ratio);
            expect_within("attention_lse dqkv", e, REL_BOUND, want, got);
            free(want), free(got);
        }
        printf(", lse %.1e absolute\n", e_lse.ratio);
        assert_true(e_lse.ratio <= LSE_BOUND);
        free(c_out), free(c_lse), free(c_dqkv), free(c_scratch), free(out), free(lse), free(dqkv);
        cudaFree(d_qkv), cudaFree(d_dout), cudaFree(d_out), cudaFree(d_lse), cudaFree(d_dqkv), cudaFree(d_scratch);
        free_run(&direct), free(qkv), free(dout);
    }
}

/* Runs everywhere: attention_lse_* on host memory is the CPU's, bit for bit
 * and FLOP for FLOP; the one scratch size serves flash attention. */
static void test_lse_dispatch_host(void **state) {
    (void)state;
    const int64_t B = 2, T = 70, NH = 3, C = 96, BT = B * T, nl = B * NH * T;
    float *qkv = rand_f32(BT * 3 * C, 100, 1.0f), *dout = rand_f32(BT * C, 101, 1.0f);
    float *o[2], *l[2], *d[2], *scr[2];
    struct exec_ctx fc[2] = {{0}, {0}};
    for (int k = 0; k < 2; k++) {
        o[k] = malloc(F(BT * C)), l[k] = malloc(F(nl)), d[k] = malloc(F(BT * 3 * C));
        scr[k] = malloc(F(attention_lse_backward_scratch(B, T, NH)));
        assert_true(o[k] && l[k] && d[k] && scr[k]);
    }
    attention_lse_forward(o[0], l[0], qkv, B, T, C, NH, &fc[0]);
    attention_lse_backward(d[0], scr[0], dout, qkv, o[0], l[0], B, T, C, NH, &fc[0]);
    attention_lse_forward_cpu(o[1], l[1], qkv, B, T, C, NH, &fc[1]);
    attention_lse_backward_cpu(d[1], scr[1], dout, qkv, o[1], l[1], B, T, C, NH, &fc[1]);
    assert_memory_equal(o[0], o[1], F(BT * C));
    assert_memory_equal(l[0], l[1], F(nl));
    assert_memory_equal(d[0], d[1], F(BT * 3 * C));
    assert_true(fc[0].attention == fc[1].attention && fc[0].other == fc[1].other && fc[0].attention > 0.0);
    for (int k = 0; k < 2; k++) free(o[k]), free(l[k]), free(d[k]), free(scr[k]);
    free(qkv), free(dout);
    const int64_t sizes[][3] = {{1, 1, 1}, {2, 37, 3}, {4, 1024, 12}, {3, 130, 5}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        assert_int_equal(attention_lse_backward_scratch(sizes[i][0], sizes[i][1], sizes[i][2]),
                         flash_attention_backward_scratch(sizes[i][0], sizes[i][1], sizes[i][2]));
}

/* Runs everywhere (no GPU is touched): the trainer's start-up check of
 * --attention flash refuses, on a GPU, the head sizes the kernel does not
 * take, naming them; the CPU takes any. */
static void test_device_check(void **state) {
    (void)state;
    struct device_info gpu = {.kind = DEVICE_CUDA, .ordinal = 0, .name = "a GPU"}, cpu = {.kind = DEVICE_CPU};
    char err[DEVICE_ERR_LEN] = "";
    assert_int_equal(device_check_flash_attention(&gpu, 4, 128, 192, 6, err, sizeof err), 0); /* hs 32 */
    assert_int_equal(device_check_flash_attention(&gpu, 4, 64, 32, 4, err, sizeof err), -1);  /* hs 8 */
    assert_non_null(strstr(err, "--attention flash on a GPU"));
    assert_non_null(strstr(err, "4 heads of size 8"));
    assert_int_equal(device_check_flash_attention(&cpu, 4, 64, 32, 4, err, sizeof err), 0);
}

int main(void) {
    seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test_flash_attention_cuda: seed %llu\n", (unsigned long long)seed);
    const char *why = no_device();
    if (why) printf("test_flash_attention_cuda: %s: every device test is skipped\n", why);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_cpu), cmocka_unit_test(test_deterministic), cmocka_unit_test(test_flops),
        cmocka_unit_test(test_refusals),    cmocka_unit_test(test_timing),
        cmocka_unit_test(test_lse_dispatch_device), cmocka_unit_test(test_lse_dispatch_host),
        cmocka_unit_test(test_device_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
