/* The CUDA backend's scratch sizes, which a host plans with in either
 * build (the model's allocation, the rank theory of a GPU run): header
 * only, since the CPU build compiles no model/cuda/ source. */
#ifndef SHARDLAB_MODEL_CUDA_DEVICE_SCRATCH_H
#define SHARDLAB_MODEL_CUDA_DEVICE_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

#include "v2/flash2_schedule.h"

/* Floats of attention_lse_backward_bf16's device scratch: the
 * FlashAttention-2 kernels' layout (D, dout in bf16, the per-key-block dQ
 * partials). */
static inline size_t device_attention_lse_bf16_scratch(int64_t B, int64_t T, int64_t C, int64_t NH) {
    return flash2_scratch_layout(B, T, C, NH).total;
}

#endif
