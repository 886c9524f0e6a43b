/* A run's context for the CUDA kernels (include/device.h:
 * device_kernels_open), reached through the run's struct flop_counter
 * (include/counters.h): one cuBLAS handle for every GEMM of the run, and
 * the GEMMs' math (config key gemm_dtype). C and C++ (the .cu files). */
#ifndef SHARDLAB_KERNEL_CONTEXT_H
#define SHARDLAB_KERNEL_CONTEXT_H

#include <stdbool.h>

struct kernel_context {
    void *cublas;      /* cublasHandle_t, made once at the run's start */
    bool bf16_gemms;   /* layer GEMMs round their operands to bf16 (nearest even) and accumulate in fp32 on the
                        * tensor cores; false: fp32 operands and fp32 math (no TF32), the CPU's arithmetic */
};

#endif
