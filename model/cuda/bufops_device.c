/* include/bufops.h on device memory, buf_*_cuda: each
 * operation is one kernel of bufops_kernels.cu on the legacy default
 * stream, or a cudaMemset / cudaMemcpy. A kernel returns queued, in stream
 * order with every later kernel, copy and collective (the NCCL tables wait
 * for the default stream), not finished; a copy to host memory and the
 * sum of squares return with their result in place. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "../bufops_ops.h"
#include "bufops_kernels.h"

/* A failed launch or copy: the operation and CUDA's reason, then exit
 * (bufops.h: the device is not usable after it). */
static void check(int rc, const char *op) {
    cudaError_t e = (cudaError_t)rc;
    if (e == cudaSuccess) return;
    fprintf(stderr, "error: CUDA %s: %s (error %d)\n", op, cudaGetErrorString(e), (int)e);
    exit(EXIT_FAILURE);
}

void buf_zero_cuda(void *dst, size_t bytes) {
    if (bytes) check(cudaMemset(dst, 0, bytes), "buf_zero");
}

void buf_copy_cuda(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "buf_copy");
}

void buf_widen_cuda(float *dst, const bf16 *src, size_t n) { check(cuda_k_widen(dst, src, n), "buf_widen"); }

void buf_narrow_cuda(bf16 *dst, const float *src, size_t n) { check(cuda_k_narrow(dst, src, n), "buf_narrow"); }

void buf_round_bf16_cuda(float *x, size_t n) { check(cuda_k_round_bf16(x, n), "buf_round_bf16"); }
void buf_round_narrow_cuda(bf16 *dst, float *x, size_t n) {
    check(cuda_k_round_narrow(dst, x, n), "buf_round_narrow");
}

void buf_from_fp32_cuda(void *dst, enum dtype dt, const float *src, size_t n) {
    if (dt == DTYPE_FP32) buf_copy_cuda(dst, src, n * sizeof *src);
    else buf_narrow_cuda(dst, src, n);
}

void buf_to_fp32_cuda(float *dst, const void *src, enum dtype dt, size_t n) {
    if (dt == DTYPE_FP32) buf_copy_cuda(dst, src, n * sizeof *dst);
    else buf_widen_cuda(dst, src, n);
}

void buf_accumulate_cuda(void *dst, enum dtype dt, const float *src, size_t n) {
    if (dt == DTYPE_FP32) check(cuda_k_accumulate_f32(dst, src, n), "buf_accumulate");
    else check(cuda_k_accumulate_bf16(dst, src, n), "buf_accumulate");
}

void buf_add_cuda(void *dst, const void *src, enum dtype dt, size_t n) {
    if (dt == DTYPE_FP32) check(cuda_k_accumulate_f32(dst, src, n), "buf_add");
    else check(cuda_k_add_bf16(dst, src, n), "buf_add");
}

double buf_sum_squares_cuda(const void *src, enum dtype dt, size_t n) {
    double s = 0.0;
    if (dt == DTYPE_FP32) check(cuda_k_sum_squares_f32(src, n, &s), "buf_sum_squares");
    else check(cuda_k_sum_squares_bf16(src, n, &s), "buf_sum_squares");
    return s;
}

/* The device's table (model/bufops_ops.h), with the sum-of-squares plan of
 * v2/sumsq_segments.cu. */
const struct buf_ops buf_ops_cuda = {
#define BUF_CUDA_FORM(op) .op = op##_cuda,
    BUF_OPS(BUF_CUDA_FORM) BUF_SUMSQ_OPS(BUF_CUDA_FORM)
#undef BUF_CUDA_FORM
};
