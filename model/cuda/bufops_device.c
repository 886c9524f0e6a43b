/* include/bufops.h on device memory (cuda_buf_*, bufops_cuda.h): each
 * operation is one kernel of bufops_kernels.cu on the legacy default
 * stream, or a cudaMemset / cudaMemcpy. A kernel returns queued, in stream
 * order with every later kernel, copy and collective (the NCCL tables wait
 * for the default stream), not finished; a copy to host memory and the
 * sum of squares return with their result in place. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "bufops_cuda.h"
#include "bufops_kernels.h"

/* A failed launch or copy: the operation and CUDA's reason, then exit
 * (bufops_cuda.h: the device is not usable after it). */
static void check(int rc, const char *op) {
    cudaError_t e = (cudaError_t)rc;
    if (e == cudaSuccess) return;
    fprintf(stderr, "error: CUDA %s: %s (error %d)\n", op, cudaGetErrorString(e), (int)e);
    exit(EXIT_FAILURE);
}

void cuda_buf_zero(void *dst, size_t bytes) {
    if (bytes) check(cudaMemset(dst, 0, bytes), "buf_zero");
}

void cuda_buf_copy(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "buf_copy");
}

void cuda_buf_widen(float *dst, const bf16 *src, size_t n) { check(cuda_k_widen(dst, src, n), "buf_widen"); }

void cuda_buf_narrow(bf16 *dst, const float *src, size_t n) { check(cuda_k_narrow(dst, src, n), "buf_narrow"); }

void cuda_buf_round_bf16(float *x, size_t n) { check(cuda_k_round_bf16(x, n), "buf_round_bf16"); }
void cuda_buf_round_narrow(bf16 *dst, float *x, size_t n) {
    check(cuda_k_round_narrow(dst, x, n), "buf_round_narrow");
}

void cuda_buf_from_fp32(void *dst, enum dtype dt, const float *src, size_t n) {
    if (dt == DTYPE_FP32) cuda_buf_copy(dst, src, n * sizeof *src);
    else cuda_buf_narrow(dst, src, n);
}

void cuda_buf_to_fp32(float *dst, const void *src, enum dtype dt, size_t n) {
    if (dt == DTYPE_FP32) cuda_buf_copy(dst, src, n * sizeof *dst);
    else cuda_buf_widen(dst, src, n);
}

void cuda_buf_accumulate(void *dst, enum dtype dt, const float *src, size_t n) {
    if (dt == DTYPE_FP32) check(cuda_k_accumulate_f32(dst, src, n), "buf_accumulate");
    else check(cuda_k_accumulate_bf16(dst, src, n), "buf_accumulate");
}

void cuda_buf_add(void *dst, const void *src, enum dtype dt, size_t n) {
    if (dt == DTYPE_FP32) check(cuda_k_accumulate_f32(dst, src, n), "buf_add");
    else check(cuda_k_add_bf16(dst, src, n), "buf_add");
}

double cuda_buf_sum_squares(const void *src, enum dtype dt, size_t n) {
    double s = 0.0;
    if (dt == DTYPE_FP32) check(cuda_k_sum_squares_f32(src, n, &s), "buf_sum_squares");
    else check(cuda_k_sum_squares_bf16(src, n, &s), "buf_sum_squares");
    return s;
}
