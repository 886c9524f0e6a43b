/* The CUDA build's plain causal attention against the CPU's (make cuda-test).
 *
 * attention_forward_cuda/backward (model/cuda/attention.cu) run on device
 * copies of random inputs drawn afresh each run (the seed is printed), at
 * (B, T, C, NH) = (1,1,8,1), (2,7,12,3), (3,65,64,4), (2,128,96,2): T not
 * a multiple of the 32-lane softmax rows, one head and several, hs 8 to
 * 48. Every output (out, att, dqkv) and the backward's scratch are
 * poisoned (0xff bytes: NaN) first, with a poisoned guard past the end that
 * must survive. The reference is model/cpu/attention.c compiled as
 * attention_*_cpu (model/cpu/attention.c) on the same inputs; the backward gets
 * the CPU's probabilities on both sides, so it is compared alone. Its
 * scratch is attention_backward_scratch(B, T, NH) floats, which on the
 * device sets how many heads go at once (attention.cu): the backward runs
 * under 1, 3 and the default OpenMP thread count (groups of 1 head, of 3
 * heads with a shorter last group, of min(threads, B NH)). Bounds:
 *   att: |gpu - cpu| <= 1e-5 per element (probabilities, in [0, 1]); the
 *     masked upper triangle exactly +0.0 (bits 0) on both
 *   out, dqkv: normwise relative 1e-5 (max |gpu - cpu| <= 1e-5 max |cpu|),
 *     the GEMMs' and the softmax sums' other summation order (T <= 128,
 *     hs <= 48 here, inputs in [-1, 1))
 *   FLOP counters: gemm, attention and other equal the CPU's exactly
 *   the layers.h names on device memory: cuda_attention_*'s bits (the
 *     kernels are deterministic; selective recompute relies on it)
 * The bounds are reasoned (the CPU's own test holds att within 1e-6 of a
 * double reference), not yet calibrated on a GPU.
 * Without a GPU every device test says "skipped: no CUDA device" and the
 * program exits 0. One test needs no GPU and runs everywhere: attention_*
 * on host memory is the CPU's, bit for bit and FLOP for FLOP. */
#include <cuda_runtime.h>
#include <math.h>
#include <omp.h>
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

#include "../../model/cuda/layers_cuda.h"
#include "../../model/cpu/layers_cpu.h"
#include "layers.h"
#include "dtype.h"
#include "rng.h"
#include "cuda_fixture.h"

static uint64_t seed; /* set once in main, read by every test */

#define ATT_ABS 1e-5
#define REL 1e-5

/* (B, T, C, NH) */
static const int64_t shapes[][4] = {{1, 1, 8, 1}, {2, 7, 12, 3}, {3, 65, 64, 4}, {2, 128, 96, 2}};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

#define F(n) ((size_t)(n) * sizeof(float))

/* n uniform values in [-1, 1), stream by stream. */
static float *rand_f32(size_t n, uint64_t stream) {
    float *x = malloc(F(n ? n : 1));
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(seed, stream, i) * 2.0f - 1.0f;
    return x;
}

static float *host_nan(size_t n) {
    float *x = malloc(F(n ? n : 1));
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

/* Normwise: max |gpu - cpu| <= rel max |cpu|; a NaN fails. */
static void expect_close(const char *what, const int64_t *shape, const float *want, const float *got, size_t n,
                         double rel) {
    struct normwise e = normwise_diff(want, got, n, 0.0);
    if (!(e.worst <= rel * e.scale))
        fail_msg("%s (B %lld T %lld C %lld NH %lld): element %zu of %zu: cpu %.9g, gpu %.9g: |diff| %.3g > %.0e x "
                 "max|cpu| %.3g",
                 what, (long long)shape[0], (long long)shape[1], (long long)shape[2], (long long)shape[3], e.at, n,
                 (double)want[e.at], (double)got[e.at], e.worst, rel, e.scale);
}

/* att (B NH squares of T x T): causal entries within ATT_ABS, masked ones +0.0 on both sides. */
static void expect_att(const int64_t *shape, const float *want, const float *got) {
    const int64_t T = shape[1], squares = shape[0] * shape[3];
    for (int64_t s = 0; s < squares; s++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < T; j++) {
                size_t i = (size_t)((s * T + t) * T + j);
                bool masked = j > t;
                bool ok = masked ? f32_bits(got[i]) == 0 && f32_bits(want[i]) == 0
                                 : fabs((double)got[i] - want[i]) <= ATT_ABS;
                if (!ok)
                    fail_msg("attention_forward att (B %lld T %lld C %lld NH %lld): square %lld row %lld column %lld "
                             "(%s): cpu %.9g, gpu %.9g",
                             (long long)shape[0], (long long)T, (long long)shape[2], (long long)shape[3], (long long)s,
                             (long long)t, (long long)j, masked ? "masked: +0.0 expected" : "causal", (double)want[i],
                             (double)got[i]);
            }
}

static void expect_flops(const char *what, const struct exec_ctx *want, const struct exec_ctx *got) {
    if (want->gemm != got->gemm || want->attention != got->attention || want->other != got->other)
        fail_msg("%s: FLOPs gemm/attention/other: cpu %.17g/%.17g/%.17g, gpu %.17g/%.17g/%.17g", what, want->gemm,
                 want->attention, want->other, got->gemm, got->attention, got->other);
}

static void test_attention_forward(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    for (size_t s = 0; s < NSHAPES; s++) {
        const int64_t *sh = shapes[s], B = sh[0], T = sh[1], C = sh[2], NH = sh[3];
        const int64_t n_qkv = B * T * 3 * C, n_out = B * T * C, n_att = B * NH * T * T;
        float *qkv = rand_f32(n_qkv, 1 + s), *out = host_nan(n_out), *att = host_nan(n_att);
        float *d_qkv = dev_from(qkv, F(n_qkv)), *d_out = dev_poisoned(F(n_out)), *d_att = dev_poisoned(F(n_att));
        struct exec_ctx fc = {0}, gc = {0};
        attention_forward_cpu(out, att, qkv, B, T, C, NH, &fc);
        attention_forward_cuda(d_out, d_att, d_qkv, B, T, C, NH, &gc);
        float *got = back(d_att, F(n_att), "attention_forward att");
        expect_att(sh, att, got);
        free(got);
        got = back(d_out, F(n_out), "attention_forward out");
        expect_close("attention_forward out", sh, out, got, n_out, REL);
        free(got);
        expect_flops("attention_forward", &fc, &gc);
        assert_true(gc.attention == 4.0 * B * NH * T * T * (C / NH) && gc.other > 0.0 && gc.gemm == 0.0);
        cudaFree(d_qkv);
        free(qkv), free(out), free(att);
    }
}

static void test_attention_backward(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    const int default_threads = omp_get_max_threads();
    const int threads[] = {1, 3, default_threads};
    for (size_t s = 0; s < NSHAPES; s++) {
        const int64_t *sh = shapes[s], B = sh[0], T = sh[1], C = sh[2], NH = sh[3];
        const int64_t n_qkv = B * T * 3 * C, n_out = B * T * C, n_att = B * NH * T * T;
        float *qkv = rand_f32(n_qkv, 10 + s), *dout = rand_f32(n_out, 20 + s);
        float *out = host_nan(n_out), *att = host_nan(n_att);
        struct exec_ctx fwd = {0};
        attention_forward_cpu(out, att, qkv, B, T, C, NH, &fwd); /* the probabilities both backwards get */
        float *d_qkv = dev_from(qkv, F(n_qkv)), *d_dout = dev_from(dout, F(n_out)), *d_att = dev_from(att, F(n_att));
        for (size_t k = 0; k < sizeof threads / sizeof threads[0]; k++) {
            omp_set_num_threads(threads[k]);
            const size_t n_scratch = attention_backward_scratch(B, T, NH);
            float *dqkv = host_nan(n_qkv), *scratch = host_nan(n_scratch);
            float *d_dqkv = dev_poisoned(F(n_qkv)), *d_scratch = dev_poisoned(F(n_scratch));
            struct exec_ctx fc = {0}, gc = {0};
            attention_backward_cpu(dqkv, dout, qkv, att, scratch, B, T, C, NH, &fc);
            attention_backward_cuda(d_dqkv, d_dout, d_qkv, d_att, d_scratch, B, T, C, NH, &gc);
            char what[96];
            snprintf(what, sizeof what, "attention_backward dqkv (%d threads: %zu scratch squares)", threads[k],
                     n_scratch / (size_t)(T * T));
            float *got = back(d_dqkv, F(n_qkv), what);
            expect_close(what, sh, dqkv, got, n_qkv, REL);
            free(got);
            free(back(d_scratch, F(n_scratch), "attention_backward scratch"));
            expect_flops("attention_backward", &fc, &gc);
            assert_true(gc.attention == 8.0 * B * NH * T * T * (C / NH) && gc.other > 0.0 && gc.gemm == 0.0);
            free(dqkv), free(scratch);
        }
        omp_set_num_threads(default_threads);
        cudaFree(d_qkv), cudaFree(d_dout), cudaFree(d_att);
        free(qkv), free(dout), free(out), free(att);
    }
}

/* The layers.h names on a MEM_DEVICE counter run on the device: the same bits as
 * cuda_attention_* called directly (and so deterministic run to run). */
static void test_dispatch_device(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    const int64_t *sh = shapes[2], B = sh[0], T = sh[1], C = sh[2], NH = sh[3];
    const int64_t n_qkv = B * T * 3 * C, n_out = B * T * C, n_att = B * NH * T * T;
    const size_t n_scratch = attention_backward_scratch(B, T, NH);
    float *qkv = rand_f32(n_qkv, 30), *dout = rand_f32(n_out, 31);
    float *d_qkv = dev_from(qkv, F(n_qkv)), *d_dout = dev_from(dout, F(n_out));
    float *r[2][3]; /* [direct, dispatched][out, att, dqkv] on the host */
    struct exec_ctx fc[2] = {{.space = MEM_DEVICE}, {.space = MEM_DEVICE}};
    for (int via = 0; via < 2; via++) {
        float *d_out = dev_poisoned(F(n_out)), *d_att = dev_poisoned(F(n_att)), *d_dqkv = dev_poisoned(F(n_qkv));
        float *d_scratch = dev_poisoned(F(n_scratch));
        if (via == 0) {
            attention_forward_cuda(d_out, d_att, d_qkv, B, T, C, NH, &fc[via]);
            attention_backward_cuda(d_dqkv, d_dout, d_qkv, d_att, d_scratch, B, T, C, NH, &fc[via]);
        } else {
            attention_forward(d_out, d_att, d_qkv, B, T, C, NH, &fc[via]);
            attention_backward(d_dqkv, d_dout, d_qkv, d_att, d_scratch, B, T, C, NH, &fc[via]);
        }
        r[via][0] = back(d_out, F(n_out), "out");
        r[via][1] = back(d_att, F(n_att), "att");
        r[via][2] = back(d_dqkv, F(n_qkv), "dqkv");
        free(back(d_scratch, F(n_scratch), "scratch"));
    }
    assert_memory_equal(r[0][0], r[1][0], F(n_out));
    assert_memory_equal(r[0][1], r[1][1], F(n_att));
    assert_memory_equal(r[0][2], r[1][2], F(n_qkv));
    expect_flops("attention (dispatched to the device)", &fc[0], &fc[1]);
    for (int via = 0; via < 2; via++)
        for (int i = 0; i < 3; i++) free(r[via][i]);
    cudaFree(d_qkv), cudaFree(d_dout);
    free(qkv), free(dout);
}

/* Runs everywhere: host-space calls take the CPU's attention, bit for bit and
 * FLOP for FLOP, with or without a GPU (--device cpu in this build). */
static void test_dispatch_host(void **state) {
    (void)state;
    const int64_t *sh = shapes[1], B = sh[0], T = sh[1], C = sh[2], NH = sh[3];
    const int64_t n_qkv = B * T * 3 * C, n_out = B * T * C, n_att = B * NH * T * T;
    const size_t n_scratch = attention_backward_scratch(B, T, NH);
    float *qkv = rand_f32(n_qkv, 40), *dout = rand_f32(n_out, 41);
    float *o[2], *a[2], *d[2], *scratch = host_nan(n_scratch);
    struct exec_ctx fc[2] = {{0}, {0}};
    for (int via = 0; via < 2; via++) {
        o[via] = host_nan(n_out), a[via] = host_nan(n_att), d[via] = host_nan(n_qkv);
        if (via == 0) {
            attention_forward_cpu(o[via], a[via], qkv, B, T, C, NH, &fc[via]);
            attention_backward_cpu(d[via], dout, qkv, a[via], scratch, B, T, C, NH, &fc[via]);
        } else {
            attention_forward(o[via], a[via], qkv, B, T, C, NH, &fc[via]);
            attention_backward(d[via], dout, qkv, a[via], scratch, B, T, C, NH, &fc[via]);
        }
    }
    assert_memory_equal(o[0], o[1], F(n_out));
    assert_memory_equal(a[0], a[1], F(n_att));
    assert_memory_equal(d[0], d[1], F(n_qkv));
    for (int64_t i = 0; i < n_qkv; i++) assert_false(isnan(d[1][i])); /* every entry written */
    expect_flops("attention (host)", &fc[0], &fc[1]);
    assert_true(fc[1].attention == 12.0 * B * NH * T * T * (C / NH) && fc[1].other > 0.0 && fc[1].gemm == 0.0);
    for (int via = 0; via < 2; via++) free(o[via]), free(a[via]), free(d[via]);
    free(qkv), free(dout), free(scratch);
}

int main(void) {
    seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test_attention_cuda: seed %llu\n", (unsigned long long)seed);
    const char *why = no_device();
    if (why) printf("test_attention_cuda: %s: every device test is skipped\n", why);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_forward),
        cmocka_unit_test(test_attention_backward),
        cmocka_unit_test(test_dispatch_device),
        cmocka_unit_test(test_dispatch_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
