/* The layer ops' backends behind one table (private to model/). Each op
 * of include/layers.h is declared once, there; a backend is a struct
 * layer_ops whose members have the op's own type (LAYER_OP_TYPE), so a
 * backend's forms cannot drift from the op's contract:
 *   model/cpu/layer_ops_cpu.c    host memory, every build: the CPU's
 *                                kernels, in three GEMM flavours (OpenBLAS,
 *                                the bf16 reference, oneDNN)
 *   model/cuda/layer_ops_cuda.c  device memory, the CUDA build only
 * layer_backend (model/dispatch.c) is the one place a call's
 * backend is chosen: by its memory space (its operands' where it takes
 * struct operand, else its counter's) and the run's kernel choice. The dispatch then times the call (kernel_timing.h) and
 * runs the table's form. How a backend computes (widening bf16 into fp32
 * scratch or reading it as it is) is its own business. */
#ifndef SHARDLAB_MODEL_LAYER_OPS_H
#define SHARDLAB_MODEL_LAYER_OPS_H

#include "layers.h"
#include "llama_layers.h"

#ifdef __cplusplus
extern "C" {
#define LAYER_OP_TYPE(op) decltype(op)
#else
#define LAYER_OP_TYPE(op) __typeof__(op)
#endif

/* The ops every backend implements, by name: the table's members below
 * and each backend's declarations (LAYER_BACKEND_FORMS: model/cpu/
 * layers_cpu.h, model/cuda/layers_cuda.h) are made from this one list. */
#define LAYER_OPS(X, s) \
    X(embedding_rows_forward, s) X(positions_add, s) X(embedding_rows_backward, s) X(embedding_rows_forward_bf16, s) \
    X(embedding_rows_backward_bf16, s) X(layernorm_forward, s) X(layernorm_backward, s) X(layernorm_forward_bf16, s) \
    X(layernorm_backward_bf16, s) X(residual_forward, s) X(residual_forward_bf16, s) X(gemm_counted, s) \
    X(matmul_forward_sliced, s) X(matmul_backward_sliced, s) X(matmul_forward_bf16, s) X(matmul_backward_bf16, s) \
    X(matmul_forward_mixed, s) X(matmul_backward_mixed, s) X(bias_add, s) X(attention_forward, s) \
    X(attention_backward, s) X(attention_forward_bf16, s) X(attention_backward_bf16, s) X(attention_lse_forward, s) \
    X(attention_lse_backward, s) X(attention_lse_forward_bf16, s) X(attention_lse_backward_bf16, s) \
    X(gelu_forward, s) X(gelu_backward, s) X(gelu_forward_bf16, s) X(gelu_backward_bf16, s) \
    X(gelu_backward_bf16_grads, s) X(crossentropy_forward_backward, s) X(crossentropy_forward_backward_bf16, s) \
    X(crossentropy_row_max, s) X(crossentropy_exp_sum, s) X(crossentropy_finish, s) LLAMA_OPS(X, s)

/* LLaMA's (include/llama_layers.h): only the host's table has them yet; a
 * backend's NULL form stops the call, naming the op (dispatch.c). */
#define LLAMA_OPS(X, s) \
    X(rmsnorm_forward, s) X(rmsnorm_backward, s) X(rmsnorm_forward_bf16, s) X(rmsnorm_backward_bf16, s) \
    X(rope_forward, s) X(rope_backward, s) X(rope_forward_bf16, s) X(rope_backward_bf16, s) X(swiglu_forward, s) \
    X(swiglu_backward, s) X(swiglu_forward_bf16, s) X(swiglu_backward_bf16, s) X(swiglu_backward_bf16_grads, s) \
    X(attention_gqa_forward, s) X(attention_gqa_backward, s) X(attention_gqa_forward_bf16, s) \
    X(attention_gqa_backward_bf16, s)

/* The embedding's forms without a counter: the space that chose the
 * backend is all the op's first argument carried. */
typedef void encoder_forward_form(float *out, const int32_t *inp, const float *wte, const float *wpe, int64_t B,
                                  int64_t T, int64_t C);
typedef void encoder_backward_form(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t B,
                                   int64_t T, int64_t C);

/* Declares a backend's forms of the ops, each op's name and _suffix. */
#define LAYER_OP_FORM(op, suffix) LAYER_OP_TYPE(op) op##_##suffix;
#define LAYER_BACKEND_FORMS(suffix)                      \
    encoder_forward_form encoder_forward_##suffix;   \
    encoder_backward_form encoder_backward_##suffix; \
    LAYER_OPS(LAYER_OP_FORM, suffix)

/* A backend: its form of each op. Some may be NULL, and the dispatch
 * (model/dispatch.c) then runs what they are in other ops' terms:
 *   residual_layernorm_forward_bf16  no fused kernel: the two ops apart;
 *   matmul_{forward,backward}_{sliced,bf16}  GEMMs that round every
 *       operand to bf16 anyway: the mixed forms on the same operands
 *       (they take 64-bit sizes, so no slicing). */
struct layer_ops {
    encoder_forward_form *encoder_forward;
    encoder_backward_form *encoder_backward;
#define LAYER_OP_MEMBER(op, unused) LAYER_OP_TYPE(op) *op;
    LAYER_OPS(LAYER_OP_MEMBER, unused)
#undef LAYER_OP_MEMBER
    LAYER_OP_TYPE(residual_layernorm_forward_bf16) *residual_layernorm_forward_bf16;
};

/* The host's tables: one per GEMM flavour of the run (counters.h: none,
 * fc->bf16_reference, fc->onednn); every other op is the same CPU kernel. */
extern const struct layer_ops layer_ops_cpu, layer_ops_cpu_reference, layer_ops_cpu_onednn;
#ifdef SHARDLAB_CUDA
/* The device's (model/cuda/layer_ops_cuda.c). */
extern const struct layer_ops layer_ops_cuda;
#endif

/* The backend that runs `op` on memory of `space` for the run of fc (NULL:
 * a call without a counter, the plain CPU kernels on the host). A device
 * call in the CPU build stops the run, naming op. */
const struct layer_ops *layer_backend(enum mem_space space, const struct exec_ctx *fc, const char *op);

#ifdef __cplusplus
}
#endif

#endif
