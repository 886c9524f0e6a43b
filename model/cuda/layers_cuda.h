/* The CUDA build's two implementations of include/layers.h, under their
 * own names; the layers.h names themselves
 * (layers_dispatch.c) pick one by where the buffers live.
 *   cpu_*   the model/cpu/ files compiled under these names (layers_rename.h):
 *           host memory
 *   cuda_*  model/cuda/{encoder,layernorm,gelu,matmul,crossentropy,attention}.cu:
 *           every buffer in device memory (the int32 tokens and targets
 *           included); the flop_counter is host memory, counted exactly as
 *           the CPU counts (gemm_seconds: the GEMM's wall time, synchronized)
 * Semantics, shapes, what is accumulated and what is written are layers.h's.
 * attention_backward_scratch is not renamed: one definition (model/cpu/
 * attention.c) sizes the scratch of both backwards (attention.cu: how the
 * device uses it); nor is attention_lse_backward_scratch (model/cpu/
 * attention_lse.c: B NH T, flash_attention_backward_scratch's count).
 * attention_lse_* on device memory is model/cuda/flash_attention.h itself
 * (layers_dispatch.c), so it has no cuda_* name here.
 * Each cuda_* call returns when its results are in place (it synchronizes,
 * as the CUDA bufops do); a CUDA failure prints the function and CUDA's
 * reason and exits non-zero (cuda_check.h). */
#ifndef SHARDLAB_LAYERS_CUDA_H
#define SHARDLAB_LAYERS_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "counters.h"

#ifdef __cplusplus
extern "C" {
#endif

void cpu_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int64_t B, int64_t T,
                         int64_t C);
void cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t B, int64_t T,
                          int64_t C);
void cpu_embedding_rows_forward(float *out, const int32_t *inp, const float *wte, int64_t v0, int64_t rows, int64_t BT,
                                int64_t C, struct flop_counter *fc);
void cpu_positions_add(float *out, const float *wpe, int64_t B, int64_t T, int64_t C, struct flop_counter *fc);
void cpu_embedding_rows_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t v0,
                                 int64_t rows, int64_t B, int64_t T, int64_t C, struct flop_counter *fc);
void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                           const float *bias, int64_t N, int64_t C, struct flop_counter *fc);
void cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, const float *mean, const float *rstd, int64_t N, int64_t C,
                            struct flop_counter *fc);
void cpu_gemm_counted(struct flop_counter *fc, enum gemm_kind kind, bool trans_a, bool trans_b, int64_t m, int64_t n,
                      int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc);
void cpu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int64_t N, int64_t C,
                        int64_t OC, struct flop_counter *fc);
void cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                         const float *weight, int64_t N, int64_t C, int64_t OC, struct flop_counter *fc);
void cpu_matmul_forward_sliced(float *out, const float *inp, const float *weight, const float *bias, int64_t N,
                               int64_t C, int64_t OC, int64_t max_rows, struct flop_counter *fc);
void cpu_matmul_backward_sliced(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                const float *weight, int64_t N, int64_t C, int64_t OC, int64_t max_rows,
                                struct flop_counter *fc);
/* inp: bf16 */
void cpu_matmul_forward_bf16(float *out, const uint16_t *inp, const float *weight, const float *bias, int64_t N,
                             int64_t C, int64_t OC, struct flop_counter *fc);
void cpu_matmul_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout, const uint16_t *inp,
                              const float *weight, int64_t N, int64_t C, int64_t OC, struct flop_counter *fc);
void cpu_bias_add(float *out, const float *bias, int64_t N, int64_t OC, struct flop_counter *fc);
void cpu_gelu_forward(float *out, const float *inp, int64_t n, struct flop_counter *fc);
void cpu_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n, struct flop_counter *fc);
void cpu_gelu_forward_bf16(uint16_t *out, uint16_t *pre_store, const float *pre, int64_t n, struct flop_counter *fc);
void cpu_gelu_backward_bf16(float *dinp, const uint16_t *inp, const float *dout, int64_t n, struct flop_counter *fc);
void cpu_residual_forward(float *out, const float *a, const float *b, int64_t n, struct flop_counter *fc);
double cpu_crossentropy_forward_backward(float *logits, float *losses, const int32_t *targets, int64_t N,
                                         int64_t V, int64_t Vp, float dloss, struct flop_counter *fc);
void cpu_crossentropy_row_max(const float *logits, float *maxv, int64_t N, int64_t Vl, int64_t valid,
                              struct flop_counter *fc);
void cpu_crossentropy_exp_sum(float *logits, const float *maxv, float *sum, float *target, const int32_t *targets,
                              int64_t N, int64_t Vl, int64_t v0, int64_t valid, bool in_place, struct flop_counter *fc);
double cpu_crossentropy_finish(float *logits, float *losses, const float *maxv, const float *sum, const float *target,
                               const int32_t *targets, int64_t N, int64_t Vl, int64_t v0, int64_t valid, float dloss,
                               struct flop_counter *fc);
void cpu_attention_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                           struct flop_counter *fc);
void cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                            int64_t B, int64_t T, int64_t C, int64_t NH, struct flop_counter *fc);
size_t attention_backward_scratch(int64_t B, int64_t T, int64_t NH); /* layers.h's, for the .cu files */
void cpu_attention_lse_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                               struct flop_counter *fc);
void cpu_attention_lse_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                                const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                                struct flop_counter *fc);

void cuda_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int64_t B, int64_t T,
                          int64_t C);
void cuda_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t B, int64_t T,
                           int64_t C);
void cuda_embedding_rows_forward(float *out, const int32_t *inp, const float *wte, int64_t v0, int64_t rows, int64_t BT,
                                 int64_t C);
void cuda_positions_add(float *out, const float *wpe, int64_t B, int64_t T, int64_t C);
void cuda_embedding_rows_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t v0,
                                  int64_t rows, int64_t B, int64_t T, int64_t C);
void cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                            const float *bias, int64_t N, int64_t C, struct flop_counter *fc);
void cuda_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, const float *mean, const float *rstd, int64_t N, int64_t C,
                             struct flop_counter *fc);
void cuda_gemm_counted(struct flop_counter *fc, enum gemm_kind kind, bool trans_a, bool trans_b, int64_t m, int64_t n,
                       int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                       float *c, int64_t ldc);
void cuda_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int64_t N, int64_t C,
                         int64_t OC, struct flop_counter *fc);
void cuda_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                          const float *weight, int64_t N, int64_t C, int64_t OC, struct flop_counter *fc);
void cuda_matmul_forward_sliced(float *out, const float *inp, const float *weight, const float *bias, int64_t N,
                                int64_t C, int64_t OC, int64_t max_rows, struct flop_counter *fc);
void cuda_matmul_backward_sliced(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                 const float *weight, int64_t N, int64_t C, int64_t OC, int64_t max_rows,
                                 struct flop_counter *fc);
/* inp: bf16 */
void cuda_matmul_forward_bf16(float *out, const uint16_t *inp, const float *weight, const float *bias, int64_t N,
                              int64_t C, int64_t OC, struct flop_counter *fc);
void cuda_matmul_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout, const uint16_t *inp,
                               const float *weight, int64_t N, int64_t C, int64_t OC, struct flop_counter *fc);
void cuda_bias_add(float *out, const float *bias, int64_t N, int64_t OC, struct flop_counter *fc);
void cuda_gelu_forward(float *out, const float *inp, int64_t n, struct flop_counter *fc);
void cuda_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n, struct flop_counter *fc);
void cuda_gelu_forward_bf16(uint16_t *out, uint16_t *pre_store, const float *pre, int64_t n, struct flop_counter *fc);
void cuda_gelu_backward_bf16(float *dinp, const uint16_t *inp, const float *dout, int64_t n, struct flop_counter *fc);
void cuda_residual_forward(float *out, const float *a, const float *b, int64_t n, struct flop_counter *fc);
double cuda_crossentropy_forward_backward(float *logits, float *losses, const int32_t *targets, int64_t N,
                                          int64_t V, int64_t Vp, float dloss, struct flop_counter *fc);
void cuda_crossentropy_row_max(const float *logits, float *maxv, int64_t N, int64_t Vl, int64_t valid);
void cuda_crossentropy_exp_sum(float *logits, const float *maxv, float *sum, float *target, const int32_t *targets,
                               int64_t N, int64_t Vl, int64_t v0, int64_t valid, bool in_place);
double cuda_crossentropy_finish(float *logits, float *losses, const float *maxv, const float *sum, const float *target,
                                const int32_t *targets, int64_t N, int64_t Vl, int64_t v0, int64_t valid, float dloss,
                                struct flop_counter *fc);
void cuda_attention_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                            struct flop_counter *fc);
void cuda_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                             int64_t B, int64_t T, int64_t C, int64_t NH, struct flop_counter *fc);

#ifdef __cplusplus
}
#endif

#endif
