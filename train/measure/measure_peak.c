/* Peak fp32 FLOP/s of this CPU, measured: every thread runs CHAINS
 * independent chains of fused multiply-adds, acc = acc * m + a, on the
 * widest vectors the CPU runs, chosen at run time.
 *
 * The FMAs are explicit intrinsics, not `a * b + c`: under -std=c17 GCC
 * does not contract a*b+c into an FMA (-ffp-contract=off for ISO C), so a
 * plain C loop issues a multiply and an add, and on an AVX-512 Xeon
 * measured ~77 GFLOP/s per core where the FMA peak is ~140 and sgemm alone
 * reaches ~121: MFU read 1.8x too high. CHAINS covers the FMA latency
 * (4-5 cycles) times the FMA ports (2) with room to spare, so the loop is
 * bound by FMA throughput, not by a chain's latency.
 *
 * The peak is the best of several trials: right after MPI_Init a
 * singleton's orted can hold the cores for a few tenths of a second (seen:
 * 15 GFLOP/s instead of 400 for ~0.3 s), and one trial would measure that
 * instead of the CPU. The spread says how noisy the machine was. */
#include "peak.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PEAK_X86 1
#endif

enum { CHAINS = 12, ITERS = 1 << 21 };

/* m < 1 and a > 0: every chain converges to a / (1 - m) ~ 0.1 x seed, never
 * to a denormal or an infinity, which would slow or stop the FMAs. */
static const float MUL = 0.999999f;

typedef float (*chains_fn)(int64_t iters, float seed);

/* The CHAINS accumulators are named variables, not an array: at -O1 (the
 * sanitizer build) an array stays in memory, and every FMA would wait on a
 * store and a load (seen: 6 GFLOP/s instead of 118). X(c) for c < CHAINS. */
#define FOR_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define INIT_SCALAR(c) float acc##c = seed * (float)((c) + 1);
#define INIT_VEC512(c) __m512 acc##c = _mm512_set1_ps(seed * (float)((c) + 1));
#define STEP_VEC512(c) acc##c = _mm512_fmadd_ps(acc##c, m, a);
#define SUM_VEC512(c) sum = _mm512_add_ps(sum, acc##c);
#define INIT_VEC256(c) __m256 acc##c = _mm256_set1_ps(seed * (float)((c) + 1));
#define STEP_VEC256(c) acc##c = _mm256_fmadd_ps(acc##c, m, a);
#define SUM_VEC256(c) sum = _mm256_add_ps(sum, acc##c);
#define STEP_SCALAR(c) acc##c = fmaf(acc##c, MUL, seed);
#define SUM_SCALAR(c) sum += acc##c;
#define ONE(c) +1
_Static_assert(0 FOR_CHAINS(ONE) == CHAINS, "FOR_CHAINS names CHAINS accumulators");

#ifdef PEAK_X86
__attribute__((target("avx512f"))) static float chains_avx512(int64_t iters, float seed) {
    const __m512 m = _mm512_set1_ps(MUL), a = _mm512_set1_ps(seed);
    FOR_CHAINS(INIT_VEC512)
    for (int64_t i = 0; i < iters; i++) {
        FOR_CHAINS(STEP_VEC512)
    }
    __m512 sum = _mm512_setzero_ps();
    FOR_CHAINS(SUM_VEC512)
    return _mm512_reduce_add_ps(sum);
}

__attribute__((target("avx2,fma"))) static float chains_avx2(int64_t iters, float seed) {
    const __m256 m = _mm256_set1_ps(MUL), a = _mm256_set1_ps(seed);
    FOR_CHAINS(INIT_VEC256)
    for (int64_t i = 0; i < iters; i++) {
        FOR_CHAINS(STEP_VEC256)
    }
    __m256 sum = _mm256_setzero_ps();
    FOR_CHAINS(SUM_VEC256)
    float lanes[8], total = 0.0f;
    _mm256_storeu_ps(lanes, sum);
    for (int l = 0; l < 8; l++) total += lanes[l];
    return total;
}
#endif

/* Portable: one lane per chain; fmaf is one instruction where the CPU has
 * FMA and the compiler targets it. */
static float chains_scalar(int64_t iters, float seed) {
    FOR_CHAINS(INIT_SCALAR)
    for (int64_t i = 0; i < iters; i++) {
        FOR_CHAINS(STEP_SCALAR)
    }
    float sum = 0.0f;
    FOR_CHAINS(SUM_SCALAR)
    return sum;
}

struct kernel {
    const char *name;
    chains_fn run;
    int lanes;
};

static struct kernel widest_kernel(void) {
#ifdef PEAK_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return (struct kernel){"avx512f", chains_avx512, 16};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return (struct kernel){"avx2+fma", chains_avx2, 8};
#endif
    return (struct kernel){"fmaf", chains_scalar, 1};
}

/* FLOP/s of one trial: every thread runs the chains once. */
static double fma_trial(void *ctx, int threads) {
    const struct kernel *k = ctx;
    float sink = 0.0f;
    double t0 = monotonic_seconds();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += k->run(ITERS, 1e-7f * (float)(omp_get_thread_num() + 1));
    double dt = monotonic_seconds() - t0;
    /* the chains' sum is used, so no compiler may drop them; it is never NaN */
    if (sink != sink) return 0.0;
    return 2.0 * k->lanes * CHAINS * (double)ITERS * threads / dt;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int peak_measure_with(struct peak_result *r, const char *kernel, peak_trial_fn trial, void *ctx, int threads,
                      int min_trials, double seconds) {
    if (threads < 1 || min_trials < 1 || min_trials > PEAK_MAX_TRIALS) return -1;
    *r = (struct peak_result){.threads = threads};
    snprintf(r->kernel, sizeof r->kernel, "%s", kernel);
    (void)trial(ctx, threads); /* wakes the threads and moves the cores to their vector clock */
    double start = monotonic_seconds();
    while (r->trials < PEAK_MAX_TRIALS && (r->trials < min_trials || monotonic_seconds() - start < seconds))
        r->trial[r->trials++] = trial(ctx, threads);
    double sorted[PEAK_MAX_TRIALS];
    for (int i = 0; i < r->trials; i++) sorted[i] = r->trial[i];
    qsort(sorted, (size_t)r->trials, sizeof *sorted, by_value);
    r->min = sorted[0];
    r->best = sorted[r->trials - 1];
    r->median = sorted[r->trials / 2];
    return 0;
}

int peak_measure(struct peak_result *r, int threads, int min_trials, double seconds) {
    struct kernel k = widest_kernel();
    return peak_measure_with(r, k.name, fma_trial, &k, threads, min_trials, seconds);
}

double peak_spread(const struct peak_result *r) { return r->best > 0 ? (r->best - r->min) / r->best : 0.0; }
