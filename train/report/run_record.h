/* What a run ran on and against which peak: the banner's "machine:" and
 * "peak:" lines, the BLAS fallback warning, and the JSON log's "run"
 * record (the first record of each run, before its step records). */
#ifndef SHARDLAB_RUN_RECORD_H
#define SHARDLAB_RUN_RECORD_H

#include <stdbool.h>
#include <stdio.h>

#include "counters.h"
#include "device.h"
#include "dtype.h"
#include "../measure/machine.h"
#include "../measure/peak.h"

struct run_record {
    int world_size, threads;
    double peak_flops;       /* what MFU divides by */
    bool peak_measured;      /* false: peak_flops from the config, `peak` unused */
    struct peak_result peak;
    bool peak_gemm;          /* the peak is the bf16 GEMM's (peak_measure_bf16_gemm), not the FMA probe's */
    char cpu[128];           /* machine_cpu_model() */
    enum isa_level isa;      /* machine_cpu_isa() */
    struct blas_info blas;
    bool on_gpu;             /* the ranks run on GPUs: peak_flops is the GPU's (gpu below), not the CPU's */
    /* the GPU's name, its path (--gpu_path) and what verified it, or
     * UNVERIFIED and why (device_info.verification) */
    char gpu[DEVICE_NAME_LEN + DEVICE_VERIFICATION_LEN + 32];
    struct device_peak gpu_peak;
    /* The layer GEMMs (run_record_describe_gemms): their operands, the
     * library and the kernel it chose. */
    enum dtype gemm_dtype;
    char gemm_library[32], gemm_version[32], gemm_kernel[128];
    /* The threading setup: OpenMP's wait policy as the environment sets it
     * ("" where unset: libgomp's default), and the cores others kept busy
     * at start-up (machine_cores_used_by_others over the peak probe; -1:
     * not measured). */
    char omp_wait_policy[32], gomp_spincount[32];
    int cores;
    double cores_busy;
    /* Whether the team follows the free cores between steps (--threads_adapt,
     * docs/THREADS.md), and where it cannot, why (the line says so). */
    bool team_follows;
    char team_fixed_why[96];
};

/* Fills the machine's fields (CPU model, ISA, BLAS). */
void run_record_describe_machine(struct run_record *r);
/* Fills the GEMM fields: the run's operands (tr->gemm_dtype) and, on the
 * CPU, oneDNN's version and kernel when the counter carries its context
 * (fc->onednn), else the BLAS's (call run_record_describe_machine first);
 * on a GPU, cuBLAS. */
void run_record_describe_gemms(struct run_record *r, const struct exec_ctx *fc, enum dtype gemm_dtype);
/* Fills the threading fields from the environment (OMP_WAIT_POLICY,
 * GOMP_SPINCOUNT); the cores are the caller's to measure. */
void run_record_describe_threading(struct run_record *r);
/* Where peak_flops came from, in words (the banner's and the FLOP table's). */
const char *run_record_peak_source(const struct run_record *r);
/* The banner's two lines: machine and BLAS kernel, then the peak. */
void run_record_print(FILE *out, const struct run_record *r);
/* The threading line of the banner: threads, the wait policy, who shares
 * the pool, the cores free at start-up. */
void run_record_print_threads(FILE *out, const struct run_record *r);
/* One "warning:" line when the BLAS kernel is a fallback for this CPU
 * (blas_suggested_coretype), and one when the run asks for more threads
 * than the cores it found free; nothing otherwise. Returns whether it
 * warned. */
bool run_record_warn(FILE *out, const struct run_record *r);
/* {"type":"run", ...} on one line. */
void run_record_json(FILE *json, const struct run_record *r);

#endif
