// The run's kernel context (kernel_context.h; include/device.h).
#include <cublas_v2.h>
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
    k->cublas = h;
    k->bf16_gemms = bf16_gemms;
    return k;
}

extern "C" void cuda_kernels_close(struct kernel_context *k) {
    if (!k) return;
    cublasDestroy((cublasHandle_t)k->cublas);
    free(k);
}
