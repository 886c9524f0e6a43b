// The run's kernel context (kernel_context.h; include/device.h).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernel_context.h"
#include "v2/matmul_lt_cached.h"

namespace {

void free_timing(struct kernel_timing *t) {
    if (!t) return;
    for (int e = 0; e < KERNEL_SPANS; e++) {
        if (t->start[e]) cudaEventDestroy(t->start[e]);
        if (t->stop[e]) cudaEventDestroy(t->stop[e]);
    }
    free(t);
}

// KERNEL_SPANS event pairs (cudaEventDefault: they record time), or NULL.
struct kernel_timing *open_timing() {
    struct kernel_timing *t = (struct kernel_timing *)calloc(1, sizeof *t);
    if (!t) return nullptr;
    for (int e = 0; e < KERNEL_SPANS; e++)
        if (cudaEventCreate(&t->start[e]) != cudaSuccess || cudaEventCreate(&t->stop[e]) != cudaSuccess) {
            free_timing(t);
            return nullptr;
        }
    return t;
}

}  // namespace

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
     * pool. Its default release threshold is 0: every synchronize hands the
     * pool's memory back to the driver, and the next cudaMallocAsync maps
     * it again, gigabytes a step. Kept instead, the pool stays at its peak,
     * which the memory table shows as "device untracked". */
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
    k->timing = open_timing();
    if (!k->timing) {
        snprintf(err, err_len, "the GPU's kernel context: %d CUDA event pairs for the kernel timing: %s",
                 (int)KERNEL_SPANS, cudaGetErrorString(cudaGetLastError()));
        cublasDestroy(h);
        free(k);
        return nullptr;
    }
    cublasLtHandle_t lt = nullptr;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS ||
        cudaMalloc(&k->lt_workspace, LT_WORKSPACE_BYTES) != cudaSuccess) {
        snprintf(err, err_len, "the GPU's kernel context: %s",
                 lt ? "cuBLASLt's workspace: cudaMalloc failed" : "cublasLtCreate failed");
        if (lt) cublasLtDestroy(lt);
        free_timing(k->timing);
        cublasDestroy(h);
        free(k);
        return nullptr;
    }
    k->cublas = h;
    k->cublaslt = lt;
    k->lt_workspace_bytes = LT_WORKSPACE_BYTES;
    k->bf16_gemms = bf16_gemms;
    return k;
}

extern "C" void cuda_kernels_close(struct kernel_context *k) {
    if (!k) return;
    if (k->lt_plans) {
        lt_cache_free((struct lt_cache *)k->lt_plans);
        free(k->lt_plans);
    }
    cublasDestroy((cublasHandle_t)k->cublas);
    cublasLtDestroy((cublasLtHandle_t)k->cublaslt);
    cudaFree(k->lt_workspace);
    free_timing(k->timing);
    free(k);
}
