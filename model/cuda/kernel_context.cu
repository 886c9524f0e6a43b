// The run's kernel context (kernel_context.h; include/device.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernel_context.h"

extern "C" struct kernel_context *cuda_kernels_open(bool bf16_gemms, char *err, size_t err_len) {
    struct kernel_context *k = (struct kernel_context *)calloc(1, sizeof *k);
    cublasHandle_t h = nullptr;
    if (!k || cublasCreate(&h) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(h, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, err_len, "the GPU's kernel context: %s", k ? "cublasCreate failed" : "out of host memory");
        if (h) cublasDestroy(h);
        free(k);
        return nullptr;
    }
    /* The kernels' short-lived buffers (bf16 GEMM operands, column-sum
     * partials, the embedding's sort) come from the device's stream-ordered
     * pool. Its default release threshold is 0: every synchronize (each
     * layers.h call makes one) hands the pool's memory back to the driver,
     * and the next cudaMallocAsync maps it again, gigabytes a step. Kept
     * instead, the pool stays at its peak, which the memory table shows as
     * "device untracked". */
    cudaMemPool_t pool;
    int dev = 0;
    uint64_t keep = UINT64_MAX;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess ||
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) {
        snprintf(err, err_len, "the GPU's kernel context: the device's memory pool: %s",
                 cudaGetErrorString(cudaGetLastError()));
        cublasDestroy(h);
        free(k);
        return nullptr;
    }
    k->cublas = h;
    k->bf16_gemms = bf16_gemms;
    return k;
}

extern "C" void cuda_kernels_close(struct kernel_context *k) {
    if (!k) return;
    cublasDestroy((cublasHandle_t)k->cublas);
    free(k);
}
