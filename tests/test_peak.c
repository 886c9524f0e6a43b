/* The measured FMA peak is a ceiling: a large sgemm through the counted
 * matmul never runs faster than it. And the BLAS kernel check: which
 * OpenBLAS kernels are a fallback, and what OPENBLAS_CORETYPE to suggest. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/wait.h>
#include <unistd.h>
#include <math.h>
#include <cblas.h>
#include <cmocka.h>
#include <omp.h>

#include "clock.h"
#include "counters.h"
#include "layers.h"
#include "../train/measure/machine.h"
#include "onednn_gemms.h"
#include "../train/measure/peak.h"

static void test_peak_trials(void **state) {
    (void)state;
    struct peak_result r;
    assert_int_equal(peak_measure(&r, 1, 5, 0.0), 0);
    assert_int_equal(r.threads, 1);
    assert_int_equal(r.trials, 5); /* no time asked for: exactly the minimum */
    assert_non_null(r.kernel);
    assert_true(r.best > 0);
    for (int i = 0; i < r.trials; i++) {
        assert_true(r.trial[i] > 0);
        assert_true(r.best >= r.trial[i]);
        assert_true(r.min <= r.trial[i]);
    }
    assert_true(r.min <= r.median && r.median <= r.best);
    double spread = peak_spread(&r);
    assert_true(spread >= 0.0 && spread < 1.0);
    assert_true(spread == (r.best - r.min) / r.best);
    /* a time budget adds trials, up to the cap */
    assert_int_equal(peak_measure(&r, 1, 2, 0.05), 0);
    assert_true(r.trials >= 2 && r.trials <= PEAK_MAX_TRIALS);
}

static void test_peak_bad_arguments(void **state) {
    (void)state;
    struct peak_result r;
    assert_int_equal(peak_measure(&r, 0, 5, 0.0), -1);
    assert_int_equal(peak_measure(&r, 1, 0, 0.0), -1);
    assert_int_equal(peak_measure(&r, 1, PEAK_MAX_TRIALS + 1, 0.0), -1);
}

/* The widest kernel the CPU runs: the peak must not measure a narrower one. */
static void test_peak_kernel_is_widest(void **state) {
    (void)state;
    struct peak_result r;
    assert_int_equal(peak_measure(&r, 1, 1, 0.0), 0);
    enum isa_level isa = machine_cpu_isa();
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_cpu_supports("avx512f")) assert_string_equal(r.kernel, "avx512f");
    else if (isa >= ISA_AVX2) assert_string_equal(r.kernel, "avx2+fma");
    else assert_string_equal(r.kernel, "fmaf");
#else
    (void)isa;
    assert_string_equal(r.kernel, "fmaf");
#endif
}

enum { GEMM_DIM = 1024, GEMM_TRIALS = 3 };

/* The defect: a peak loop without FMA measured ~77 GFLOP/s per
 * core where sgemm alone reached ~121, so GEMMs ran at 127% of "peak".
 * On one thread, the best of GEMM_TRIALS 1024^3 sgemms through
 * matmul_forward (its own FLOP and time counters) stays at or below the
 * best peak trial. The peak's trials run before and after the GEMMs, so a
 * busy moment of a shared machine cannot fall on the peak alone. */
static void test_sgemm_never_exceeds_peak(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    const size_t n = (size_t)GEMM_DIM * GEMM_DIM;
    float *a = malloc(n * sizeof *a), *w = malloc(n * sizeof *w), *out = malloc(n * sizeof *out);
    assert_non_null(a);
    assert_non_null(w);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(i % 7) * 0.25f - 0.75f;
        w[i] = (float)(i % 5) * 0.125f - 0.25f;
    }
    struct peak_result before, after;
    assert_int_equal(peak_measure(&before, 1, 5, 0.25), 0);
    struct exec_ctx fc = {0};
    matmul_forward(out, a, w, NULL, GEMM_DIM, GEMM_DIM, GEMM_DIM, &fc); /* warm-up: BLAS buffers, clocks */
    double sgemm = 0.0;
    for (int t = 0; t < GEMM_TRIALS; t++) {
        fc = (struct exec_ctx){0};
        matmul_forward(out, a, w, NULL, GEMM_DIM, GEMM_DIM, GEMM_DIM, &fc);
        assert_true(fc.gemm == 2.0 * GEMM_DIM * GEMM_DIM * GEMM_DIM);
        assert_true(fc.gemm_seconds > 0);
        if (fc.gemm / fc.gemm_seconds > sgemm) sgemm = fc.gemm / fc.gemm_seconds;
    }
    /* out[0] = sum_k a[k] w[k]: the GEMM really ran */
    double dot = 0.0;
    for (int k = 0; k < GEMM_DIM; k++) dot += (double)a[k] * w[k];
    assert_float_equal(out[0], dot, 1e-3 * (1.0 + (dot < 0 ? -dot : dot)));

    assert_int_equal(peak_measure(&after, 1, 5, 0.25), 0);
    const struct peak_result peak = after.best > before.best ? after : before;
    printf("    1 thread: sgemm %d^3 %.1f GFLOP/s (best of %d), peak %.1f GFLOP/s (%s, best of %d trials before and after; min %.1f), "
           "sgemm at %.1f%% of peak; BLAS kernel %s\n",
           GEMM_DIM, sgemm / 1e9, GEMM_TRIALS, peak.best / 1e9, peak.kernel, before.trials + after.trials,
           (after.min < before.min ? after.min : before.min) / 1e9,
           100.0 * sgemm / peak.best, openblas_get_corename());
    assert_true(sgemm > 0);
    assert_true(sgemm <= peak.best);
    free(a);
    free(w);
    free(out);
}

/* The best rate observed is the peak (peak.h): a step faster than the
 * probe raises it, a slower one leaves it, so MFU = model / dt / peak
 * never exceeds 1; a fixed peak (config, GPU data sheet) never moves.
 * Rates are given, not timed: nothing here depends on the machine's load. */
static void test_peak_follows_best_rate(void **state) {
    (void)state;
    struct peak_tracker t;
    peak_tracker_start(&t, 155e9, true); /* a probe on a busy machine */
    assert_string_equal(peak_tracker_source(&t), "probe");
    const double slow[PEAK_RATES] = {120e9, 90e9, 80e9};
    assert_false(peak_tracker_observe(&t, 1, slow));
    assert_true(t.flops == 155e9 && t.raised_step == -1);
    const double quiet[PEAK_RATES] = {337e9, 250e9, 240e9}; /* the GEMMs beat the probe */
    assert_true(peak_tracker_observe(&t, 2, quiet));
    assert_true(t.flops == 337e9 && t.raised_step == 2 && t.raised_by == PEAK_RATE_GEMMS);
    assert_string_equal(peak_tracker_source(&t), "observed");
    assert_true(t.probe == 155e9);
    /* a step whose model FLOPs over its time beat every rate so far */
    const double model[PEAK_RATES] = {0.0, NAN, 400e9};
    assert_true(peak_tracker_observe(&t, 3, model));
    assert_true(t.flops == 400e9 && t.raised_step == 3 && t.raised_by == PEAK_RATE_MODEL);
    assert_string_equal(peak_rate_name(PEAK_RATE_MODEL), "model FLOPs");
    assert_false(peak_tracker_observe(&t, 4, quiet));
    for (int r = 0; r < PEAK_RATES; r++) assert_false(quiet[r] / t.flops > 1.0 || model[r] / t.flops > 1.0);
    /* the config's peak: MFU may pass 100% because the user said so */
    peak_tracker_start(&t, 100e9, false);
    assert_false(peak_tracker_observe(&t, 1, quiet));
    assert_true(t.flops == 100e9);
    assert_string_equal(peak_tracker_source(&t), "fixed");
}

static void test_kernel_isa(void **state) {
    (void)state;
    assert_int_equal(blas_kernel_isa("Prescott"), ISA_SSE);
    assert_int_equal(blas_kernel_isa("Core2"), ISA_SSE);
    assert_int_equal(blas_kernel_isa("Nehalem"), ISA_SSE);
    assert_int_equal(blas_kernel_isa("generic"), ISA_SSE);
    assert_int_equal(blas_kernel_isa("armv8"), ISA_SSE); /* not an x86 kernel it knows */
    assert_int_equal(blas_kernel_isa(""), ISA_SSE);
    assert_int_equal(blas_kernel_isa(NULL), ISA_SSE);
    assert_int_equal(blas_kernel_isa("Sandybridge"), ISA_AVX);
    assert_int_equal(blas_kernel_isa("Haswell"), ISA_AVX2);
    assert_int_equal(blas_kernel_isa("HASWELL"), ISA_AVX2); /* fixed-target builds say it in capitals */
    assert_int_equal(blas_kernel_isa("Zen"), ISA_AVX2);
    assert_int_equal(blas_kernel_isa("SkylakeX"), ISA_AVX512);
    assert_int_equal(blas_kernel_isa("Cooperlake"), ISA_AVX512);
    assert_int_equal(blas_kernel_isa("SapphireRapids"), ISA_AVX512);
    assert_string_equal(isa_name(ISA_AVX512), "avx512");
    assert_string_equal(isa_name(ISA_SSE), "sse");
}

static void test_suggested_coretype(void **state) {
    (void)state;
    /* the case: generic Prescott kernels on an AVX-512 Xeon */
    assert_string_equal(blas_suggested_coretype("Prescott", ISA_AVX512), "SkylakeX");
    assert_string_equal(blas_suggested_coretype("Prescott", ISA_AVX2), "Haswell");
    assert_string_equal(blas_suggested_coretype("Core2", ISA_AVX2), "Haswell");
    assert_string_equal(blas_suggested_coretype("unknown", ISA_AVX512), "SkylakeX");
    assert_string_equal(blas_suggested_coretype("Sandybridge", ISA_AVX2), "Haswell"); /* AVX without FMA */
    /* the CPU has nothing better: no warning */
    assert_null(blas_suggested_coretype("Prescott", ISA_AVX));
    assert_null(blas_suggested_coretype("Prescott", ISA_SSE));
    assert_null(blas_suggested_coretype("Sandybridge", ISA_AVX));
    /* FMA kernels are not a fallback, even narrower than the CPU (a deliberate OPENBLAS_CORETYPE=Haswell) */
    assert_null(blas_suggested_coretype("Haswell", ISA_AVX512));
    assert_null(blas_suggested_coretype("Zen", ISA_AVX2));
    assert_null(blas_suggested_coretype("SkylakeX", ISA_AVX512));
    assert_null(blas_suggested_coretype("COOPERLAKE", ISA_AVX512));
}

/* The library linked here (Makefile: Debian's OpenMP OpenBLAS). */
static void test_machine_description(void **state) {
    (void)state;
    struct blas_info b;
    machine_blas_info(&b);
    assert_string_equal(b.library, "OpenBLAS");
    assert_true(b.version[0] >= '0' && b.version[0] <= '9' && strchr(b.version, '.'));
    assert_string_equal(b.corename, openblas_get_corename());
    assert_string_equal(b.threading, "OpenMP");
    char cpu[128];
    machine_cpu_model(cpu, sizeof cpu);
    assert_true(strlen(cpu) > 0);
    assert_null(strchr(cpu, '\n'));
    printf("    %s, %s; %s %s (%s), kernel %s (%s)\n", cpu, isa_name(machine_cpu_isa()), b.library, b.version,
           b.threading, b.corename, isa_name(blas_kernel_isa(b.corename)));
}

/* The cores others keep busy: the formula on made-up samples (busy time
 * less this process's own, over the wall time), clamped, and unknown
 * samples; then live: a child process spinning for SPIN_SECONDS counts as
 * others (about one core), this process spinning does not. */
enum { SPIN_MS = 300 };

static void spin_for(double seconds) {
    volatile unsigned long x = 0;
    for (double t0 = monotonic_seconds(); monotonic_seconds() - t0 < seconds;) x++;
}

static void test_cores_used_by_others(void **state) {
    (void)state;
    struct cpu_times a = {.busy = 10, .total = 40, .self = 1, .cores = 4, .ok = true}, b = a;
    b.total += 4.0; /* one second of wall time on 4 cores */
    b.busy += 2.5;
    b.self += 1.0; /* this process: one core */
    assert_true(fabs(machine_cores_used_by_others(&a, &b) - 1.5) < 1e-12);
    b.self = a.self + 3.0; /* more than the busy time (counters read apart): none */
    assert_true(machine_cores_used_by_others(&a, &b) == 0.0);
    b.ok = false;
    assert_true(machine_cores_used_by_others(&a, &b) == -1.0);
    b = a; /* no time passed */
    assert_true(machine_cores_used_by_others(&a, &b) == -1.0);

    struct cpu_times t0 = machine_cpu_times();
    assert_true(t0.ok && t0.cores >= 1);
    spin_for(SPIN_MS / 1e3);
    struct cpu_times t1 = machine_cpu_times();
    double own = machine_cores_used_by_others(&t0, &t1);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        spin_for(SPIN_MS / 1e3);
        _exit(0);
    }
    struct cpu_times t2 = machine_cpu_times();
    waitpid(child, NULL, 0);
    struct cpu_times t3 = machine_cpu_times();
    double other = machine_cores_used_by_others(&t2, &t3);
    printf("    %d cores; this process spinning: %.2f cores busy with others; a child spinning: %.2f\n", t0.cores, own,
           other);
    /* the child's core, not ours (unless others already held every core) */
    assert_true(other >= own + 0.5 || other >= t0.cores - 0.5);
}

/* The team's rule (machine_threads_that_fit): a core is others' when they
 * keep it busy at least half the time; 1 to requested threads; requested
 * when not measured. The watch reports once per window, from the samples
 * it is given. */
static void test_threads_that_fit(void **state) {
    (void)state;
    assert_int_equal(machine_threads_that_fit(2, 2, 0.0), 2);
    assert_int_equal(machine_threads_that_fit(2, 2, 0.4), 2);
    assert_int_equal(machine_threads_that_fit(2, 2, 0.6), 1);
    assert_int_equal(machine_threads_that_fit(2, 2, 2.0), 1); /* never none */
    assert_int_equal(machine_threads_that_fit(4, 8, 1.0), 4); /* never more than asked */
    assert_int_equal(machine_threads_that_fit(8, 8, 2.7), 5);
    assert_int_equal(machine_threads_that_fit(3, 4, -1.0), 3);

    struct cpu_times t = {.busy = 100, .total = 400, .self = 10, .cores = 2, .ok = true};
    struct core_watch w;
    core_watch_start(&w, 1.0, &t);
    assert_true(w.busy == -1.0);
    t.total += 1.0; /* half a second on 2 cores: the window runs on */
    t.busy += 1.0;
    t.self += 0.5;
    assert_false(core_watch_sample(&w, &t));
    t.total += 1.0; /* a whole second: others kept 1.5 - 0.5 = 1 core over it */
    t.busy += 1.0;
    t.self += 0.5;
    assert_true(core_watch_sample(&w, &t));
    assert_true(fabs(w.busy - 1.0) < 1e-12 && fabs(w.seconds - 1.0) < 1e-12);
    assert_int_equal(machine_threads_that_fit(2, t.cores, w.busy), 1);
    t.total += 4.0; /* the next window: only this process */
    t.busy += 3.6;
    t.self += 3.6;
    assert_true(core_watch_sample(&w, &t));
    assert_true(fabs(w.busy) < 1e-12);
    assert_int_equal(machine_threads_that_fit(2, t.cores, w.busy), 2);
    t.ok = false; /* /proc cannot say: no figure */
    t.total += 4.0;
    assert_false(core_watch_sample(&w, &t));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peak_trials),          cmocka_unit_test(test_peak_bad_arguments),
        cmocka_unit_test(test_peak_kernel_is_widest), cmocka_unit_test(test_sgemm_never_exceeds_peak),
        cmocka_unit_test(test_peak_follows_best_rate),
        cmocka_unit_test(test_kernel_isa),           cmocka_unit_test(test_suggested_coretype),
        cmocka_unit_test(test_machine_description), cmocka_unit_test(test_cores_used_by_others),
        cmocka_unit_test(test_threads_that_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
