/* Attention kernels alone: forward and backward time for one shape, the
 * FLOPs the counter saw, and the share of time inside sgemm.
 *
 *   build/bench_attention B T C NH [reps]
 *
 * Threads come from OMP_NUM_THREADS (OpenMP and OpenBLAS share them). The
 * first repetition is a warm-up and is not timed. Prints the OpenBLAS
 * kernel in use, since the numbers depend on it, and the process CPU time
 * beside the wall time: with one thread on a shared machine the CPU time
 * is the steadier figure (it does not count time spent descheduled). */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "layers.h"

static double seconds(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *alloc_filled(size_t n, unsigned seed) {
    float *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "bench_attention: out of memory for %zu floats\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) { /* a cheap LCG in [-1, 1): values only need to be finite */
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
    }
    return p;
}

static long arg(char **argv, int i, long lo) {
    char *end;
    long v = strtol(argv[i], &end, 10);
    if (*end || v < lo) {
        fprintf(stderr, "bench_attention: argument %d (%s) must be an integer >= %ld\n", i, argv[i], lo);
        exit(1);
    }
    return v;
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: %s B T C NH [reps]\n", argv[0]);
        return 1;
    }
    int64_t B = arg(argv, 1, 1), T = arg(argv, 2, 1), C = arg(argv, 3, 1), NH = arg(argv, 4, 1);
    int reps = argc == 6 ? (int)arg(argv, 5, 1) : 20;
    if (C % NH) {
        fprintf(stderr, "bench_attention: NH (%lld) must divide C (%lld)\n", (long long)NH, (long long)C);
        return 1;
    }
    size_t n_qkv = (size_t)(B * T * 3 * C), n_out = (size_t)(B * T * C), n_att = (size_t)(B * NH * T * T);
    float *qkv = alloc_filled(n_qkv, 1), *out = alloc_filled(n_out, 2), *att = alloc_filled(n_att, 3);
    float *dout = alloc_filled(n_out, 4), *dqkv = alloc_filled(n_qkv, 5);
    float *scratch = alloc_filled(attention_backward_scratch(B, T, NH), 6);
    struct exec_ctx fc = {0};
    double fwd = 0, bwd = 0, cpu = 0;
    for (int r = 0; r <= reps; r++) {
        if (r == 1) fc = (struct exec_ctx){0}; /* repetition 0 warms up */
        double c0 = seconds(CLOCK_PROCESS_CPUTIME_ID), t0 = seconds(CLOCK_MONOTONIC);
        attention_forward(out, att, qkv, B, T, C, NH, &fc);
        double t1 = seconds(CLOCK_MONOTONIC);
        attention_backward(dqkv, dout, qkv, att, scratch, B, T, C, NH, &fc);
        double t2 = seconds(CLOCK_MONOTONIC), c2 = seconds(CLOCK_PROCESS_CPUTIME_ID);
        if (r > 0) fwd += t1 - t0, bwd += t2 - t1, cpu += c2 - c0;
    }
    double gflop = fc.attention / reps / 1e9, ms = 1e3 * (fwd + bwd) / reps;
    printf("attention B %lld T %lld C %lld NH %lld, %d threads, OpenBLAS %s\n", (long long)B, (long long)T,
           (long long)C, (long long)NH, omp_get_max_threads(), openblas_get_corename());
    printf("  forward %.3f ms  backward %.3f ms  total %.3f ms per call pair (%d reps), CPU time %.3f ms\n",
           1e3 * fwd / reps, 1e3 * bwd / reps, ms, reps, 1e3 * cpu / reps);
    printf("  attention FLOPs counted %.4e per pair: %.2f GFLOP/s; %.1f%% of the time in sgemm\n",
           fc.attention / reps, gflop / (ms / 1e3), 100.0 * fc.gemm_seconds / (fwd + bwd));
    free(qkv), free(out), free(att), free(dout), free(dqkv), free(scratch);
    return 0;
}
