/* Peak FLOP/s of this CPU, measured: every thread runs independent chains of
 * fused multiply-adds on the widest vectors the compiler targets
 * (-march=native), enough chains to hide the FMA latency. The result is the
 * ceiling MFU is measured against; sgemm itself may reach only part of it
 * (OPENBLAS_CORETYPE=Haswell uses 256-bit kernels on an AVX-512 CPU). */
#include "peak.h"

#include <omp.h>
#include <time.h>

enum { LANES = 16, CHAINS = 12, ITERS = 1 << 17 };

static const double MIN_SECONDS = 0.5;

typedef float vec __attribute__((vector_size(LANES * sizeof(float))));

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double measure_peak_flops(int threads) {
    /* The best of short trials over at least MIN_SECONDS: right after
     * MPI_Init a singleton's orted can hold the cores for a few tenths of a
     * second (seen: 15 GFLOP/s instead of 400 for ~0.3 s), and a single
     * trial would measure that instead of the CPU. */
    double best = 0.0, start = now();
    while (now() - start < MIN_SECONDS) {
        float sink = 0.0f;
        double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        {
            vec acc[CHAINS], mul, add;
            for (int l = 0; l < LANES; l++) {
                mul[l] = 0.999999f;
                add[l] = 1e-7f * (float)(omp_get_thread_num() + 1);
            }
            for (int c = 0; c < CHAINS; c++) acc[c] = add * (float)(c + 1);
            for (int i = 0; i < ITERS; i++)
                for (int c = 0; c < CHAINS; c++) acc[c] = acc[c] * mul + add;
            for (int c = 0; c < CHAINS; c++)
                for (int l = 0; l < LANES; l++) sink += acc[c][l];
        }
        double dt = now() - t0;
        double flops = 2.0 * LANES * CHAINS * (double)ITERS * threads;
        if (sink != sink) return 0.0; /* keeps the loop alive; never NaN */
        if (flops / dt > best) best = flops / dt;
    }
    return best;
}
