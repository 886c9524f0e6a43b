/* The CPU's peak FLOP/s, measured: the ceiling MFU and HFU are measured
 * against. fp32 GEMMs: an FMA microbenchmark (train/measure/measure_peak.c);
 * bf16 GEMMs (oneDNN): the bf16 GEMM itself at the shapes where it runs
 * fastest (train/measure/measure_peak_bf16.c), since no FMA loop of ours
 * reaches the bf16 dot-product or tile units the way oneDNN's kernels do. */
#ifndef SHARDLAB_PEAK_H
#define SHARDLAB_PEAK_H

#include <stdbool.h>

enum { PEAK_MAX_TRIALS = 64 };

struct peak_result {
    int threads;
    char kernel[96];                 /* "avx512f", "avx2+fma" or "fmaf" (scalar, portable); the bf16 probe:
                                      * oneDNN's kernel and the best shape */
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

/* One trial of a probe: its FLOP/s summed over `threads` threads. */
typedef double (*peak_trial_fn)(void *ctx, int threads);

/* peak_measure's trials with another probe, named `kernel`. */
int peak_measure_with(struct peak_result *r, const char *kernel, peak_trial_fn trial, void *ctx, int threads,
                      int min_trials, double seconds);

struct onednn_gemms;
/* The bf16 GEMM peak through the run's oneDNN context g: each trial runs
 * one GEMM of each of the probe's shapes (cache-resident layer shapes and
 * 1024^3) on bf16 operands and keeps the fastest shape's rate, so a
 * layer GEMM at one of the trainer's shapes does not outrun it. The same
 * trial rules as peak_measure; r->kernel names oneDNN's kernel and the
 * shape that set the best trial. -1 on bad arguments or no context. */
int peak_measure_bf16_gemm(struct peak_result *r, struct onednn_gemms *g, int threads, int min_trials,
                           double seconds);

/* (best - min) / best, in [0, 1): how far the slowest trial fell short. */
double peak_spread(const struct peak_result *r);

/* The peak a CPU run's MFU and HFU divide by: the best rate observed. The
 * start-up probe runs while the machine is as it is then; on a busy
 * machine it falls short, and a quieter step then ran its GEMMs faster
 * than the "peak" (155 GFLOP/s probed, 337 run: MFU past 100%). So after
 * every step the peak rises to any rate the step measured above it: its
 * GEMMs' rate over their own time, and its issued and model FLOPs over the
 * step's time. MFU and HFU then never exceed 100%. A fixed peak (the
 * config's peak_flops, a GPU's data sheet) never moves: follows false. */
enum peak_rate { PEAK_RATE_GEMMS, PEAK_RATE_ISSUED, PEAK_RATE_MODEL, PEAK_RATES };

struct peak_tracker {
    double flops;         /* the peak now: max(probe, every rate observed) */
    double probe;         /* the start-up probe's best (or the fixed peak) */
    bool follows;         /* observed rates may raise it */
    int raised_step;      /* the step whose rate is the peak now; -1: the probe's still */
    enum peak_rate raised_by;
};

void peak_tracker_start(struct peak_tracker *t, double probe, bool follows);
/* A step's rates (FLOP/s, by enum peak_rate; <= 0 or NaN: not measured).
 * Returns true when this step raised the peak. */
bool peak_tracker_observe(struct peak_tracker *t, int step, const double rate[PEAK_RATES]);
/* "GEMMs", "issued FLOPs", "model FLOPs": what raised it, in words. */
const char *peak_rate_name(enum peak_rate r);
/* The peak's source for the JSON log: "probe" (or "fixed") or "observed". */
const char *peak_tracker_source(const struct peak_tracker *t);

#endif
