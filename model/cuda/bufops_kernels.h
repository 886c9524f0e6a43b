/* The CUDA kernels behind the device build's buffer operations
 * (model/cuda/bufops_kernels.cu), with plain C types so both nvcc's C++
 * and the C files see one set of prototypes. Each runs on the legacy
 * default stream, so it is ordered after earlier work on it, and returns
 * the launch's cudaError_t as an int (0: launched). n is elements; x, dst
 * and src are device pointers; bf16 is uint16_t (include/dtype.h). */
#ifndef SHARDLAB_BUFOPS_KERNELS_H
#define SHARDLAB_BUFOPS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of every elementwise kernel (the test sizes straddle it). */
enum { BUFOPS_BLOCK = 256 };

int cuda_k_widen(float *dst, const uint16_t *src, size_t n);          /* dst = fp32(src), exact */
int cuda_k_narrow(uint16_t *dst, const float *src, size_t n);         /* dst = RNE bf16(src) */
int cuda_k_round_bf16(float *x, size_t n);                            /* x = fp32(RNE bf16(x)) */
int cuda_k_round_narrow(uint16_t *dst, float *x, size_t n);           /* dst = RNE bf16(x), x = fp32(dst) */
int cuda_k_accumulate_f32(float *dst, const float *src, size_t n);    /* dst += src */
int cuda_k_accumulate_bf16(uint16_t *dst, const float *src, size_t n); /* dst = RNE(fp32(dst) + src) */
int cuda_k_add_bf16(uint16_t *dst, const uint16_t *src, size_t n);    /* dst = RNE(fp32(dst) + fp32(src)) */
/* *out (host) = sum of squares in double: fixed blocks, each a fixed
 * tree, then one block over the partials, so the result is the same on
 * every run of the same n (not bitwise the CPU's, whose OpenMP order
 * differs). Waits for the result. */
int cuda_k_sum_squares_f32(const float *src, size_t n, double *out);
int cuda_k_sum_squares_bf16(const uint16_t *src, size_t n, double *out);

#ifdef __cplusplus
}
#endif

#endif
