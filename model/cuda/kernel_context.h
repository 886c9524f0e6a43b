/* A run's context for the CUDA kernels (include/device.h:
 * device_kernels_open), reached through the run's struct exec_ctx
 * (include/counters.h): one cuBLAS handle for every GEMM of the run, the
 * GEMMs' math (config key gemm_dtype), and the CUDA events that time the
 * kernel calls (model/kernel_timing.h). C and C++ (the .cu files). */
#ifndef SHARDLAB_KERNEL_CONTEXT_H
#define SHARDLAB_KERNEL_CONTEXT_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>

/* The event pairs of kernel_timing.h's spans: [0, used) taken since the
 * last sync, `open` of them begun and not ended; kind: enum kernel_kind,
 * or KERNEL_NUM_KINDS for a GEMM's time. */
enum { KERNEL_SPANS = 4096 };
struct kernel_timing {
    cudaEvent_t start[KERNEL_SPANS], stop[KERNEL_SPANS];
    int kind[KERNEL_SPANS];
    int used, open;
};

/* cuBLASLt's workspace for the bias epilogues (matmul_lt.cu): what it
 * asks for on Hopper. */
enum { LT_WORKSPACE_BYTES = 32 << 20 };

struct kernel_context {
    void *cublas;      /* cublasHandle_t, made once at the run's start */
    void *cublaslt;    /* cublasLtHandle_t, for the GEMMs with a bias epilogue (matmul_lt.h) */
    void *lt_workspace; /* LT_WORKSPACE_BYTES of device memory (cudaMalloc: outside the tracker) */
    size_t lt_workspace_bytes;
    long long bias_epilogues; /* GEMMs that ran with a bias epilogue (the tests check they do) */
    bool bf16_gemms;   /* layer GEMMs round their operands to bf16 (nearest even) and accumulate in fp32 on the
                        * tensor cores; false: fp32 operands and fp32 math (no TF32), the CPU's arithmetic */
    struct kernel_timing *timing; /* the spans of model/kernel_timing.h */
    void *lt_plans;    /* --gpu_path v2's cuBLASLt plans per shape (struct lt_cache, model/cuda/v2/lt_plan_cache.h),
                        * made by its first GEMM (v2/matmul_mixed.cu), freed with the context; NULL on v1 */
    long long ce_v2_grid; /* --gpu_path v2's cross-entropy grid (v2/crossentropy_bf16.cu: the SMs times the
                           * blocks a SM holds), asked of the device by its first call; 0 until then */
};

#endif
