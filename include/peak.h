/* The CPU's peak fp32 FLOP/s, measured by an FMA microbenchmark: the
 * ceiling MFU and HFU are measured against. */
#ifndef SHARDLAB_PEAK_H
#define SHARDLAB_PEAK_H

enum { PEAK_MAX_TRIALS = 64 };

struct peak_result {
    int threads;
    const char *kernel;              /* "avx512f", "avx2+fma" or "fmaf" (scalar, portable) */
    int trials;                      /* timed trials, 1..PEAK_MAX_TRIALS */
    double trial[PEAK_MAX_TRIALS];   /* FLOP/s of each trial, summed over the threads, in order */
    double best, median, min;        /* over trial[]; best is the peak */
};

/* Runs one untimed warm-up trial, then timed trials on `threads` OpenMP
 * threads until at least min_trials are done and `seconds` have passed
 * (at most PEAK_MAX_TRIALS). One trial is ~8 ms on an AVX-512 core.
 * Returns 0, or -1 on bad arguments (threads < 1, min_trials outside
 * 1..PEAK_MAX_TRIALS). */
int peak_measure(struct peak_result *r, int threads, int min_trials, double seconds);

/* (best - min) / best, in [0, 1): how far the slowest trial fell short. */
double peak_spread(const struct peak_result *r);

#endif
