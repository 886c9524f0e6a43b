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

double buf_sum_squares_cpu(const void *src, enum dtype dt, size_t n) {
    double part[SUM_PARTS] = {0};
    const int parts = SUM_PARTS;
#pragma omp parallel for schedule(dynamic, 1)
    for (int p = 0; p < parts; p++) {
        size_t lo = n / (size_t)parts * (size_t)p, hi = p == parts - 1 ? n : lo + n / (size_t)parts;
        double s = 0.0;
        if (dt == DTYPE_FP32) {
            const float *g = src;
            for (size_t i = lo; i < hi; i++) s += (double)g[i] * g[i];
        } else {
            const bf16 *g = src;
            for (size_t i = lo; i < hi; i++) {
                double x = bf16_to_f32(g[i]);
                s += x * x;
            }
        }
        part[p] = s;
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
