/* v2's FlashAttention-2 kernels on the bf16 data path (model/cuda/v2/
 * flash2.h; --gpu_path v2; make cuda-test) against the CPU's bf16 flash
 * forms, attention_lse_forward_bf16_cpu / attention_lse_backward_bf16_cpu
 * (model/cpu/attention_lse.c), through layers.h's dispatch on device memory
 * (attention_lse_*_bf16 -> attention_lse_*_bf16_cuda -> flash2_*).
 *
 * Inputs come from a fixed seed (a failure reproduces): qkv uniform in
 * [-a, a) rounded to bf16, a = 1 or 3 (3 makes the softmax peaked), dout
 * in [-1, 1) fp32. Shapes: T = 1, 17, 127, 128, 129, 300 (off and on the
 * 64- and 128-row tiles), B and NH several, hs 32, 64 and 128. Every device
 * output (out, lse, dqkv) and the scratch is poisoned (0xff bytes, a NaN)
 * with a guard past its end that must survive: an element left unwritten
 * fails as a NaN. The backward gets the GPU's own out and lse, the CPU its
 * own, as in training.
 *
 * Bounds: flash2.h's FLASH2_REL_BOUND (out, dq, dk, dv normwise, each on
 * its own) and FLASH2_LSE_BOUND (lse, absolute), derived there; dq and
 * dk against the size of their terms too (tests/flash2_terms.h). Every error is printed.
 * Also: two runs give the same bits (no atomics; the second through
 * flash2_* directly, the first through the dispatch), the counter gets
 * flash2_forward_flops / flash2_backward_flops, and bad shapes (head sizes
 * 16, 96 and 256, an unaligned pointer) are refused with a non-zero return
 * before anything is launched (runs everywhere). Without a GPU the device
 * tests say "skipped: no CUDA device" and the program exits 0.
 * Never run on a GPU yet: the kernels are compiled, not working. */
#include <cuda_runtime.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../model/cpu/layers_cpu.h"
#include "counters.h"
#include "dtype.h"
#include "layers.h"
#include "rng.h"
#include "../../model/cuda/v2/flash2.h"
#include "cuda_fixture.h"
#include "../flash2_terms.h"

#define REL_BOUND FLASH2_REL_BOUND
#define LSE_BOUND FLASH2_LSE_BOUND

static const uint64_t SEED = 1;

#define F(n) ((size_t)(n) * sizeof(float))
#define H(n) ((size_t)(n) * sizeof(bf16))

static bf16 *rand_bf16(size_t n, uint64_t stream, float scale) {
    bf16 *x = malloc(H(n ? n : 1));
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = f32_to_bf16((rng_uniform(SEED, stream, i) * 2.0f - 1.0f) * scale);
    return x;
}

static float *rand_f32(size_t n, uint64_t stream) {
    float *x = malloc(F(n ? n : 1));
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(SEED, stream, i) * 2.0f - 1.0f;
    return x;
}

/* Column block `part` (0 q, 1 k, 2 v; -1: a (B T, C) array as it is) of a
 * bf16 array, widened, as (B T, C). */
static float *widen(const bf16 *x, int64_t BT, int64_t C, int part) {
    const int64_t cols = part < 0 ? C : 3 * C, off = part < 0 ? 0 : part * C;
    float *y = malloc(F(BT * C));
    assert_non_null(y);
    for (int64_t r = 0; r < BT; r++)
        for (int64_t c = 0; c < C; c++) y[r * C + c] = bf16_to_f32(x[r * cols + off + c]);
    return y;
}

static void expect_within(const char *what, const float *want, const float *got, size_t n, double at_least,
                          double bound, int64_t T, int64_t hs) {
    struct normwise e = normwise_diff(want, got, n, at_least);
    const double ratio = e.scale > 0.0 ? e.worst / e.scale : e.worst;
    printf("  T %lld hs %lld %-4s normwise %.3g (bound %.1e)\n", (long long)T, (long long)hs, what, ratio, bound);
    if (!(ratio <= bound))
        fail_msg("%s: element %zu: cpu %.9g, gpu %.9g: normwise error %.3g > %.1e", what, e.at, (double)want[e.at],
                 (double)got[e.at], ratio, bound);
}

struct gpu_run {
    bf16 *out, *dqkv;
    float *lse;
    double fwd_flops, bwd_flops;
};

/* Forward and backward on poisoned device buffers; `dispatch`: through
 * layers.h's attention_lse_*_bf16 (device memory), else flash2_* directly. */
static struct gpu_run run_gpu(const bf16 *qkv, const float *dout, int64_t B, int64_t T, int64_t C, int64_t NH,
                              bool dispatch) {
    const int64_t BT = B * T;
    const size_t scratch_n = flash2_backward_scratch(B, T, C, NH);
    assert_int_equal(scratch_n, attention_lse_bf16_scratch_in(MEM_DEVICE, B, T, C, NH));
    bf16 *d_qkv = dev_from(qkv, H(BT * 3 * C)), *d_out = dev_poisoned(H(BT * C)), *d_dqkv = dev_poisoned(H(BT * 3 * C));
    float *d_dout = dev_from(dout, F(BT * C)), *d_lse = dev_poisoned(F(B * NH * T)), *d_scratch = dev_poisoned(F(scratch_n));
    struct gpu_run r = {0};
    if (dispatch) {
        struct exec_ctx fc = {.space = MEM_DEVICE};
        attention_lse_forward_bf16(d_out, d_lse, d_qkv, NULL, B, T, C, NH, &fc);
        r.fwd_flops = fc.attention;
        attention_lse_backward_bf16(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, &fc);
        r.bwd_flops = fc.attention - r.fwd_flops;
    } else {
        assert_int_equal(flash2_forward(d_out, d_lse, d_qkv, B, T, C, NH), 0);
        assert_int_equal(flash2_backward(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, C, NH), 0);
    }
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    r.out = (bf16 *)(void *)back(d_out, H(BT * C), "out");
    r.lse = back(d_lse, F(B * NH * T), "lse");
    r.dqkv = (bf16 *)(void *)back(d_dqkv, H(BT * 3 * C), "dqkv");
    free(back(d_scratch, F(scratch_n), "scratch")); /* its guard */
    cudaFree(d_qkv), cudaFree(d_dout);
    return r;
}

static void free_run(struct gpu_run *r) { free(r->out), free(r->lse), free(r->dqkv); }

static void test_against_cpu_bf16(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    /* B, T, NH, hs, the inputs' amplitude (x10) */
    const int64_t shapes[][5] = {{1, 1, 1, 64, 10},  {2, 17, 3, 64, 10},  {1, 127, 2, 64, 30}, {2, 128, 2, 64, 10},
                                 {1, 129, 4, 64, 30}, {2, 300, 2, 64, 10}, {1, 1, 2, 128, 10}, {3, 17, 1, 128, 30},
                                 {1, 127, 2, 128, 10}, {1, 128, 1, 128, 10}, {2, 129, 2, 128, 10}, {1, 300, 3, 128, 30},
                                 {2, 129, 3, 32, 10},  {1, 300, 2, 32, 30}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t B = shapes[s][0], T = shapes[s][1], NH = shapes[s][2], hs = shapes[s][3], C = NH * hs, BT = B * T;
        const double amp = (double)shapes[s][4] / 10.0;
        bf16 *qkv = rand_bf16(BT * 3 * C, 10 + s, (float)amp);
        float *dout = rand_f32(BT * C, 30 + s);
        /* the CPU's bf16 forms */
        bf16 *out = malloc(H(BT * C)), *dqkv = malloc(H(BT * 3 * C));
        float *lse = malloc(F(B * NH * T)), *scratch = malloc(F(attention_lse_bf16_scratch(B, T, C, NH)));
        assert_true(out && dqkv && lse && scratch);
        struct exec_ctx fc = {0};
        attention_lse_forward_bf16_cpu(out, lse, qkv, scratch, B, T, C, NH, &fc);
        attention_lse_backward_bf16_cpu(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, &fc);
        struct gpu_run g = run_gpu(qkv, dout, B, T, C, NH, true), again = run_gpu(qkv, dout, B, T, C, NH, false);

        /* the same bits twice, and the dispatch's counts */
        assert_memory_equal(g.out, again.out, H(BT * C));
        assert_memory_equal(g.lse, again.lse, F(B * NH * T));
        assert_memory_equal(g.dqkv, again.dqkv, H(BT * 3 * C));
        assert_true(g.fwd_flops == flash2_forward_flops(B, T, C, NH));
        assert_true(g.bwd_flops == flash2_backward_flops(B, T, C, NH));

        float *o_want = widen(out, BT, C, -1), *o_got = widen(g.out, BT, C, -1);
        expect_within("out", o_want, o_got, (size_t)(BT * C), 0.0, REL_BOUND, T, hs);
        double worst_lse = 0.0;
        for (int64_t i = 0; i < B * NH * T; i++) {
            const double d = fabs((double)g.lse[i] - lse[i]);
            if (!(d <= LSE_BOUND)) fail_msg("lse[%lld]: cpu %.9g, gpu %.9g", (long long)i, (double)lse[i], (double)g.lse[i]);
            worst_lse = fmax(worst_lse, d);
        }
        printf("  T %lld hs %lld lse  absolute %.3g (bound %.1e)\n", (long long)T, (long long)hs, worst_lse, LSE_BOUND);
        const char *names[3] = {"dq", "dk", "dv"};
        const struct flash2_terms terms = flash2_term_sizes(qkv, dout, out, lse, B, T, C, NH);
        const double at_least[3] = {terms.dq, terms.dk, 0.0};
        for (int part = 0; part < 3; part++) {
            float *want = widen(dqkv, BT, C, part), *got = widen(g.dqkv, BT, C, part);
            expect_within(names[part], want, got, (size_t)(BT * C), at_least[part], REL_BOUND, T, hs);
            free(want), free(got);
        }
        free(o_want), free(o_got);
        free_run(&g), free_run(&again);
        free(qkv), free(dout), free(out), free(dqkv), free(lse), free(scratch);
    }
}

/* Refused before any launch: runs without a GPU too. */
static void test_refuses_bad_shapes(void **state) {
    (void)state;
    _Alignas(16) static bf16 buf[64];
    _Alignas(16) static float lse[8], scratch[64];
    assert_int_not_equal(flash2_forward(buf, lse, buf, 1, 1, 16, 1), 0);  /* hs 16 */
    assert_int_not_equal(flash2_forward(buf, lse, buf, 1, 1, 96, 1), 0);  /* hs 96 */
    assert_int_not_equal(flash2_forward(buf, lse, buf, 1, 1, 64, 0), 0);  /* NH 0 */
    assert_int_not_equal(flash2_forward(buf, lse, buf, -1, 1, 64, 1), 0); /* B < 0 */
    assert_int_not_equal(flash2_forward(buf + 1, lse, buf, 1, 1, 64, 1), 0); /* out not on 16 bytes */
    assert_int_not_equal(flash2_backward(buf, scratch, scratch, buf + 3, buf, lse, 1, 1, 64, 1), 0);
    assert_int_not_equal(flash2_backward(buf, scratch, scratch, buf, buf, lse, 1, 1, 256, 1), 0);
    assert_int_equal(flash2_forward(buf, lse, buf, 0, 5, 64, 1), 0); /* empty: nothing to do */
    assert_int_equal(flash2_backward(buf, scratch, scratch, buf, buf, lse, 3, 0, 128, 1), 0);
    assert_true(flash2_forward_flops(1, 64, 96, 1) == 0.0);
}

int main(void) {
    printf("test_flash2_cuda: compiled kernels, never run on a GPU before this\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_cpu_bf16),
        cmocka_unit_test(test_refuses_bad_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
