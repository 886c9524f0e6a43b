/* The host's layer tables (model/layer_ops.h): the CPU's kernels, with the
 * run's layer GEMMs (matmul_*) in one of three flavours, chosen by
 * layer_backend from the counter (counters.h):
 *   layer_ops_cpu            fp32 sgemm through OpenBLAS (model/cpu/matmul.c)
 *   layer_ops_cpu_reference  --gemm_kernel reference: every operand rounded
 *                            to bf16, then sgemm (matmul_*_mixed_cpu)
 *   layer_ops_cpu_onednn     --gemm_dtype bf16: oneDNN's bf16 GEMMs
 *                            (include/onednn_gemms.h; fc->onednn)
 * gemm_counted (the attention's products) is sgemm in all three. */
#include "layers_cpu.h"

/* Every op but the layer GEMMs: the same kernel in the three tables. */
#define CPU_KERNELS                                                                                                  \
    .encoder_forward = encoder_forward_cpu, .encoder_backward = encoder_backward_cpu,                               \
    .embedding_rows_forward = embedding_rows_forward_cpu, .positions_add = positions_add_cpu,                       \
    .embedding_rows_backward = embedding_rows_backward_cpu,                                                         \
    .embedding_rows_forward_bf16 = embedding_rows_forward_bf16_cpu,                                                 \
    .embedding_rows_backward_bf16 = embedding_rows_backward_bf16_cpu, .layernorm_forward = layernorm_forward_cpu,   \
    .layernorm_backward = layernorm_backward_cpu, .layernorm_forward_bf16 = layernorm_forward_bf16_cpu,             \
    .layernorm_backward_bf16 = layernorm_backward_bf16_cpu, .residual_forward = residual_forward_cpu,               \
    .residual_forward_bf16 = residual_forward_bf16_cpu, .residual_layernorm_forward_bf16 = NULL,                    \
    .gemm_counted = gemm_counted_cpu, .bias_add = bias_add_cpu, .attention_forward = attention_forward_cpu,         \
    .attention_backward = attention_backward_cpu, .attention_forward_bf16 = attention_forward_bf16_cpu,             \
    .attention_backward_bf16 = attention_backward_bf16_cpu, .attention_lse_forward = attention_lse_forward_cpu,     \
    .attention_lse_backward = attention_lse_backward_cpu,                                                           \
    .attention_lse_forward_bf16 = attention_lse_forward_bf16_cpu,                                                   \
    .attention_lse_backward_bf16 = attention_lse_backward_bf16_cpu, .gelu_forward = gelu_forward_cpu,               \
    .gelu_backward = gelu_backward_cpu, .gelu_forward_bf16 = gelu_forward_bf16_cpu,                                 \
    .gelu_backward_bf16 = gelu_backward_bf16_cpu, .gelu_backward_bf16_grads = gelu_backward_bf16_grads_cpu,         \
    .crossentropy_forward_backward = crossentropy_forward_backward_cpu,                                             \
    .crossentropy_forward_backward_bf16 = crossentropy_forward_backward_bf16_cpu,                                   \
    .crossentropy_row_max = crossentropy_row_max_cpu, .crossentropy_exp_sum = crossentropy_exp_sum_cpu,             \
    .crossentropy_finish = crossentropy_finish_cpu, .rmsnorm_forward = rmsnorm_forward_cpu,                         \
    .rmsnorm_backward = rmsnorm_backward_cpu, .rmsnorm_forward_bf16 = rmsnorm_forward_bf16_cpu,                     \
    .rmsnorm_backward_bf16 = rmsnorm_backward_bf16_cpu, .rope_forward = rope_forward_cpu,                           \
    .rope_backward = rope_backward_cpu, .rope_forward_bf16 = rope_forward_bf16_cpu,                                 \
    .rope_backward_bf16 = rope_backward_bf16_cpu, .swiglu_forward = swiglu_forward_cpu,                             \
    .swiglu_backward = swiglu_backward_cpu, .swiglu_forward_bf16 = swiglu_forward_bf16_cpu,                         \
    .swiglu_backward_bf16 = swiglu_backward_bf16_cpu, .swiglu_backward_bf16_grads = swiglu_backward_bf16_grads_cpu, \
    .attention_gqa_forward = attention_gqa_forward_cpu, .attention_gqa_backward = attention_gqa_backward_cpu,       \
    .attention_gqa_forward_bf16 = attention_gqa_forward_bf16_cpu,                                                   \
    .attention_gqa_backward_bf16 = attention_gqa_backward_bf16_cpu

/* The layer GEMMs, the one part where the three tables differ. */
#define CPU_GEMMS(fwd_sliced, bwd_sliced, fwd_bf16, bwd_bf16, fwd_mixed, bwd_mixed)                               \
    .matmul_forward_sliced = fwd_sliced, .matmul_backward_sliced = bwd_sliced, .matmul_forward_bf16 = fwd_bf16,     \
    .matmul_backward_bf16 = bwd_bf16, .matmul_forward_mixed = fwd_mixed, .matmul_backward_mixed = bwd_mixed

const struct layer_ops layer_ops_cpu = {
    CPU_KERNELS, CPU_GEMMS(matmul_forward_sliced_cpu, matmul_backward_sliced_cpu, matmul_forward_bf16_cpu,
                           matmul_backward_bf16_cpu, matmul_forward_mixed_cpu, matmul_backward_mixed_cpu)};

/* The fp32-operand GEMMs are the mixed forms' (NULL: layer_ops.h); the
 * bf16-input ones the OpenBLAS table's (they round alike). */
const struct layer_ops layer_ops_cpu_reference = {
    CPU_KERNELS,
    CPU_GEMMS(NULL, NULL, matmul_forward_bf16_cpu, matmul_backward_bf16_cpu, matmul_forward_mixed_cpu,
              matmul_backward_mixed_cpu)};

/* Every layer GEMM on oneDNN's bf16 kernels, through its mixed forms. */
const struct layer_ops layer_ops_cpu_onednn = {
    CPU_KERNELS, CPU_GEMMS(NULL, NULL, NULL, NULL, matmul_forward_onednn, matmul_backward_onednn)};
