/* The CPU build's buffer operations (include/bufops.h): OpenMP loops. */
#include "../bufops_ops.h"

#include <omp.h>

#include <string.h>

void buf_zero_cpu(void *dst, size_t bytes) {
    if (bytes) memset(dst, 0, bytes);
}

void buf_copy_cpu(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memcpy(dst, src, bytes);
}

void buf_widen_cpu(float *dst, const bf16 *src, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

void buf_narrow_cpu(bf16 *dst, const float *src, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}

void buf_round_bf16_cpu(float *x, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) x[i] = round_to_bf16(x[i]);
}

void buf_round_narrow_cpu(bf16 *dst, float *x, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        dst[i] = f32_to_bf16(x[i]);
        x[i] = bf16_to_f32(dst[i]);
    }
}

void buf_from_fp32_cpu(void *dst, enum dtype dt, const float *src, size_t n) {
    if (dt == DTYPE_FP32) buf_copy_cpu(dst, src, n * sizeof *src);
    else buf_narrow_cpu(dst, src, n);
}

void buf_to_fp32_cpu(float *dst, const void *src, enum dtype dt, size_t n) {
    if (dt == DTYPE_FP32) buf_copy_cpu(dst, src, n * sizeof *dst);
    else buf_widen_cpu(dst, src, n);
}

void buf_accumulate_cpu(void *dst, enum dtype dt, const float *src, size_t n) {
    if (dt == DTYPE_FP32) {
        float *d = dst;
#pragma omp parallel for
        for (size_t i = 0; i < n; i++) d[i] += src[i];
        return;
    }
    bf16 *d = dst;
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) d[i] = f32_to_bf16(bf16_to_f32(d[i]) + src[i]);
}

void buf_add_cpu(void *dst, const void *src, enum dtype dt, size_t n) {
    if (dt == DTYPE_FP32) {
        buf_accumulate_cpu(dst, dt, src, n);
        return;
    }
    bf16 *d = dst;
    const bf16 *s = src;
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) d[i] = f32_to_bf16(bf16_to_f32(d[i]) + bf16_to_f32(s[i]));
}

/* Each part is a fixed block of the range, summed in part order: OpenMP's
 * reduction clause combines the threads' partial sums in the order they
 * finish, which changes the last bits from run to run beyond two threads
 * (seen with 16). The parts are a fixed number, not the team's size, so
 * the result is the same on any number of threads (docs/THREADS.md), and
 * a part goes to whichever thread is free. */
enum { SUM_PARTS = 64 };

/* Within a part, SUM_LANES running sums, element i in lane i % SUM_LANES,
 * added together in lane order at the end: with one running sum every add
 * waits on the last, and the gradient norm's pass over a 124M model's bf16
 * gradients was about 3% of a 2-core LLaMA step (perf); independent lanes
 * (omp simd: the compiler kept the bf16 form's lanes scalar without it) run
 * as vector adds. Eight doubles: one 512-bit register's worth. The order is
 * fixed by the part's range alone, so the result is still the same on any
 * number of threads; it differs from the one running sum's in the last
 * bits of a double. */
enum { SUM_LANES = 8 };

static double sum_squares_f32(const float *g, size_t lo, size_t hi) {
    double lane[SUM_LANES] = {0};
    size_t i = lo;
    for (; i + SUM_LANES <= hi; i += SUM_LANES)
#pragma omp simd
        for (int k = 0; k < SUM_LANES; k++) lane[k] += (double)g[i + k] * g[i + k];
    for (int k = 0; i < hi; i++, k++) lane[k] += (double)g[i] * g[i];
    double s = 0.0;
    for (int k = 0; k < SUM_LANES; k++) s += lane[k];
    return s;
}

static double sum_squares_bf16(const bf16 *g, size_t lo, size_t hi) {
    double lane[SUM_LANES] = {0};
    size_t i = lo;
    for (; i + SUM_LANES <= hi; i += SUM_LANES) {
#pragma omp simd
        for (int k = 0; k < SUM_LANES; k++) {
            double x = bf16_to_f32(g[i + k]);
            lane[k] += x * x;
        }
    }
    for (int k = 0; i < hi; i++, k++) {
        double x = bf16_to_f32(g[i]);
        lane[k] += x * x;
    }
    double s = 0.0;
    for (int k = 0; k < SUM_LANES; k++) s += lane[k];
    return s;
}

double buf_sum_squares_cpu(const void *src, enum dtype dt, size_t n) {
    double part[SUM_PARTS] = {0};
    const int parts = SUM_PARTS;
#pragma omp parallel for schedule(dynamic, 1)
    for (int p = 0; p < parts; p++) {
        size_t lo = n / (size_t)parts * (size_t)p, hi = p == parts - 1 ? n : lo + n / (size_t)parts;
        part[p] = dt == DTYPE_FP32 ? sum_squares_f32(src, lo, hi) : sum_squares_bf16(src, lo, hi);
    }
    double s = 0.0;
    for (int p = 0; p < parts; p++) s += part[p];
    return s;
}

/* The host's table (model/bufops_ops.h); no sumsq plan: buf_sumsq_run sums
 * a host list's segments one by one with buf_sum_squares_cpu. */
const struct buf_ops buf_ops_cpu = {
#define BUF_CPU_FORM(op) .op = op##_cpu,
    BUF_OPS(BUF_CPU_FORM)
#undef BUF_CPU_FORM
};
