/* The max of collectives.h over NCCL (comm_nccl.c): fp32 values become
 * uint32 keys whose unsigned order is the float order with -0 below +0
 * and every NaN (made one quiet NaN) above +Inf, so NCCL's exact integer
 * max gives the rule's result; then the keys become floats again. Kernels
 * in nccl_max.cu, on the given stream; each returns its cudaError_t as an
 * int. */
#ifndef SHARDLAB_NCCL_MAX_H
#define SHARDLAB_NCCL_MAX_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* In place over n fp32 values (their bits, as uint32). */
int nccl_max_to_keys_f32(uint32_t *x, size_t n, cudaStream_t s);
int nccl_max_from_keys_f32(uint32_t *x, size_t n, cudaStream_t s);
/* bf16 (uint16) values to keys in keys[n], and back (exact: the max is
 * one of the widened inputs). */
int nccl_max_to_keys_bf16(uint32_t *keys, const uint16_t *x, size_t n, cudaStream_t s);
int nccl_max_from_keys_bf16(uint16_t *x, const uint32_t *keys, size_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
