/* Forced into the CUDA build's compile of model/cpu/{encoder,gelu,
 * layernorm,matmul,crossentropy,attention,attention_lse}.c (-include, the
 * Makefile), so their functions, prototypes included, take the names
 * cpu_*: the host path
 * of the device build's layers.h functions (layers_dispatch.c) and the
 * reference of tests/cuda/. attention_backward_scratch and
 * attention_lse_backward_scratch keep their names (sizes, no pointer to
 * dispatch on): the one definition for both paths.
 * The CPU build never sees this header. */
#define encoder_forward cpu_encoder_forward
#define encoder_backward cpu_encoder_backward
#define embedding_rows_forward cpu_embedding_rows_forward
#define positions_add cpu_positions_add
#define embedding_rows_backward cpu_embedding_rows_backward
#define layernorm_forward cpu_layernorm_forward
#define layernorm_backward cpu_layernorm_backward
#define gemm_counted cpu_gemm_counted
#define matmul_forward cpu_matmul_forward
#define matmul_backward cpu_matmul_backward
#define matmul_forward_sliced cpu_matmul_forward_sliced
#define matmul_backward_sliced cpu_matmul_backward_sliced
#define matmul_forward_bf16 cpu_matmul_forward_bf16
#define matmul_backward_bf16 cpu_matmul_backward_bf16
#define bias_add cpu_bias_add
#define gelu_forward cpu_gelu_forward
#define gelu_backward cpu_gelu_backward
#define gelu_forward_bf16 cpu_gelu_forward_bf16
#define gelu_backward_bf16 cpu_gelu_backward_bf16
#define residual_forward cpu_residual_forward
#define crossentropy_forward_backward cpu_crossentropy_forward_backward
#define crossentropy_row_max cpu_crossentropy_row_max
#define crossentropy_exp_sum cpu_crossentropy_exp_sum
#define crossentropy_finish cpu_crossentropy_finish
#define attention_forward cpu_attention_forward
#define attention_backward cpu_attention_backward
#define attention_lse_forward cpu_attention_lse_forward
#define attention_lse_backward cpu_attention_lse_backward
