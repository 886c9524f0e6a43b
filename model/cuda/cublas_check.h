// For the .cu files that call cuBLAS (matmul.cu, attention.cu): a failed
// cuBLAS call names itself and exits non-zero, like cuda_check; and the
// wall clock a GEMM's synchronized time is taken with (fc->gemm_seconds).
#ifndef SHARDLAB_CUBLAS_CHECK_H
#define SHARDLAB_CUBLAS_CHECK_H

#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline void blas_check(cublasStatus_t st, const char *what) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "error: cuBLAS %s: %s (status %d)\n", what, cublasGetStatusString(st), (int)st);
    exit(EXIT_FAILURE);
}

static inline double seconds() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#endif
