/* The run's header: the JSON "run" record (one line, escaped, the fields
 * the bench scripts read) and the BLAS fallback warning. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../train/report/run_record.h"

/* What `emit` wrote into a temporary file, NUL-terminated (static: one at a time). */
static const char *written(void (*emit)(FILE *, const struct run_record *), const struct run_record *r) {
    static char buf[4096];
    FILE *f = tmpfile();
    assert_non_null(f);
    emit(f, r);
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void json(FILE *f, const struct run_record *r) { run_record_json(f, r); }
static void warn(FILE *f, const struct run_record *r) { (void)run_record_warn(f, r); }

static struct run_record sample(void) {
    struct run_record r = {.world_size = 4, .threads = 2, .peak_flops = 2.5e11, .peak_measured = true,
                           .isa = ISA_AVX512};
    r.peak = (struct peak_result){.threads = 2, .kernel = "avx512f", .trials = 3, .trial = {2.0e11, 2.5e11, 1.0e11},
                                  .best = 2.5e11, .median = 2.0e11, .min = 1.0e11};
    snprintf(r.cpu, sizeof r.cpu, "Xeon \"Gold\" 6130 \\ 2.1GHz");
    snprintf(r.blas.library, sizeof r.blas.library, "OpenBLAS");
    snprintf(r.blas.version, sizeof r.blas.version, "0.3.21");
    snprintf(r.blas.corename, sizeof r.blas.corename, "Prescott");
    snprintf(r.blas.threading, sizeof r.blas.threading, "OpenMP");
    r.gemm_dtype = DTYPE_BF16; /* the GEMMs: oneDNN's (run_record_describe_gemms) */
    snprintf(r.gemm_library, sizeof r.gemm_library, "oneDNN");
    snprintf(r.gemm_version, sizeof r.gemm_version, "2.6.3");
    snprintf(r.gemm_kernel, sizeof r.gemm_kernel, "brg:avx512_core_bf16");
    r.cores = 4; /* one kept busy by another process: 3 free for 2 threads */
    r.cores_busy = 1.0;
    /* a fixed team and its reason (train/run/run_team.c) */
    snprintf(r.team_fixed_why, sizeof r.team_fixed_why, "--threads_adapt 0");
    return r;
}

static void test_json_record(void **state) {
    (void)state;
    struct run_record r = sample();
    const char *s = written(json, &r);
    assert_string_equal(s, "{\"type\":\"run\",\"world_size\":4,\"threads\":2,"
                           "\"cpu_model\":\"Xeon \\\"Gold\\\" 6130 \\\\ 2.1GHz\",\"cpu_isa\":\"avx512\","
                           "\"blas_library\":\"OpenBLAS\",\"blas_version\":\"0.3.21\",\"blas_corename\":\"Prescott\","
                           "\"blas_kernel_isa\":\"sse\",\"blas_threading\":\"OpenMP\",\"gemm_dtype\":\"bf16\",\"gemm_library\":\"oneDNN\",\"gemm_version\":\"2.6.3\",\"gemm_kernel\":\"brg:avx512_core_bf16\",\"peak_flops\":2.500000e+11,"
                           "\"peak_source\":\"measured\",\"peak_kernel\":\"avx512f\",\"peak_probe\":\"fp32 fma\",\"peak_trials\":3,"
                           "\"peak_flops_median\":2.000000e+11,\"peak_flops_min\":1.000000e+11,\"peak_spread\":0.60000,"
                           "\"omp_wait_policy\":\"\",\"gomp_spincount\":\"\",\"cores\":4,\"cores_busy_at_start\":1.00,"
                           "\"team_follows_load\":false,\"team_fixed_why\":\"--threads_adapt 0\"}\n");
    /* the bf16 GEMMs' peak is the bf16 GEMM probe's, and the banner names it */
    r.peak_gemm = true;
    snprintf(r.peak.kernel, sizeof r.peak.kernel, "oneDNN brg:avx512_core_bf16 GEMM m 256 n 768 k 256");
    s = written(json, &r);
    assert_non_null(strstr(s, "\"peak_probe\":\"bf16 gemm\""));
    s = written(run_record_print, &r);
    assert_non_null(strstr(s, "peak: 250.0 GFLOP/s per rank (measured: oneDNN brg:avx512_core_bf16 GEMM m 256 n 768 k "
                              "256 x 2 threads, best of 3 trials;"));
    assert_string_equal(run_record_peak_source(&r), "measured bf16 GEMM, the dtype the GEMMs run in");
    r.peak_gemm = false;
    /* a configured peak has no trials to report */
    r.peak_measured = false;
    s = written(json, &r);
    assert_non_null(strstr(s, "\"peak_source\":\"config\","));
    assert_null(strstr(s, "peak_trials"));
}

/* The threading line, and the warning when the run asks for more threads
 * than the cores it found free (rounded to whole cores). */
static void test_threads(void **state) {
    (void)state;
    struct run_record r = sample();
    snprintf(r.blas.corename, sizeof r.blas.corename, "SkylakeX"); /* no BLAS warning */
    snprintf(r.omp_wait_policy, sizeof r.omp_wait_policy, "passive");
    assert_string_equal(written(run_record_print_threads, &r),
                        "threading: 2 OpenMP threads per rank, wait policy OMP_WAIT_POLICY=passive, spin count "
                        "libgomp's default; OpenBLAS (OpenMP build) and oneDNN on the same pool | cores: 4, 3.0 free "
                        "at start-up (1.0 busy with other processes) | team: 2 threads, fixed (--threads_adapt 0)\n");
    assert_string_equal(written(warn, &r), ""); /* 2 threads, 3 free */
    r.cores = 2;
    r.cores_busy = 1.2; /* 0.8 free: one whole core */
    const char *s = written(warn, &r);
    assert_non_null(strstr(s, "warning: 2 threads per rank, but other processes kept 1.2 of the 2 cores busy at "
                              "start-up (0.8 free)"));
    assert_non_null(strstr(s, "--threads 1 fits what was free\n"));
    r.team_follows = true; /* the team starts on what fits, and the warning says so */
    assert_non_null(strstr(written(warn, &r), "the run follows the free cores between steps, starting on 1 thread\n"));
    assert_non_null(strstr(written(run_record_print_threads, &r), "| team: follows the free cores between steps, 1 to 2 threads\n"));
    r.team_follows = false;
    r.cores_busy = 0.4; /* 1.6 free: two, rounded */
    assert_string_equal(written(warn, &r), "");
    r.cores_busy = -1.0; /* not measured: no claim */
    r.cores = 1;
    assert_string_equal(written(warn, &r), "");
    assert_non_null(strstr(written(run_record_print_threads, &r), "| cores: 1 (free cores not measured) | team:"));
}

static void test_fallback_warning(void **state) {
    (void)state;
    struct run_record r = sample(); /* Prescott on AVX-512 */
    const char *s = written(warn, &r);
    assert_non_null(strstr(s, "warning: OpenBLAS 0.3.21 runs its Prescott kernels"));
    assert_non_null(strstr(s, "OPENBLAS_CORETYPE=SkylakeX"));
    assert_int_equal(strchr(s, '\n') - s + 1, (long)strlen(s)); /* one line */
    snprintf(r.blas.corename, sizeof r.blas.corename, "SkylakeX");
    assert_string_equal(written(warn, &r), "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_record),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_fallback_warning),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
