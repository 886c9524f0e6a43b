/* The CUDA build's buffer operations against the CPU's (make cuda-test).
 *
 * Each CUDA operation (buf_*_cuda, include/bufops.h) runs on
 * device copies of random inputs, drawn afresh each run (the seed is
 * printed), at sizes that straddle the kernels' block of 256 and are
 * mostly not multiples of it; its output buffer is poisoned (0xff bytes)
 * first and has a poisoned guard past the end, which must survive. The
 * reference is the CPU implementation (buf_*_cpu: model/cpu/bufops.c).
 * Bounds:
 *   zero, copy, widen, narrow, round, from/to fp32: bit for bit, NaN
 *     payloads included (no arithmetic: the same bit operations)
 *   accumulate, add: bit for bit, except that where the CPU gives a NaN
 *     the GPU must give a NaN (x86 and CUDA propagate different NaN
 *     payloads through an add); every other value is one IEEE fp32 add
 *     and, for bf16, one RNE rounding on both sides
 *   sum of squares: |gpu - cpu| <= 2 n 2^-53 x cpu (both sum n
 *     non-negative doubles, in different orders)
 * Without a GPU every device test says "skipped: no CUDA device" and the
 * program exits 0. Two tests need no GPU and run everywhere: buf_* on host
 * memory takes the CPU path in this build, and a device allocation that
 * fails is a recorded failure (include/mem.h), not an exit. */
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

#include "bufops.h"
#include "../../model/bufops_ops.h"
#include "../../model/cuda/bufops_kernels.h"
#include "../../model/cuda/cuda_device.h"
#include "mem.h"
#include "rng.h"
#include "cuda_fixture.h"

static const size_t SIZES[] = {1, 3, BUFOPS_BLOCK - 1, BUFOPS_BLOCK, BUFOPS_BLOCK + 1, 1000, 4099, 65537,
                               (1u << 20) + 7};
enum { NSIZES = sizeof SIZES / sizeof SIZES[0] };
static uint64_t seed; /* set once in main, read by every test */


/* Half random bit patterns (every class: NaN, Inf, denormals, ties of
 * the bf16 rounding), half values near 1 in magnitude of either sign. */
static void fill_f32(float *x, size_t n, uint64_t stream, int finite_only) {
    for (size_t i = 0; i < n; i++) {
        uint32_t r = rng_u32(seed, stream, 2 * i);
        if (!finite_only && (r & 1)) {
            uint32_t bits = rng_u32(seed, stream, 2 * i + 1);
            if (r & 2) bits = (bits & 0xffff0000u) | 0x8000u; /* exactly half way between two bf16 */
            memcpy(&x[i], &bits, sizeof bits);
        } else {
            x[i] = (rng_uniform(seed, stream, 2 * i + 1) - 0.5f) * 8.0f;
        }
    }
}

static void fill_bf16(bf16 *x, size_t n, uint64_t stream, int finite_only) {
    for (size_t i = 0; i < n; i++) {
        uint32_t r = rng_u32(seed, stream, i);
        x[i] = finite_only ? f32_to_bf16((rng_uniform(seed, stream ^ 77, i) - 0.5f) * 8.0f) : (bf16)(r >> 16);
    }
}

/* A device buffer of bytes + GUARD, all 0xff. */
/* Copies bytes back and checks the guard is still 0xff. */
static void *host_from(const void *dev, size_t bytes) {
    unsigned char *h = malloc(bytes + GUARD);
    assert_non_null(h);
    assert_int_equal(cudaMemcpy(h, dev, bytes + GUARD, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = bytes; i < bytes + GUARD; i++)
        if (h[i] != 0xff) fail_msg("byte %zu past the end of a %zu-byte output was written", i - bytes, bytes);
    return h;
}

static void expect_bytes_equal(const void *want, const void *got, size_t bytes, const char *op, size_t n) {
    if (memcmp(want, got, bytes) == 0) return;
    const unsigned char *a = want, *b = got;
    size_t i = 0;
    while (a[i] == b[i]) i++;
    fail_msg("%s, n = %zu: byte %zu differs (cpu 0x%02x, gpu 0x%02x)", op, n, i, a[i], b[i]);
}

/* accumulate/add: bit for bit, or NaN where the CPU has NaN. */
static void expect_f32_equal(const float *want, const float *got, size_t n, const char *op) {
    for (size_t i = 0; i < n; i++) {
        if (isnan(want[i]) && isnan(got[i])) continue;
        if (f32_bits(want[i]) != f32_bits(got[i]))
            fail_msg("%s, n = %zu: element %zu: cpu %a (0x%08x), gpu %a (0x%08x)", op, n, i, (double)want[i],
                     f32_bits(want[i]), (double)got[i], f32_bits(got[i]));
    }
}

static void expect_bf16_equal(const bf16 *want, const bf16 *got, size_t n, const char *op) {
    for (size_t i = 0; i < n; i++) {
        if (isnan(bf16_to_f32(want[i])) && isnan(bf16_to_f32(got[i]))) continue;
        if (want[i] != got[i])
            fail_msg("%s, n = %zu: element %zu: cpu 0x%04x, gpu 0x%04x", op, n, i, want[i], got[i]);
    }
}

static void test_zero_and_copy(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    for (int s = 0; s < NSIZES; s++) {
        size_t bytes = SIZES[s] * 4 - 1; /* odd byte counts too */
        unsigned char *src = malloc(bytes), *want = malloc(bytes);
        fill_f32((float *)(void *)want, bytes / 4, 1, 0);
        memcpy(src, want, bytes);
        void *d = dev_poisoned(bytes);
        buf_zero_cuda(d, bytes);
        unsigned char *got = host_from(d, bytes);
        buf_zero_cpu(want, bytes);
        expect_bytes_equal(want, got, bytes, "buf_zero", bytes);
        free(got);
        /* host -> device, device -> device, device -> host */
        buf_copy_cuda(d, src, bytes);
        void *d2 = dev_poisoned(bytes);
        buf_copy_cuda(d2, d, bytes);
        got = host_from(d2, bytes);
        expect_bytes_equal(src, got, bytes, "buf_copy (device to device)", bytes);
        memset(got, 0, bytes);
        buf_copy_cuda(got, d2, bytes);
        expect_bytes_equal(src, got, bytes, "buf_copy (device to host)", bytes);
        free(got);
        free(src);
        free(want);
        cudaFree(d);
        cudaFree(d2);
    }
}

static void test_widen_narrow_round(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    for (int s = 0; s < NSIZES; s++) {
        size_t n = SIZES[s];
        float *f = malloc(n * 4), *fw = malloc(n * 4);
        bf16 *h = malloc(n * 2), *hw = malloc(n * 2);
        fill_f32(f, n, 10 + (uint64_t)s, 0);
        fill_bf16(h, n, 20 + (uint64_t)s, 0);
        for (int dt = 0; dt < 2; dt++) {
            enum dtype t = dt ? DTYPE_BF16 : DTYPE_FP32;
            /* from_fp32: narrow (bf16) or copy (fp32) */
            float *df = dev_from(f, n * 4);
            void *dout = dev_poisoned(n * dtype_size(t));
            buf_from_fp32_cuda(dout, t, df, n);
            void *got = host_from(dout, n * dtype_size(t));
            buf_from_fp32_cpu(t == DTYPE_FP32 ? (void *)fw : (void *)hw, t, f, n);
            expect_bytes_equal(t == DTYPE_FP32 ? (void *)fw : (void *)hw, got, n * dtype_size(t), "buf_from_fp32",
                               n);
            free(got);
            cudaFree(dout);
            /* to_fp32: widen (bf16) or copy (fp32) */
            void *din = dev_from(t == DTYPE_FP32 ? (void *)f : (void *)h, n * dtype_size(t));
            float *dfo = dev_poisoned(n * 4);
            buf_to_fp32_cuda(dfo, din, t, n);
            got = host_from(dfo, n * 4);
            buf_to_fp32_cpu(fw, t == DTYPE_FP32 ? (void *)f : (void *)h, t, n);
            expect_bytes_equal(fw, got, n * 4, "buf_to_fp32", n);
            free(got);
            cudaFree(din);
            cudaFree(dfo);
            cudaFree(df);
        }
        /* widen, narrow, round on their own names */
        bf16 *dh = dev_from(h, n * 2);
        float *dfw = dev_poisoned(n * 4);
        buf_widen_cuda(dfw, dh, n);
        void *got = host_from(dfw, n * 4);
        buf_widen_cpu(fw, h, n);
        expect_bytes_equal(fw, got, n * 4, "buf_widen", n);
        free(got);
        float *df = dev_from(f, n * 4);
        bf16 *dhn = dev_poisoned(n * 2);
        buf_narrow_cuda(dhn, df, n);
        got = host_from(dhn, n * 2);
        buf_narrow_cpu(hw, f, n);
        expect_bytes_equal(hw, got, n * 2, "buf_narrow", n);
        free(got);
        buf_round_bf16_cuda(df, n);
        got = host_from(df, n * 4);
        memcpy(fw, f, n * 4);
        buf_round_bf16_cpu(fw, n);
        expect_bytes_equal(fw, got, n * 4, "buf_round_bf16", n);
        free(got);
        /* round_narrow, from element 0 and (misaligned) from element 1 */
        for (size_t at = 0; at < 2 && at < n; at++) {
            float *dx = dev_from(f, n * 4);
            bf16 *dhr = dev_poisoned(n * 2);
            buf_round_narrow_cuda(dhr + at, dx + at, n - at);
            memcpy(fw, f, n * 4);
            buf_round_narrow_cpu(hw + at, fw + at, n - at);
            got = host_from(dx, n * 4);
            expect_bytes_equal(fw, got, n * 4, at ? "buf_round_narrow x (misaligned)" : "buf_round_narrow x", n);
            free(got);
            got = host_from(dhr, n * 2);
            expect_bytes_equal(hw + at, (bf16 *)got + at, (n - at) * 2,
                               at ? "buf_round_narrow dst (misaligned)" : "buf_round_narrow dst", n - at);
            free(got);
            cudaFree(dx);
            cudaFree(dhr);
        }
        /* the same from one element in: views the four-at-a-time kernels
         * cannot take (misaligned), so the scalar ones do it all */
        if (n > 1) {
            buf_widen_cuda(dfw + 1, dh + 1, n - 1);
            got = host_from(dfw, n * 4);
            buf_widen_cpu(fw, h, n);
            expect_bytes_equal(fw + 1, (float *)got + 1, (n - 1) * 4, "buf_widen (misaligned)", n - 1);
            free(got);
            float *dfm = dev_from(f, n * 4);
            buf_narrow_cuda(dhn + 1, dfm + 1, n - 1);
            got = host_from(dhn, n * 2);
            buf_narrow_cpu(hw, f, n);
            expect_bytes_equal(hw + 1, (bf16 *)got + 1, (n - 1) * 2, "buf_narrow (misaligned)", n - 1);
            free(got);
            buf_round_bf16_cuda(dfm + 1, n - 1);
            got = host_from(dfm, n * 4);
            memcpy(fw, f, n * 4);
            buf_round_bf16_cpu(fw + 1, n - 1);
            expect_bytes_equal(fw, got, n * 4, "buf_round_bf16 (misaligned)", n - 1);
            free(got);
            cudaFree(dfm);
        }
        cudaFree(dh);
        cudaFree(dfw);
        cudaFree(df);
        cudaFree(dhn);
        free(f);
        free(fw);
        free(h);
        free(hw);
    }
}

static void test_accumulate_add(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    for (int s = 0; s < NSIZES; s++) {
        size_t n = SIZES[s];
        float *a = malloc(n * 4), *b = malloc(n * 4);
        bf16 *ha = malloc(n * 2), *hb = malloc(n * 2);
        fill_f32(a, n, 30 + (uint64_t)s, 0);
        fill_f32(b, n, 40 + (uint64_t)s, 0);
        fill_bf16(ha, n, 50 + (uint64_t)s, 0);
        fill_bf16(hb, n, 60 + (uint64_t)s, 0);
        float *db = dev_from(b, n * 4);
        /* fp32: accumulate and add are the same sum */
        float *da = dev_from(a, n * 4);
        buf_accumulate_cuda(da, DTYPE_FP32, db, n);
        float *got = host_from(da, n * 4);
        float *want = malloc(n * 4);
        memcpy(want, a, n * 4);
        buf_accumulate_cpu(want, DTYPE_FP32, b, n);
        expect_f32_equal(want, got, n, "buf_accumulate fp32");
        free(got);
        cudaFree(da);
        da = dev_from(a, n * 4);
        buf_add_cuda(da, db, DTYPE_FP32, n);
        got = host_from(da, n * 4);
        expect_f32_equal(want, got, n, "buf_add fp32");
        free(got);
        cudaFree(da);
        /* bf16 += fp32, bf16 += bf16 */
        bf16 *dha = dev_from(ha, n * 2), *hwant = malloc(n * 2);
        buf_accumulate_cuda(dha, DTYPE_BF16, db, n);
        bf16 *hgot = host_from(dha, n * 2);
        memcpy(hwant, ha, n * 2);
        buf_accumulate_cpu(hwant, DTYPE_BF16, b, n);
        expect_bf16_equal(hwant, hgot, n, "buf_accumulate bf16");
        free(hgot);
        cudaFree(dha);
        dha = dev_from(ha, n * 2);
        bf16 *dhb = dev_from(hb, n * 2);
        buf_add_cuda(dha, dhb, DTYPE_BF16, n);
        hgot = host_from(dha, n * 2);
        memcpy(hwant, ha, n * 2);
        buf_add_cpu(hwant, hb, DTYPE_BF16, n);
        expect_bf16_equal(hwant, hgot, n, "buf_add bf16");
        free(hgot);
        cudaFree(dha);
        cudaFree(dhb);
        cudaFree(db);
        free(a);
        free(b);
        free(ha);
        free(hb);
        free(want);
        free(hwant);
    }
}

static void test_sum_squares(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    for (int s = 0; s < NSIZES; s++) {
        size_t n = SIZES[s];
        float *f = malloc(n * 4);
        bf16 *h = malloc(n * 2);
        fill_f32(f, n, 70 + (uint64_t)s, 1);
        fill_bf16(h, n, 80 + (uint64_t)s, 1);
        void *df = dev_from(f, n * 4), *dh = dev_from(h, n * 2);
        double want[2] = {buf_sum_squares_cpu(f, DTYPE_FP32, n), buf_sum_squares_cpu(h, DTYPE_BF16, n)};
        double got[2] = {buf_sum_squares_cuda(df, DTYPE_FP32, n), buf_sum_squares_cuda(dh, DTYPE_BF16, n)};
        for (int k = 0; k < 2; k++) {
            double bound = 2.0 * (double)n * ldexp(1.0, -53) * want[k];
            if (!(fabs(got[k] - want[k]) <= bound))
                fail_msg("buf_sum_squares %s, n = %zu: cpu %.17g, gpu %.17g, |diff| %.3g > bound %.3g",
                         k ? "bf16" : "fp32", n, want[k], got[k], fabs(got[k] - want[k]), bound);
        }
        /* the same n gives the same sum on every call (a fixed order) */
        assert_true(buf_sum_squares_cuda(df, DTYPE_FP32, n) == got[0]);
        cudaFree(df);
        cudaFree(dh);
        free(f);
        free(h);
    }
}

/* buf_* on MEM_DEVICE takes the device path: spot-check one op. */
static void test_dispatch_device(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    size_t n = 1000;
    float *f = malloc(n * 4);
    bf16 *want = malloc(n * 2);
    fill_f32(f, n, 90, 0);
    float *df = dev_from(f, n * 4);
    bf16 *dh = dev_poisoned(n * 2);
    buf_narrow(MEM_DEVICE, dh, df, n);
    bf16 *got = host_from(dh, n * 2);
    buf_narrow_cpu(want, f, n);
    expect_bytes_equal(want, got, n * 2, "buf_narrow (dispatched to the device)", n);
    free(got);
    free(want);
    free(f);
    cudaFree(df);
    cudaFree(dh);
}

/* Runs everywhere: MEM_HOST takes the CPU path, with or without a GPU. */
static void test_dispatch_host(void **state) {
    (void)state;
    size_t n = 4099;
    float *f = malloc(n * 4), *g = malloc(n * 4);
    bf16 *a = malloc(n * 2), *b = malloc(n * 2);
    fill_f32(f, n, 100, 0);
    buf_narrow(MEM_HOST, a, f, n);
    buf_narrow_cpu(b, f, n);
    assert_memory_equal(a, b, n * 2);
    for (size_t i = 0; i < n; i++) assert_int_equal(a[i], f32_to_bf16(f[i]));
    fill_f32(f, n, 101, 1);
    memcpy(g, f, n * 4);
    buf_round_bf16(MEM_HOST, f, n);
    for (size_t i = 0; i < n; i++) assert_int_equal(f32_bits(f[i]), f32_bits(round_to_bf16(g[i])));
    assert_true(buf_sum_squares(MEM_HOST, g, DTYPE_FP32, n) == buf_sum_squares_cpu(g, DTYPE_FP32, n));
    assert_true(buf_sum_squares(MEM_HOST, g, DTYPE_FP32, n) > 0.0);
    free(f);
    free(g);
    free(a);
    free(b);
}

/* Runs everywhere: a device allocation that cannot be had (no GPU, or
 * 2^62 bytes on one) is recorded in the tracker, named, and the run goes
 * on; with a GPU a small one succeeds zero-filled and shows in the used bytes. */
static void test_device_memory(void **state) {
    (void)state;
    struct mem_tracker *t = calloc(1, sizeof *t);
    cuda_mem_install(t);
    int have = no_device() == NULL;
    size_t huge = (size_t)1 << 62;
    assert_null(mem_alloc(t, MEM_DEVICE, MEM_PARAMS, "huge params", huge));
    assert_true(mem_failed(t));
    char msg[256];
    mem_failure_message(t, msg, sizeof msg);
    assert_non_null(strstr(msg, "'huge params'"));
    assert_non_null(strstr(msg, "device memory"));
    assert_int_equal(t->n_records, 0);
    assert_int_equal(t->live_total, 0);
    if (have) {
        struct mem_tracker *u = calloc(1, sizeof *u);
        cuda_mem_install(u);
        size_t used0 = 0, used1 = 0, total = 0;
        char err[128];
        /* the earlier tests' stream-ordered scratch (the sums of squares)
         * may still sit in the device's pool, which the allocation's
         * synchronize would hand back in between: settle it first */
        cudaMemPool_t pool;
        assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
        assert_int_equal(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
        assert_int_equal(cudaMemPoolTrimTo(pool, 0), cudaSuccess);
        assert_int_equal(cuda_mem_used(&used0, &total, err, sizeof err), 0);
        size_t bytes = (size_t)64 << 20;
        unsigned char *p = mem_alloc(u, MEM_DEVICE, MEM_GRADS, "grads", bytes);
        assert_non_null(p);
        assert_int_equal(u->live[MEM_GRADS], bytes);
        assert_int_equal(cuda_mem_used(&used1, &total, err, sizeof err), 0);
        assert_true(used1 >= used0 + bytes);
        unsigned char *h = malloc(bytes);
        assert_int_equal(cudaMemcpy(h, p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t i = 0; i < bytes; i += 4093) assert_int_equal(h[i], 0);
        free(h);
        mem_free(u, p);
        assert_int_equal(u->live_total, 0);
        free(u);
    } else {
        printf("[       OK ] %s: without a GPU every device allocation fails, recorded: %s\n", __func__, msg);
    }
    free(t);
}

int main(void) {
    seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test_bufops_cuda: seed %llu (inputs drawn afresh each run)\n", (unsigned long long)seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_and_copy),   cmocka_unit_test(test_widen_narrow_round),
        cmocka_unit_test(test_accumulate_add),  cmocka_unit_test(test_sum_squares),
        cmocka_unit_test(test_dispatch_device), cmocka_unit_test(test_dispatch_host),
        cmocka_unit_test(test_device_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
