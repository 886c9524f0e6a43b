/* Adafactor's device kernels (optim/cuda/adafactor.cu) against the CPU
 * rule (optim/adafactor.c), through include/optim.h's public names on
 * device memory (so optim/optim_dispatch.c is tested too) (make cuda-test).
 *
 * A tensor is walked as parallel/zero/factored.c walks a rank's part of it:
 * in two pieces cut inside a row, for several steps (the statistics, the
 * first moment and w carried from step to step), each step: the squares'
 * sums (a matrix's R and C, a vector's v), the moving averages, sum(C), the
 * update's squares in double, the clip scale, the step with a bf16
 * writeback (nearest-even and stochastic), and V per element (the resume
 * state). Shapes off every tile and block size: matrices 2 x 3, 17 x 33,
 * 257 x 31, 65 x 300, 3 x 1025 and vectors of 1, 255 and 1000; beta1 0
 * (no first moment) and 0.9; fp32 and bf16 gradients; a clip threshold
 * that clips some steps and not others. Inputs are drawn afresh each run
 * (the seed is printed).
 * Bounds:
 *   R, C, v, sum(C), V, w, m and the bf16 params: bit for bit (the CPU's
 *     order of every fp32 sum, --fmad=false, IEEE sqrtf and division);
 *   the update's squares (double): within 2 n 2^-53 of the CPU's,
 *     relatively (a tree, not the CPU's order; every term >= 0); the step
 *     then takes the CPU's clip scale, whose float the device's squares
 *     give too unless they straddle a rounding boundary (checked: within
 *     one float ulp);
 *   FLOP counters equal the CPU's.
 * Outputs that are only outputs (the bf16 params, V) are poisoned before
 * each call, and every device buffer has a poisoned guard past its end.
 * Without a GPU every device test says "skipped: no CUDA device" and the
 * program exits 0; the host-dispatch test runs everywhere. */
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "optim.h"
#include "dtype.h"
#include "rng.h"
#include "cuda_fixture.h"

static uint64_t seed; /* set once in main */

enum { STEPS = 4 };

struct shape {
    int rows, cols; /* rows 1: a vector of cols elements (unfactored) */
};
static const struct shape shapes[] = {{2, 3}, {17, 33}, {257, 31}, {65, 300}, {3, 1025}, {1, 1}, {1, 255}, {1, 1000}};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static float uniform(uint64_t stream, size_t i, float lo, float hi) {
    return lo + (hi - lo) * rng_uniform(seed, stream, i);
}

/* Gradients of many magnitudes (1e-5 .. 10), some exactly 0 (a padding row's). */
static void *rand_grad(size_t n, uint64_t stream, enum dtype dt) {
    void *g = malloc(n * dtype_size(dt) + 1);
    assert_non_null(g);
    for (size_t i = 0; i < n; i++) {
        float x = uniform(stream, i, -1.0f, 1.0f) * powf(10.0f, uniform(stream + 1, i, -5.0f, 1.0f));
        if (i % 97 == 5) x = 0.0f;
        if (dt == DTYPE_FP32) ((float *)g)[i] = x;
        else ((bf16 *)g)[i] = f32_to_bf16(x);
    }
    return g;
}

static void poison(void *dev, size_t bytes) { assert_int_equal(cudaMemset(dev, 0xff, bytes), cudaSuccess); }

/* The device's n elements of `elem` bytes equal the host's, bit for bit, and the guard is intact. */
static void expect_same(const char *what, const void *want, const void *dev, size_t n, size_t elem, const char *case_) {
    const size_t bytes = n * elem;
    unsigned char *h = malloc(bytes + GUARD);
    assert_non_null(h);
    assert_int_equal(cudaMemcpy(h, dev, bytes + GUARD, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = bytes; i < bytes + GUARD; i++)
        if (h[i] != 0xff) fail_msg("%s (%s): byte %zu past the end was written", what, case_, i - bytes);
    for (size_t i = 0; i < bytes; i += elem)
        if (memcmp(h + i, (const unsigned char *)want + i, elem) != 0) {
            uint32_t a = 0, b = 0;
            memcpy(&a, (const unsigned char *)want + i, elem < 4 ? elem : 4);
            memcpy(&b, h + i, elem < 4 ? elem : 4);
            fail_msg("%s (%s): element %zu: cpu 0x%08x, gpu 0x%08x (bit for bit expected)", what, case_, i / elem,
                     (unsigned)a, (unsigned)b);
        }
    free(h);
}

/* One tensor's state on one side: host pointers on the CPU, device ones on the GPU. */
struct side {
    float *w, *m, *stat, *sums, *total, *out;
    bf16 *params;
    double *sq;
    enum mem_space space;
    struct exec_ctx fc;
};

static void *dev_copy(const void *h, size_t bytes) { return dev_from(h, bytes); }

/* One step of the rule over the tensor's two pieces [0, cut), [cut, n). */
static void step_on(struct side *s, const struct shape *sh, const void *grad, enum dtype gd,
                    const struct adafactor_hparams *h, size_t cut, const float *clip_host, float *clip_out,
                    const struct param_writeback *wb) {
    const bool factored = sh->rows > 1;
    const size_t m = (size_t)sh->cols, n = (size_t)sh->rows * m, nstat = factored ? (size_t)sh->rows + m : n;
    const size_t es = dtype_size(gd), piece[3] = {0, cut, n};
    const enum mem_space sp = s->space;
    if (factored) {
        if (sp == MEM_HOST) memset(s->sums, 0, nstat * sizeof *s->sums);
        else assert_int_equal(cudaMemset(s->sums, 0, nstat * sizeof *s->sums), cudaSuccess);
    }
    for (int p = 0; p < 2; p++) {
        const size_t a = piece[p], len = piece[p + 1] - a;
        const void *g = (const char *)grad + a * es;
        if (factored)
            adafactor_square_sums(sp, len, g, gd, h->grad_scale, h->eps1, a, sh->cols, s->sums, s->sums + sh->rows);
        else adafactor_vector_ema(sp, len, s->stat + a, g, gd, h->grad_scale, h->eps1, h->beta2t);
    }
    if (factored) {
        adafactor_ema(sp, nstat, s->stat, s->sums, h->beta2t);
        adafactor_total(sp, m, s->stat + sh->rows, s->total, false);
    }
    struct adafactor_moment mo[2];
    if (sp == MEM_HOST) *s->sq = 0.0;
    else assert_int_equal(cudaMemset(s->sq, 0, sizeof *s->sq), cudaSuccess);
    for (int p = 0; p < 2; p++) {
        const size_t a = piece[p], len = piece[p + 1] - a;
        mo[p] = factored ? (struct adafactor_moment){.rows = s->stat, .cols = s->stat + sh->rows, .col_total = s->total,
                                                     .c0 = a, .ncols = sh->cols}
                         : (struct adafactor_moment){.v = s->stat + a};
        adafactor_update_squares(sp, len, (const char *)grad + a * es, gd, h->grad_scale, &mo[p], s->sq);
    }
    double sq = *s->sq;
    if (sp == MEM_DEVICE) assert_int_equal(cudaMemcpy(&sq, s->sq, sizeof sq, cudaMemcpyDeviceToHost), cudaSuccess);
    *clip_out = (float)(1.0 / fmax(1.0, sqrt(sq / (double)n) / h->clip));
    const float clip = clip_host ? *clip_host : *clip_out;
    for (int p = 0; p < 2; p++) {
        const size_t a = piece[p], len = piece[p + 1] - a;
        struct param_writeback o = *wb;
        o.params = wb->params ? s->params + a : NULL;
        o.noise_index += a;
        adafactor_apply(h, len, s->w + a, s->m ? s->m + a : NULL, (const char *)grad + a * es, gd, &mo[p], clip, &o,
                        &s->fc);
        adafactor_moment_values(sp, len, &mo[p], s->out + a);
    }
}

static void run_case(const struct shape *sh, float beta1, enum dtype gd, enum rounding_mode rounding) {
    const bool factored = sh->rows > 1;
    const size_t m = (size_t)sh->cols, n = (size_t)sh->rows * m, nstat = factored ? (size_t)sh->rows + m : n;
    const size_t cut = factored ? m + m / 2 + 1 < n ? m + m / 2 + 1 : n / 2 : n / 2; /* inside a row */
    char case_[160];
    snprintf(case_, sizeof case_, "%d x %d, beta1 %g, %s grads, %s", sh->rows, sh->cols, (double)beta1,
             dtype_name(gd), rounding == ROUND_STOCHASTIC ? "stochastic" : "nearest");
    const uint64_t st = 100 * (uint64_t)(sh->rows * 7919 + sh->cols);
    struct side c = {.space = MEM_HOST}, d = {.space = MEM_DEVICE};
    c.w = malloc(n * 4), c.m = beta1 > 0 ? malloc(n * 4) : NULL, c.stat = malloc(nstat * 4), c.sums = malloc(nstat * 4);
    c.total = malloc(4), c.out = malloc(n * 4), c.params = malloc(n * 2), c.sq = malloc(8);
    for (size_t i = 0; i < n; i++) c.w[i] = uniform(st, i, -1.0f, 1.0f);
    for (size_t i = 0; c.m && i < n; i++) c.m[i] = uniform(st + 2, i, -1e-2f, 1e-2f);
    for (size_t i = 0; i < nstat; i++) c.stat[i] = uniform(st + 3, i, 0.0f, 1e-3f); /* a warm start */
    *c.total = 0.0f;
    d.w = dev_copy(c.w, n * 4), d.m = c.m ? dev_copy(c.m, n * 4) : NULL, d.stat = dev_copy(c.stat, nstat * 4);
    d.sums = dev_poisoned(nstat * 4), d.total = dev_poisoned(4), d.out = dev_poisoned(n * 4);
    d.params = dev_poisoned(n * 2), d.sq = dev_poisoned(8);
    for (int t = 1; t <= STEPS; t++) {
        void *g = rand_grad(n, st + 10 * (uint64_t)t, gd);
        void *dg = dev_copy(g, n * dtype_size(gd));
        const struct adafactor_hparams h = {.lr = 1e-2f, .beta1 = beta1, .eps1 = 1e-30f, .clip = t % 2 ? 1.0f : 1e3f,
                                            .beta2t = adafactor_beta2t(0.8f, t), .weight_decay = t < 3 ? 0.1f : 0.0f,
                                            .grad_scale = t == 2 ? 0.75f : 1.0f};
        const struct param_writeback wb = {.params = (bf16 *)1, .rounding = rounding, .seed = seed ^ 0xada,
                                           .noise_index = 1000003u * (uint64_t)t};
        memset(c.params, 0xff, n * 2);
        memset(c.out, 0xff, n * 4);
        poison(d.params, n * 2);
        poison(d.out, n * 4);
        float clip_c, clip_d;
        step_on(&c, sh, g, gd, &h, cut, NULL, &clip_c, &wb);
        step_on(&d, sh, dg, gd, &h, cut, &clip_c, &clip_d, &wb);
        /* the squares: a tree against element order, within 2 n 2^-53 */
        double sq_d;
        assert_int_equal(cudaMemcpy(&sq_d, d.sq, 8, cudaMemcpyDeviceToHost), cudaSuccess);
        const double bound = 2.0 * (double)n * DBL_EPSILON / 2.0 * *c.sq;
        if (fabs(sq_d - *c.sq) > bound)
            fail_msg("update squares (%s, step %d): cpu %.17g, gpu %.17g, bound %.3g", case_, t, *c.sq, sq_d, bound);
        if (fabsf(clip_d - clip_c) > FLT_EPSILON * clip_c)
            fail_msg("clip scale (%s, step %d): cpu %.9g, gpu %.9g", case_, t, (double)clip_c, (double)clip_d);
        char at[200];
        snprintf(at, sizeof at, "%s, step %d", case_, t);
        expect_same(factored ? "R and C" : "v", c.stat, d.stat, nstat, 4, at);
        if (factored) expect_same("sum(C)", c.total, d.total, 1, 4, at);
        expect_same("w", c.w, d.w, n, 4, at);
        if (c.m) expect_same("m", c.m, d.m, n, 4, at);
        expect_same("bf16 params", c.params, d.params, n, 2, at);
        expect_same("V", c.out, d.out, n, 4, at);
        if (c.fc.other != d.fc.other) fail_msg("FLOPs (%s): cpu %.17g, gpu %.17g", at, c.fc.other, d.fc.other);
        free(g);
        cudaFree(dg);
    }
    free(c.w), free(c.m), free(c.stat), free(c.sums), free(c.total), free(c.out), free(c.params), free(c.sq);
    cudaFree(d.w), cudaFree(d.m), cudaFree(d.stat), cudaFree(d.sums), cudaFree(d.total), cudaFree(d.out);
    cudaFree(d.params), cudaFree(d.sq);
}

static void test_adafactor_device(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    for (size_t s = 0; s < NSHAPES; s++)
        for (int b = 0; b < 2; b++)
            for (int gdt = 0; gdt < 2; gdt++)
                run_case(&shapes[s], b ? 0.9f : 0.0f, gdt ? DTYPE_BF16 : DTYPE_FP32,
                         (s + (size_t)b) % 2 ? ROUND_STOCHASTIC : ROUND_NEAREST);
}

/* sum(C)'s kernel: from 0 or onto *dst, in order (the cut rows' parts). */
static void test_adafactor_total_device(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    const size_t n = 3001;
    float *x = malloc(n * 4), want = 0.5f;
    for (size_t i = 0; i < n; i++) x[i] = uniform(77, i, 0.0f, 1.0f) * powf(10.0f, uniform(78, i, -6.0f, 3.0f));
    float *dx = dev_copy(x, n * 4), *dd = dev_from(&want, 4);
    adafactor_total_cpu(n, x, &want, true);
    adafactor_total(MEM_DEVICE, n, dx, dd, true);
    expect_same("total (accumulate)", &want, dd, 1, 4, "n 3001");
    adafactor_total_cpu(1, x + 7, &want, false);
    adafactor_total(MEM_DEVICE, 1, dx + 7, dd, false);
    expect_same("total (one)", &want, dd, 1, 4, "n 1");
    free(x);
    cudaFree(dx), cudaFree(dd);
}

/* Runs everywhere: host-space calls are the CPU's functions, bit for bit. */
static void test_adafactor_dispatch_host(void **state) {
    (void)state;
    const struct shape sh = {17, 33};
    const size_t m = 33, n = 17 * m, nstat = 17 + m;
    float *g = rand_grad(n, 500, DTYPE_FP32), a[17 + 33] = {0}, b[17 + 33] = {0};
    adafactor_square_sums(MEM_HOST, n, g, DTYPE_FP32, 1.0f, 1e-30f, 0, sh.cols, a, a + sh.rows);
    adafactor_square_sums_cpu(n, g, DTYPE_FP32, 1.0f, 1e-30f, 0, sh.cols, b, b + sh.rows);
    assert_memory_equal(a, b, nstat * 4);
    assert_true(a[0] > 0.0f);
    float ta = 0.0f, tb = 0.0f;
    adafactor_total(MEM_HOST, m, a + sh.rows, &ta, false);
    adafactor_total_cpu(m, b + sh.rows, &tb, false);
    assert_memory_equal(&ta, &tb, 4);
    const struct adafactor_moment mo = {.rows = a, .cols = a + sh.rows, .col_total = &ta, .ncols = sh.cols};
    double sa = 0.0, sb = 0.0;
    adafactor_update_squares(MEM_HOST, n, g, DTYPE_FP32, 1.0f, &mo, &sa);
    adafactor_update_squares_cpu(n, g, DTYPE_FP32, 1.0f, &mo, &sb);
    assert_memory_equal(&sa, &sb, 8);
    assert_true(sa > 0.0);
    free(g);
}

int main(void) {
    seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test_adafactor_cuda: seed %llu\n", (unsigned long long)seed);
    const char *why = no_device();
    if (why) printf("test_adafactor_cuda: %s: every device test is skipped\n", why);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adafactor_device),
        cmocka_unit_test(test_adafactor_total_device),
        cmocka_unit_test(test_adafactor_dispatch_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
