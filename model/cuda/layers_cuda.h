/* The CUDA build's forms of include/layers.h's ops (model/cuda/ and its
 * v2/ folder): every buffer in device memory, the int32 tokens and targets
 * included; the exec_ctx is host memory, counted as the CPU counts
 * (gemm_seconds: the GEMM's time). Each has its op's type
 * (model/layer_ops.h: LAYER_OP_TYPE), so its contract is the op's, and C
 * linkage for the .cu files that define them; model/cuda/layer_ops_cuda.c
 * puts them in the device's table.
 *   A call returns with its kernels queued; a CUDA failure prints the
 * function and CUDA's reason and exits non-zero (cuda_check.h). The
 * embeddings' and the vocabulary-parallel passes' device forms count
 * nothing (the counter is only their type's). attention_lse_*_cuda is
 * flash attention (flash_attention.h), which exits non-zero with its
 * message on a head size other than 32, 64, 128 (the trainer refuses such
 * a run at start-up: device_check_flash_attention).
 *   The bf16 data path's forms (the _bf16 ones but matmul_*_bf16, and the
 * mixed GEMMs) are v2/'s: rows_v2.cu, matmul_mixed.cu, embedding_bf16.cu,
 * crossentropy_bf16.cu (docs/GPU.md, "v2 so far": their numerics against
 * the CPU's), attention_widened.cu (the bf16 inputs widened into pool
 * temporaries, v1's fp32 kernels, the outputs narrowed) and flash2.h
 * (FlashAttention-2's kernels, head sizes 32, 64, 128; no forward scratch;
 * the backward's is attention_lse_bf16_scratch_in(MEM_DEVICE, ...)
 * floats, not the CPU form's). */
#ifndef SHARDLAB_MODEL_CUDA_LAYERS_CUDA_H
#define SHARDLAB_MODEL_CUDA_LAYERS_CUDA_H

#include "../layer_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

LAYER_BACKEND_FORMS(cuda)
LAYER_OP_TYPE(residual_layernorm_forward_bf16) residual_layernorm_forward_bf16_cuda;
LAYER_OP_TYPE(matmul_forward) matmul_forward_cuda;
LAYER_OP_TYPE(matmul_backward) matmul_backward_cuda;

#ifdef __cplusplus
}
#endif

#endif
