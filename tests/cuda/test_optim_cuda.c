/* The CUDA build's update rules and 8-bit codec against the CPU's (make
 * cuda-test).
 *
 * Each CUDA version, called through the optim.h names on device memory (so
 * the dispatcher is tested too), runs on device copies of random inputs
 * drawn afresh each run (the seed is printed) at n = 1, 255, 256, 257, 1000
 * and 65537 (blocks of 256 full, partial, single); the reference is the CPU
 * version (X_cpu: optim/) on the same inputs.
 * Each rule runs with fp32 and bf16 gradients, no writeback and bf16
 * writeback (nearest-even and stochastic), weight decay on and off, a
 * gradient scale of 1 and 0.75, for the steps t = 1, 2, 3 (the states
 * carried from step to step) and then t = 1000. Outputs that are only
 * outputs are poisoned (0xff bytes) before each call: the bf16 params, and
 * SGD's buffer on its first step; in-out buffers start random. Every device
 * buffer has a poisoned guard of 64 bytes past its end, which must survive.
 * Bounds: bit for bit everywhere, by design (optim/cuda/optim_kernels.h):
 *   AdamW, SGD: w, m, v / the momentum buffer, the bf16 params
 *   8-bit AdamW (from the zero state and from random codes and absmax;
 *     gradients with NaN and Inf elements and an all-zero block): the codes
 *     q1, q2, absmax1, absmax2, w and the bf16 params
 *   the codec (adamw8bit_quantize / _dequantize; checkpoints): codes,
 *     absmax and the fp32 values, with the fp32 side in device memory and in
 *     host memory (staged)
 *   FLOP counters equal the CPU's
 * Without a GPU every device test says "skipped: no CUDA device" and the
 * program exits 0. One test needs no GPU and runs everywhere: the optim.h
 * names on host memory are the CPU's functions, bit for bit and FLOP for
 * FLOP (--device cpu in this build). */
#include <cuda_runtime.h>
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

static uint64_t seed; /* set once in main, read by every test */
static const size_t sizes[] = {1, 255, 256, 257, 1000, 65537};
#define NSIZES (sizeof sizes / sizeof sizes[0])
static const int64_t steps[] = {1, 2, 3, 1000};
#define NSTEPS (sizeof steps / sizeof steps[0])

/* ---- random inputs, device buffers ---- */

static float uniform(uint64_t stream, size_t i, float lo, float hi) {
    return lo + (hi - lo) * rng_uniform(seed, stream, i);
}

static float *rand_f32(size_t n, uint64_t stream, float lo, float hi) {
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = uniform(stream, i, lo, hi);
    return x;
}

/* Gradients of many magnitudes (1e-5 .. 10), in dtype dt (bf16: rounded). */
static void *rand_grad(size_t n, uint64_t stream, enum dtype dt) {
    void *g = malloc(n * dtype_size(dt));
    assert_non_null(g);
    for (size_t i = 0; i < n; i++) {
        float x = uniform(stream, i, -1.0f, 1.0f) * powf(10.0f, uniform(stream + 1, i, -5.0f, 1.0f));
        if (dt == DTYPE_FP32) ((float *)g)[i] = x;
        else ((bf16 *)g)[i] = f32_to_bf16(x);
    }
    return g;
}

static void set_grad(void *g, enum dtype dt, size_t i, float x) {
    if (dt == DTYPE_FP32) ((float *)g)[i] = x;
    else ((bf16 *)g)[i] = f32_to_bf16(x);
}

static void poison(void *dev, size_t bytes) { assert_int_equal(cudaMemset(dev, 0xff, bytes), cudaSuccess); }

/* The device buffer's bytes equal the host's, and its guard is intact. */
static void expect_dev(const char *what, const void *want, const void *dev, size_t bytes, size_t elem, size_t n,
                       int64_t t, const char *config) {
    unsigned char *h = malloc(bytes + GUARD);
    assert_non_null(h);
    assert_int_equal(cudaMemcpy(h, dev, bytes + GUARD, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = bytes; i < bytes + GUARD; i++)
        if (h[i] != 0xff) fail_msg("%s (%s, n %zu, t %lld): byte %zu past the end was written", what, config, n,
                                   (long long)t, i - bytes);
    for (size_t i = 0; i < bytes; i += elem)
        if (memcmp(h + i, (const unsigned char *)want + i, elem) != 0) {
            uint32_t a = 0, b = 0;
            memcpy(&a, (const unsigned char *)want + i, elem);
            memcpy(&b, h + i, elem);
            fail_msg("%s (%s, n %zu, t %lld): element %zu: cpu 0x%08x, gpu 0x%08x (bit for bit expected)", what,
                     config, n, (long long)t, i / elem, (unsigned)a, (unsigned)b);
        }
    free(h);
}

static void expect_flops(const char *what, const struct exec_ctx *want, const struct exec_ctx *got) {
    if (want->gemm != got->gemm || want->attention != got->attention || want->other != got->other)
        fail_msg("%s: FLOPs gemm/attention/other: cpu %.17g/%.17g/%.17g, gpu %.17g/%.17g/%.17g", what, want->gemm,
                 want->attention, want->other, got->gemm, got->attention, got->other);
}

/* ---- the configurations: grad dtype x writeback x decay/scale ---- */

enum wb { WB_NONE, WB_NEAREST, WB_STOCHASTIC, WB_NUM };

struct config {
    enum dtype gd;
    enum wb wb;
    bool decay;
    char name[64];
};

static struct config config_of(int c) {
    struct config k = {.gd = c % 2 ? DTYPE_BF16 : DTYPE_FP32, .wb = (enum wb)(c / 2 % WB_NUM), .decay = c % 5 < 3};
    static const char *wbn[] = {"no writeback", "bf16 nearest", "bf16 stochastic"};
    snprintf(k.name, sizeof k.name, "%s grads, %s, decay %s", dtype_name(k.gd), wbn[k.wb], k.decay ? "on" : "off");
    return k;
}
enum { NCONFIGS = 2 * WB_NUM };

/* The writeback of step t into params (NULL for none). */
static struct param_writeback writeback_of(enum wb wb, bf16 *params, int64_t t) {
    return (struct param_writeback){.params = wb == WB_NONE ? NULL : params,
                                    .rounding = wb == WB_STOCHASTIC ? ROUND_STOCHASTIC : ROUND_NEAREST,
                                    .seed = seed ^ 0x5eedu,
                                    .noise_index = 0x123456789abull + (uint64_t)t * 1000003u};
}

static struct adamw_hparams adam_hparams(bool decay, int64_t t) {
    return (struct adamw_hparams){.lr = t == 1000 ? 3e-4f : 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                  .weight_decay = decay ? 0.1f : 0.0f, .grad_scale = t % 2 ? 0.75f : 1.0f, .t = t};
}

/* Disjoint random streams per test, size, configuration and use (each use
 * takes up to 4: rand_grad two, the 8-bit states two). */
static uint64_t stream_of(int test, size_t s, int c, size_t k) {
    return 4u * ((((uint64_t)test * 16u + s) * 16u + (uint64_t)c) * 16u + k);
}

/* ---- AdamW ---- */

static void test_adamw(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    for (size_t s = 0; s < NSIZES; s++)
        for (int c = 0; c < NCONFIGS; c++) {
            const size_t n = sizes[s];
            const struct config k = config_of(c);
            float *w = rand_f32(n, stream_of(1, s, c, 0), -1.0f, 1.0f), *m = rand_f32(n, stream_of(1, s, c, 1), -0.01f, 0.01f);
            float *v = rand_f32(n, stream_of(1, s, c, 2), 0.0f, 1e-4f);
            bf16 *p = malloc(n * sizeof *p);
            float *dw = dev_from(w, n * 4), *dm = dev_from(m, n * 4), *dv = dev_from(v, n * 4);
            bf16 *dp = dev_poisoned(n * sizeof *p);
            struct exec_ctx fc = {0}, gc = {.space = MEM_DEVICE};
            for (size_t j = 0; j < NSTEPS; j++) {
                const int64_t t = steps[j];
                void *g = rand_grad(n, stream_of(1, s, c, 3 + 2 * j), k.gd), *dg = dev_from(g, n * dtype_size(k.gd));
                const struct adamw_hparams h = adam_hparams(k.decay, t);
                memset(p, 0xff, n * sizeof *p);
                poison(dp, n * sizeof *p);
                struct param_writeback ho = writeback_of(k.wb, p, t), go = writeback_of(k.wb, dp, t);
                adamw_update_cpu(&h, n, w, m, v, g, k.gd, &ho, &fc);
                adamw_update(&h, n, dw, dm, dv, dg, k.gd, &go, &gc);
                expect_dev("adamw w", w, dw, n * 4, 4, n, t, k.name);
                expect_dev("adamw m", m, dm, n * 4, 4, n, t, k.name);
                expect_dev("adamw v", v, dv, n * 4, 4, n, t, k.name);
                expect_dev("adamw bf16 params", p, dp, n * sizeof *p, sizeof *p, n, t, k.name);
                free(g), cudaFree(dg);
            }
            expect_flops("adamw_update", &fc, &gc);
            assert_true(fc.other == 14.0 * (double)n * NSTEPS);
            free(w), free(m), free(v), free(p), cudaFree(dw), cudaFree(dm), cudaFree(dv), cudaFree(dp);
        }
}

/* ---- SGD: momentum, nesterov or not; the first step's buffer is output only ---- */

static void test_sgd(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    for (size_t s = 0; s < NSIZES; s++)
        for (int c = 0; c < NCONFIGS; c++) {
            const size_t n = sizes[s];
            const struct config k = config_of(c);
            float *w = rand_f32(n, stream_of(2, s, c, 0), -1.0f, 1.0f), *buf = malloc(n * 4);
            bf16 *p = malloc(n * sizeof *p);
            memset(buf, 0xff, n * 4);
            float *dw = dev_from(w, n * 4), *dbuf = dev_poisoned(n * 4);
            bf16 *dp = dev_poisoned(n * sizeof *p);
            struct exec_ctx fc = {0}, gc = {.space = MEM_DEVICE};
            for (size_t j = 0; j < NSTEPS; j++) {
                const int64_t t = steps[j];
                void *g = rand_grad(n, stream_of(2, s, c, 3 + 2 * j), k.gd), *dg = dev_from(g, n * dtype_size(k.gd));
                const struct sgd_hparams h = {.lr = 0.01f, .momentum = 0.9f, .weight_decay = k.decay ? 0.01f : 0.0f,
                                              .grad_scale = t % 2 ? 0.75f : 1.0f, .nesterov = c % 3 == 1,
                                              .first_step = j == 0};
                memset(p, 0xff, n * sizeof *p);
                poison(dp, n * sizeof *p);
                struct param_writeback ho = writeback_of(k.wb, p, t), go = writeback_of(k.wb, dp, t);
                sgd_update_cpu(&h, n, w, buf, g, k.gd, &ho, &fc);
                sgd_update(&h, n, dw, dbuf, dg, k.gd, &go, &gc);
                expect_dev("sgd w", w, dw, n * 4, 4, n, t, k.name);
                expect_dev("sgd momentum buffer", buf, dbuf, n * 4, 4, n, t, k.name);
                expect_dev("sgd bf16 params", p, dp, n * sizeof *p, sizeof *p, n, t, k.name);
                free(g), cudaFree(dg);
            }
            expect_flops("sgd_update", &fc, &gc);
            assert_true(fc.other == 9.0 * (double)n * NSTEPS);
            free(w), free(buf), free(p), cudaFree(dw), cudaFree(dbuf), cudaFree(dp);
        }
}

/* ---- 8-bit AdamW ---- */

static struct qmap_index *index_of(const float *map) {
    struct qmap_index *ix = malloc(sizeof *ix);
    assert_non_null(ix);
    qmap_index_build(ix, map);
    return ix;
}

static void test_adamw8bit(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    float ms[QMAP_SIZE], mu[QMAP_SIZE];
    qmap_dynamic(ms, true);
    qmap_dynamic(mu, false);
    struct qmap_index *ixs = index_of(ms), *ixu = index_of(mu); /* the CPU's fast search, as the trainer's */
    for (size_t s = 0; s < NSIZES; s++)
        for (int c = 0; c < NCONFIGS; c++) {
            const size_t n = sizes[s], nb = adamw8bit_blocks(n);
            const struct config k = config_of(c);
            const bool zero_state = c % 2 == 0; /* else random codes and absmax */
            float *w = rand_f32(n, stream_of(3, s, c, 0), -1.0f, 1.0f);
            uint8_t *q1 = calloc(n, 1), *q2 = calloc(n, 1);
            float *a1 = calloc(nb, 4), *a2 = calloc(nb, 4);
            bf16 *p = malloc(n * sizeof *p);
            assert_true(q1 && q2 && a1 && a2 && p);
            if (!zero_state) {
                for (size_t i = 0; i < n; i++) {
                    q1[i] = (uint8_t)rng_u32(seed, stream_of(3, s, c, 1), i);
                    q2[i] = (uint8_t)rng_u32(seed, stream_of(3, s, c, 2), i);
                }
                for (size_t b = 0; b < nb; b++) {
                    a1[b] = uniform(stream_of(3, s, c, 1) + 1, b, 1e-4f, 0.1f);
                    a2[b] = uniform(stream_of(3, s, c, 2) + 1, b, 1e-8f, 1e-2f);
                }
            }
            uint8_t *dq1 = dev_from(q1, n), *dq2 = dev_from(q2, n);
            float *dw = dev_from(w, n * 4), *da1 = dev_from(a1, nb * 4), *da2 = dev_from(a2, nb * 4);
            bf16 *dp = dev_poisoned(n * sizeof *p);
            struct exec_ctx fc = {0}, gc = {.space = MEM_DEVICE};
            for (size_t j = 0; j < NSTEPS; j++) {
                const int64_t t = steps[j];
                void *g = rand_grad(n, stream_of(3, s, c, 3 + 2 * j), k.gd);
                for (size_t i = 5; i < n; i += 97) set_grad(g, k.gd, i, NAN);
                for (size_t i = 7; i < n; i += 101) set_grad(g, k.gd, i, i % 2 ? INFINITY : -INFINITY);
                if (zero_state && j == 0) /* a block that stays all zero: absmax 0, the zero codes */
                    for (size_t i = 256; i < n && i < 512; i++) set_grad(g, k.gd, i, 0.0f);
                void *dg = dev_from(g, n * dtype_size(k.gd));
                const struct adamw_hparams h = adam_hparams(k.decay, t);
                memset(p, 0xff, n * sizeof *p);
                poison(dp, n * sizeof *p);
                struct param_writeback ho = writeback_of(k.wb, p, t), go = writeback_of(k.wb, dp, t);
                adamw8bit_update_cpu(&h, n, w, q1, q2, a1, a2, ms, mu, ixs, ixu, g, k.gd, &ho, &fc);
                adamw8bit_update(&h, n, dw, dq1, dq2, da1, da2, ms, mu, ixs, ixu, dg, k.gd, &go, &gc);
                expect_dev("adamw8bit w", w, dw, n * 4, 4, n, t, k.name);
                expect_dev("adamw8bit m codes", q1, dq1, n, 1, n, t, k.name);
                expect_dev("adamw8bit v codes", q2, dq2, n, 1, n, t, k.name);
                expect_dev("adamw8bit m absmax", a1, da1, nb * 4, 4, n, t, k.name);
                expect_dev("adamw8bit v absmax", a2, da2, nb * 4, 4, n, t, k.name);
                expect_dev("adamw8bit bf16 params", p, dp, n * sizeof *p, sizeof *p, n, t, k.name);
                if (zero_state && j == 0 && n >= 512) assert_true(a1[1] == 0.0f && a2[1] == 0.0f && q1[300] == q1[511]);
                free(g), cudaFree(dg);
            }
            expect_flops("adamw8bit_update", &fc, &gc);
            assert_true(fc.other == 24.0 * (double)n * NSTEPS);
            free(w), free(q1), free(q2), free(a1), free(a2), free(p);
            cudaFree(dw), cudaFree(dq1), cudaFree(dq2), cudaFree(da1), cudaFree(da2), cudaFree(dp);
        }
    free(ixs), free(ixu);
}

/* ---- Lion ---- */

static void test_lion(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    for (size_t s = 0; s < NSIZES; s++)
        for (int c = 0; c < NCONFIGS; c++) {
            const size_t n = sizes[s];
            const struct config k = config_of(c);
            float *w = rand_f32(n, stream_of(6, s, c, 0), -1.0f, 1.0f), *m = rand_f32(n, stream_of(6, s, c, 1), -0.01f, 0.01f);
            bf16 *p = malloc(n * sizeof *p);
            float *dw = dev_from(w, n * 4), *dm = dev_from(m, n * 4);
            bf16 *dp = dev_poisoned(n * sizeof *p);
            struct exec_ctx fc = {0}, gc = {.space = MEM_DEVICE};
            for (size_t j = 0; j < NSTEPS; j++) {
                const int64_t t = steps[j];
                void *g = rand_grad(n, stream_of(6, s, c, 3 + 2 * j), k.gd);
                if (n > 3) set_grad(g, k.gd, 3, 0.0f); /* a zero interpolation where m is 0 too: sign 0 */
                void *dg = dev_from(g, n * dtype_size(k.gd));
                const struct lion_hparams h = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.99f,
                                               .weight_decay = k.decay ? 0.1f : 0.0f, .grad_scale = t % 2 ? 0.75f : 1.0f};
                memset(p, 0xff, n * sizeof *p);
                poison(dp, n * sizeof *p);
                struct param_writeback ho = writeback_of(k.wb, p, t), go = writeback_of(k.wb, dp, t);
                lion_update_cpu(&h, n, w, m, g, k.gd, &ho, &fc);
                lion_update(&h, n, dw, dm, dg, k.gd, &go, &gc);
                expect_dev("lion w", w, dw, n * 4, 4, n, t, k.name);
                expect_dev("lion m", m, dm, n * 4, 4, n, t, k.name);
                expect_dev("lion bf16 params", p, dp, n * sizeof *p, sizeof *p, n, t, k.name);
                free(g), cudaFree(dg);
            }
            expect_flops("lion_update", &fc, &gc);
            assert_true(fc.other == 11.0 * (double)n * NSTEPS);
            free(w), free(m), free(p), cudaFree(dw), cudaFree(dm), cudaFree(dp);
        }
}

/* ---- the one-state 8-bit rules: sgd8bit and lion8bit ---- */

static void test_onestate8bit(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    float ms[QMAP_SIZE];
    qmap_dynamic(ms, true);
    struct qmap_index *ixs = index_of(ms);
    for (int rule = 0; rule < 2; rule++) /* 0: sgd8bit, 1: lion8bit */
        for (size_t s = 0; s < NSIZES; s++)
            for (int c = 0; c < NCONFIGS; c++) {
                const size_t n = sizes[s], nb = adamw8bit_blocks(n);
                const struct config k = config_of(c);
                const bool zero_state = c % 2 == 0;
                float *w = rand_f32(n, stream_of(7 + rule, s, c, 0), -1.0f, 1.0f);
                uint8_t *q = calloc(n, 1);
                float *a = calloc(nb, 4);
                bf16 *p = malloc(n * sizeof *p);
                assert_true(q && a && p);
                if (!zero_state) {
                    for (size_t i = 0; i < n; i++) q[i] = (uint8_t)rng_u32(seed, stream_of(7 + rule, s, c, 1), i);
                    for (size_t b = 0; b < nb; b++) a[b] = uniform(stream_of(7 + rule, s, c, 1) + 1, b, 1e-4f, 0.1f);
                }
                uint8_t *dq = dev_from(q, n);
                float *dw = dev_from(w, n * 4), *da = dev_from(a, nb * 4);
                bf16 *dp = dev_poisoned(n * sizeof *p);
                struct exec_ctx fc = {0}, gc = {.space = MEM_DEVICE};
                for (size_t j = 0; j < NSTEPS; j++) {
                    const int64_t t = steps[j];
                    void *g = rand_grad(n, stream_of(7 + rule, s, c, 3 + 2 * j), k.gd);
                    for (size_t i = 5; i < n; i += 97) set_grad(g, k.gd, i, NAN);
                    for (size_t i = 7; i < n; i += 101) set_grad(g, k.gd, i, i % 2 ? INFINITY : -INFINITY);
                    if (zero_state && j == 0)
                        for (size_t i = 256; i < n && i < 512; i++) set_grad(g, k.gd, i, 0.0f);
                    void *dg = dev_from(g, n * dtype_size(k.gd));
                    memset(p, 0xff, n * sizeof *p);
                    poison(dp, n * sizeof *p);
                    struct param_writeback ho = writeback_of(k.wb, p, t), go = writeback_of(k.wb, dp, t);
                    const float gs = t % 2 ? 0.75f : 1.0f;
                    if (rule == 0) {
                        const struct sgd_hparams h = {.lr = 0.01f, .momentum = 0.9f, .weight_decay = k.decay ? 0.01f : 0.0f,
                                                      .grad_scale = gs, .nesterov = c % 3 == 1, .first_step = j == 0};
                        sgd8bit_update_cpu(&h, n, w, q, a, ms, ixs, g, k.gd, &ho, &fc);
                        sgd8bit_update(&h, n, dw, dq, da, ms, ixs, dg, k.gd, &go, &gc);
                    } else {
                        const struct lion_hparams h = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.99f,
                                                       .weight_decay = k.decay ? 0.1f : 0.0f, .grad_scale = gs};
                        lion8bit_update_cpu(&h, n, w, q, a, ms, ixs, g, k.gd, &ho, &fc);
                        lion8bit_update(&h, n, dw, dq, da, ms, ixs, dg, k.gd, &go, &gc);
                    }
                    const char *name = rule == 0 ? "sgd8bit" : "lion8bit";
                    expect_dev(name, w, dw, n * 4, 4, n, t, k.name);
                    expect_dev(name, q, dq, n, 1, n, t, k.name);
                    expect_dev(name, a, da, nb * 4, 4, n, t, k.name);
                    expect_dev(name, p, dp, n * sizeof *p, sizeof *p, n, t, k.name);
                    if (zero_state && j == 0 && n >= 512) assert_true(a[1] == 0.0f);
                    free(g), cudaFree(dg);
                }
                expect_flops(rule == 0 ? "sgd8bit_update" : "lion8bit_update", &fc, &gc);
                assert_true(fc.other == (rule == 0 ? 14.0 : 16.0) * (double)n * NSTEPS);
                free(w), free(q), free(a), free(p), cudaFree(dw), cudaFree(dq), cudaFree(da), cudaFree(dp);
            }
    free(ixs);
}

/* ---- the 8-bit codec of checkpoints: fp32 side on the device and on the host ---- */

static void test_codec(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    for (int sgn = 0; sgn < 2; sgn++) {
        float map[QMAP_SIZE];
        qmap_dynamic(map, sgn == 1);
        struct qmap_index *ix = index_of(map);
        for (size_t s = 0; s < NSIZES; s++) {
            const size_t n = sizes[s], nb = adamw8bit_blocks(n);
            float *x = malloc(n * 4), *out = malloc(n * 4), *hout = malloc(n * 4);
            uint8_t *q = malloc(n);
            float *a = malloc(nb * 4);
            assert_true(x && out && hout && q && a);
            for (size_t i = 0; i < n; i++) {
                float u = uniform(stream_of(4, s, sgn, 0), i, -1.0f, 1.0f);
                x[i] = (sgn ? u : fabsf(u)) * powf(10.0f, uniform(stream_of(4, s, sgn, 1), i, -6.0f, 0.0f));
                if (i % 89 == 3) x[i] = NAN;
                if (i >= 256 && i < 512) x[i] = 0.0f; /* an all-zero block: absmax 0 */
            }
            adamw8bit_quantize_cpu(map, ix, x, n, q, a);
            adamw8bit_dequantize_cpu(map, q, a, n, out);
            for (int host_side = 0; host_side < 2; host_side++) {
                const char *cfg = host_side ? "fp32 side in host memory" : "fp32 side in device memory";
                float *dx = dev_from(x, n * 4), *dout = dev_poisoned(n * 4), *da = dev_poisoned(nb * 4);
                uint8_t *dq = dev_poisoned(n);
                adamw8bit_quantize_cuda(map, host_side ? x : dx, !host_side, n, dq, da);
                expect_dev("adamw8bit_quantize codes", q, dq, n, 1, n, 0, cfg);
                expect_dev("adamw8bit_quantize absmax", a, da, nb * 4, 4, n, 0, cfg);
                if (host_side) {
                    memset(hout, 0xff, n * 4);
                    adamw8bit_dequantize_cuda(map, dq, da, n, hout, false);
                    assert_memory_equal(hout, out, n * 4);
                } else {
                    adamw8bit_dequantize_cuda(map, dq, da, n, dout, true);
                    expect_dev("adamw8bit_dequantize", out, dout, n * 4, 4, n, 0, cfg);
                }
                cudaFree(dx), cudaFree(dout), cudaFree(da), cudaFree(dq);
            }
            free(x), free(out), free(hout), free(q), free(a);
        }
        free(ix);
    }
}

/* Runs everywhere: host-space calls take the CPU's functions, bit for bit and
 * FLOP for FLOP, with or without a GPU (--device cpu in this build). */
static void test_dispatch_host(void **state) {
    (void)state;
    const size_t n = 1000, nb = adamw8bit_blocks(n);
    float *w1 = rand_f32(n, 900, -1.0f, 1.0f), *w2 = malloc(n * 4), *m1 = calloc(n, 4), *m2 = calloc(n, 4);
    float *v1 = calloc(n, 4), *v2 = calloc(n, 4), *w0 = malloc(n * 4);
    float *g = rand_grad(n, 901, DTYPE_FP32);
    bf16 *p1 = malloc(n * 2), *p2 = malloc(n * 2);
    memcpy(w2, w1, n * 4);
    memcpy(w0, w1, n * 4);
    struct exec_ctx f1 = {0}, f2 = {0};
    const struct adamw_hparams h = adam_hparams(true, 1);
    struct param_writeback o1 = writeback_of(WB_STOCHASTIC, p1, 1), o2 = writeback_of(WB_STOCHASTIC, p2, 1);
    adamw_update(&h, n, w1, m1, v1, g, DTYPE_FP32, &o1, &f1);
    adamw_update_cpu(&h, n, w2, m2, v2, g, DTYPE_FP32, &o2, &f2);
    assert_memory_equal(w1, w2, n * 4);
    assert_memory_equal(v1, v2, n * 4);
    assert_memory_equal(p1, p2, n * 2);
    assert_true(memcmp(w0, w1, n * 4) != 0); /* the update moved the weights */
    const struct sgd_hparams sh = {.lr = 0.01f, .momentum = 0.9f, .grad_scale = 1.0f, .first_step = true};
    sgd_update(&sh, n, w1, m1, g, DTYPE_FP32, &o1, &f1);
    sgd_update_cpu(&sh, n, w2, m2, g, DTYPE_FP32, &o2, &f2);
    assert_memory_equal(w1, w2, n * 4);
    assert_memory_equal(m1, m2, n * 4);
    float ms[QMAP_SIZE], mu[QMAP_SIZE];
    qmap_dynamic(ms, true);
    qmap_dynamic(mu, false);
    uint8_t *q1 = calloc(n, 1), *q2 = calloc(n, 1), *r1 = calloc(n, 1), *r2 = calloc(n, 1);
    float *a1 = calloc(nb, 4), *a2 = calloc(nb, 4), *b1 = calloc(nb, 4), *b2 = calloc(nb, 4);
    adamw8bit_update(&h, n, w1, q1, q2, a1, a2, ms, mu, NULL, NULL, g, DTYPE_FP32, &o1, &f1);
    adamw8bit_update_cpu(&h, n, w2, r1, r2, b1, b2, ms, mu, NULL, NULL, g, DTYPE_FP32, &o2, &f2);
    assert_memory_equal(w1, w2, n * 4);
    assert_memory_equal(q1, r1, n);
    assert_memory_equal(q2, r2, n);
    assert_memory_equal(a1, b1, nb * 4);
    assert_true(a1[0] > 0.0f && a2[0] > 0.0f);
    adamw8bit_dequantize(MEM_HOST, ms, q1, a1, n, m1);
    adamw8bit_dequantize_cpu(ms, q1, a1, n, m2);
    assert_memory_equal(m1, m2, n * 4);
    adamw8bit_quantize(MEM_HOST, ms, NULL, m1, n, q1, a1);
    adamw8bit_quantize_cpu(ms, NULL, m2, n, r1, b1);
    assert_memory_equal(q1, r1, n);
    assert_memory_equal(a1, b1, nb * 4);
    expect_flops("host dispatch", &f2, &f1);
    assert_true(f1.other == (14.0 + 9.0 + 24.0) * (double)n);
    free(w0), free(w1), free(w2), free(m1), free(m2), free(v1), free(v2), free(g), free(p1), free(p2);
    free(q1), free(q2), free(r1), free(r2), free(a1), free(a2), free(b1), free(b2);
}

int main(void) {
    seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test_optim_cuda: seed %llu\n", (unsigned long long)seed);
    const char *why = no_device();
    if (why) printf("test_optim_cuda: %s: every device test is skipped\n", why);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw), cmocka_unit_test(test_sgd),           cmocka_unit_test(test_adamw8bit),
        cmocka_unit_test(test_codec), cmocka_unit_test(test_dispatch_host),
        cmocka_unit_test(test_lion),  cmocka_unit_test(test_onestate8bit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
