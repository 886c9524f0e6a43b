// For the .cu files that call cuBLAS (matmul.cu, attention.cu): a failed
// cuBLAS call names itself and exits non-zero, like cuda_check.
#ifndef SHARDLAB_CUBLAS_CHECK_H
#define SHARDLAB_CUBLAS_CHECK_H

#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>

static inline void blas_check(cublasStatus_t st, const char *what) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "error: cuBLAS %s: %s (status %d)\n", what, cublasGetStatusString(st), (int)st);
    exit(EXIT_FAILURE);
}

#endif
