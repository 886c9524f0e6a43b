/* The device build's two implementations of include/bufops.h, under their
 * own names; buf_* itself (bufops_dispatch.c) picks one by where the
 * pointers live.
 *   cpu_buf_*   model/cpu/bufops.c, compiled under these names
 *               (bufops_rename.h): host memory
 *   cuda_buf_*  bufops_device.c over bufops_kernels.cu: device memory,
 *               the same results (bf16 bit for bit; the sum of squares
 *               in double, in another order)
 * A CUDA failure inside cuda_buf_* (a bad pointer, a lost device) leaves
 * the device unusable: it prints the operation and CUDA's message on
 * stderr and exits non-zero, as a failed kernel would. */
#ifndef SHARDLAB_BUFOPS_CUDA_H
#define SHARDLAB_BUFOPS_CUDA_H

#include <stddef.h>

#include "dtype.h"

void cpu_buf_zero(void *dst, size_t bytes);
void cpu_buf_copy(void *dst, const void *src, size_t bytes);
void cpu_buf_widen(float *dst, const bf16 *src, size_t n);
void cpu_buf_narrow(bf16 *dst, const float *src, size_t n);
void cpu_buf_round_bf16(float *x, size_t n);
void cpu_buf_round_narrow(bf16 *dst, float *x, size_t n);
void cpu_buf_from_fp32(void *dst, enum dtype dt, const float *src, size_t n);
void cpu_buf_to_fp32(float *dst, const void *src, enum dtype dt, size_t n);
void cpu_buf_accumulate(void *dst, enum dtype dt, const float *src, size_t n);
void cpu_buf_add(void *dst, const void *src, enum dtype dt, size_t n);
double cpu_buf_sum_squares(const void *src, enum dtype dt, size_t n);

void cuda_buf_zero(void *dst, size_t bytes);
/* Any pair of host and device pointers (cudaMemcpyDefault). */
void cuda_buf_copy(void *dst, const void *src, size_t bytes);
void cuda_buf_widen(float *dst, const bf16 *src, size_t n);
void cuda_buf_narrow(bf16 *dst, const float *src, size_t n);
void cuda_buf_round_bf16(float *x, size_t n);
void cuda_buf_round_narrow(bf16 *dst, float *x, size_t n);
void cuda_buf_from_fp32(void *dst, enum dtype dt, const float *src, size_t n);
void cuda_buf_to_fp32(float *dst, const void *src, enum dtype dt, size_t n);
void cuda_buf_accumulate(void *dst, enum dtype dt, const float *src, size_t n);
void cuda_buf_add(void *dst, const void *src, enum dtype dt, size_t n);
double cuda_buf_sum_squares(const void *src, enum dtype dt, size_t n);

#endif
