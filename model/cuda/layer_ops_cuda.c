/* The device's layer table (model/layer_ops.h), the CUDA build only: the
 * forms of model/cuda/ and of its v2/ folder (layers_cuda.h). v1, the
 * default, runs the fp32 data path; v2 (--gpu_path v2) adds the bf16 data
 * path's forms, which v1's model never calls. Both sets stay until a GPU
 * has verified one (docs/GPU.md). */
#include <stdio.h>
#include <stdlib.h>

#include "cuda_device.h"
#include "layers_cuda.h"

/* What each set of kernels asks of the core (counters.h): v1 widens its
 * weights into fp32 copies, takes the targets in the head's forward, sums
 * the norm a segment at a time and waits after each update; v2 does none
 * of that. */
struct backend_traits cuda_backend_traits(enum gpu_path path) {
    const struct backend_traits v2 = {
        .reads_bf16 = true, .targets_with_batch = true, .one_pass_norm = true, .queued_updates = true};
    return path == GPU_PATH_V2 ? v2 : (struct backend_traits){0};
}

/* The bf16 data path's embedding and bf16-logits forms on a v1 run: a
 * caller bug (v1 widens its weights and keeps fp32 logits, so its model
 * never calls them), stopped by name. */
static void v2_only(const struct exec_ctx *fc, const char *op) {
    if (fc->device.reads_bf16) return;
    fprintf(stderr, "error: %s: on device memory under --gpu_path v2 only (v1 widens its weights and keeps "
                    "fp32 logits)\n", op);
    exit(EXIT_FAILURE);
}

static void embedding_rows_forward_bf16_v2(float *out, const int32_t *inp, const bf16 *wte, int64_t v0, int64_t rows,
                                           int64_t BT, int64_t C, struct exec_ctx *fc) {
    v2_only(fc, "embedding_rows_forward_bf16");
    embedding_rows_forward_bf16_cuda(out, inp, wte, v0, rows, BT, C, fc);
}

static void embedding_rows_backward_bf16_v2(float *dwte, float *dwpe, const bf16 *dout, const int32_t *inp,
                                            int64_t v0, int64_t rows, int64_t B, int64_t T, int64_t C,
                                            struct exec_ctx *fc) {
    v2_only(fc, "embedding_rows_backward_bf16");
    embedding_rows_backward_bf16_cuda(dwte, dwpe, dout, inp, v0, rows, B, T, C, fc);
}

static double crossentropy_forward_backward_bf16_v2(bf16 *logits, float *losses, const int32_t *targets, int64_t N,
                                                    int64_t V, int64_t Vp, float dloss, struct exec_ctx *fc) {
    v2_only(fc, "crossentropy_forward_backward_bf16");
    return crossentropy_forward_backward_bf16_cuda(logits, losses, targets, N, V, Vp, dloss, fc);
}

const struct layer_ops layer_ops_cuda = {
    .encoder_forward = encoder_forward_cuda,
    .encoder_backward = encoder_backward_cuda,
    .embedding_rows_forward = embedding_rows_forward_cuda,
    .positions_add = positions_add_cuda,
    .embedding_rows_backward = embedding_rows_backward_cuda,
    .embedding_rows_forward_bf16 = embedding_rows_forward_bf16_v2,
    .embedding_rows_backward_bf16 = embedding_rows_backward_bf16_v2,
    .layernorm_forward = layernorm_forward_cuda,
    .layernorm_backward = layernorm_backward_cuda,
    .layernorm_forward_bf16 = layernorm_forward_bf16_cuda,
    .layernorm_backward_bf16 = layernorm_backward_bf16_cuda,
    .residual_forward = residual_forward_cuda,
    .residual_forward_bf16 = residual_forward_bf16_cuda,
    .residual_layernorm_forward_bf16 = residual_layernorm_forward_bf16_cuda,
    .gemm_counted = gemm_counted_cuda,
    .matmul_forward_sliced = matmul_forward_sliced_cuda,
    .matmul_backward_sliced = matmul_backward_sliced_cuda,
    .matmul_forward_bf16 = matmul_forward_bf16_cuda,
    .matmul_backward_bf16 = matmul_backward_bf16_cuda,
    .matmul_forward_mixed = matmul_forward_mixed_cuda,
    .matmul_backward_mixed = matmul_backward_mixed_cuda,
    .bias_add = bias_add_cuda,
    .attention_forward = attention_forward_cuda,
    .attention_backward = attention_backward_cuda,
    .attention_forward_bf16 = attention_forward_bf16_cuda,
    .attention_backward_bf16 = attention_backward_bf16_cuda,
    .attention_lse_forward = attention_lse_forward_cuda,
    .attention_lse_backward = attention_lse_backward_cuda,
    .attention_lse_forward_bf16 = attention_lse_forward_bf16_cuda,
    .attention_lse_backward_bf16 = attention_lse_backward_bf16_cuda,
    .gelu_forward = gelu_forward_cuda,
    .gelu_backward = gelu_backward_cuda,
    .gelu_forward_bf16 = gelu_forward_bf16_cuda,
    .gelu_backward_bf16 = gelu_backward_bf16_cuda,
    .gelu_backward_bf16_grads = gelu_backward_bf16_grads_cuda,
    .crossentropy_forward_backward = crossentropy_forward_backward_cuda,
    .crossentropy_forward_backward_bf16 = crossentropy_forward_backward_bf16_v2,
    .crossentropy_row_max = crossentropy_row_max_cuda,
    .crossentropy_exp_sum = crossentropy_exp_sum_cuda,
    .crossentropy_finish = crossentropy_finish_cuda,
};
