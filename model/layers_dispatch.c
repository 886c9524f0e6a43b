/* include/layers.h's names, in every build: each call runs on the
 * backend of its memory space (include/backend.h), fc->space, which the
 * trainer sets from the run's (counters.h): X_cpu (model/cpu/) on host
 * memory, X_cuda (model/cuda/) on device memory; the CPU build stops a
 * device call by name. On the host the layer GEMMs (matmul_*) run on
 * oneDNN in bf16 when the counter carries the CPU's context (fc->onednn:
 * --gemm_dtype bf16; include/onednn_gemms.h), on the reference bf16 GEMM
 * when it says so (fc->bf16_reference: --gemm_kernel reference), else on
 * OpenBLAS in fp32.
 * So --device cpu in the CUDA build runs the CPU build's kernels and gives
 * its results. Every call but encoder_forward/backward (no counter; the
 * model calls the embedding_rows_* forms) is timed into the counter's
 * kernel profile (include/kernel_timing.h: CUDA events on the device,
 * which does not synchronize per call; the clock on the host);
 * gemm_counted on device memory only (on the host the attention's threads
 * call it). */
#include "backend.h"
#include "kernel_timing.h"
#include "layers.h"
#include "onednn_gemms.h"
#include "cuda/v2/flash2_schedule.h"

static bool on_device(const struct flop_counter *fc) { return fc->space == MEM_DEVICE; }

static struct operand f32_operand(const float *x) { return (struct operand){.f32 = x}; }
static struct operand bf16_operand(const bf16 *x) { return (struct operand){.b16 = x}; }
static struct act_out f32_out(float *x) { return (struct act_out){.f32 = x}; }

/* v2's forms on device memory with a v1 counter: a caller bug (v1's GPU
 * path widens its weights and keeps fp32 logits, so its model never calls
 * them there). */
_Noreturn static void v2_only(const char *op) {
    fprintf(stderr, "error: %s: on device memory under --gpu_path v2 only (v1 widens its weights and keeps "
                    "fp32 logits)\n", op);
    exit(EXIT_FAILURE);
}

void encoder_forward(enum mem_space space, float *out, const int32_t *inp, const float *wte, const float *wpe,
                     int64_t B, int64_t T, int64_t C) {
    if (space == MEM_DEVICE) ON_DEVICE(encoder_forward_cuda(out, inp, wte, wpe, B, T, C));
    else encoder_forward_cpu(out, inp, wte, wpe, B, T, C);
}

void encoder_backward(enum mem_space space, float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                      int64_t B, int64_t T, int64_t C) {
    if (space == MEM_DEVICE) ON_DEVICE(encoder_backward_cuda(dwte, dwpe, dout, inp, B, T, C));
    else encoder_backward_cpu(dwte, dwpe, dout, inp, B, T, C);
}

void embedding_rows_forward(float *out, const int32_t *inp, const float *wte, int64_t v0, int64_t rows, int64_t BT,
                            int64_t C, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(embedding_rows_forward_cuda(out, inp, wte, v0, rows, BT, C));
    else embedding_rows_forward_cpu(out, inp, wte, v0, rows, BT, C, fc);
    kernel_span_end(fc, t, KERNEL_EMBEDDING);
}

void positions_add(float *out, const float *wpe, int64_t B, int64_t T, int64_t C, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(positions_add_cuda(out, wpe, B, T, C));
    else positions_add_cpu(out, wpe, B, T, C, fc);
    kernel_span_end(fc, t, KERNEL_EMBEDDING);
}

void embedding_rows_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t v0,
                             int64_t rows, int64_t B, int64_t T, int64_t C, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(embedding_rows_backward_cuda(dwte, dwpe, dout, inp, v0, rows, B, T, C));
    else embedding_rows_backward_cpu(dwte, dwpe, dout, inp, v0, rows, B, T, C, fc);
    kernel_span_end(fc, t, KERNEL_EMBEDDING);
}

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                       const float *bias, int64_t N, int64_t C, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(layernorm_forward_cuda(out, mean, rstd, inp, weight, bias, N, C, fc));
    else layernorm_forward_cpu(out, mean, rstd, inp, weight, bias, N, C, fc);
    kernel_span_end(fc, t, KERNEL_LAYERNORM_FWD);
}

void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, int64_t N, int64_t C,
                        struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(layernorm_backward_cuda(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, fc));
    else layernorm_backward_cpu(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, fc);
    kernel_span_end(fc, t, KERNEL_LAYERNORM_BWD);
}

void layernorm_forward_bf16(bf16 *out, float *mean, float *rstd, const bf16 *inp, const float *weight,
                            const float *bias, int64_t N, int64_t C, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(layernorm_forward_bf16_cuda(out, mean, rstd, inp, weight, bias, N, C, fc));
    else layernorm_forward_bf16_cpu(out, mean, rstd, inp, weight, bias, N, C, fc);
    kernel_span_end(fc, t, KERNEL_LAYERNORM_FWD);
}

void layernorm_backward_bf16(struct act_out dinp, float *dweight, float *dbias, const float *dout, const bf16 *inp,
                             const float *weight, const float *mean, const float *rstd, int64_t N, int64_t C,
                             struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(layernorm_backward_bf16_cuda(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, fc));
    else layernorm_backward_bf16_cpu(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, fc);
    kernel_span_end(fc, t, KERNEL_LAYERNORM_BWD);
}

void gemm_counted(struct flop_counter *fc, enum gemm_kind kind, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                  float *c, int64_t ldc) {
    /* the host path is called from the CPU attention's OpenMP threads, and
     * the profile is plain doubles: timed on the device path only */
    if (on_device(fc)) {
        struct kernel_span t = kernel_span_begin(fc, true);
        ON_DEVICE(gemm_counted_cuda(fc, kind, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
        kernel_span_end(fc, t, KERNEL_GEMM);
    } else {
        gemm_counted_cpu(fc, kind, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
}

void matmul_forward_sliced(float *out, const float *inp, const float *weight, const float *bias, int64_t N,
                           int64_t C, int64_t OC, int64_t max_rows, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(matmul_forward_sliced_cuda(out, inp, weight, bias, N, C, OC, max_rows, fc));
    else if (fc->onednn) matmul_forward_onednn(f32_out(out), f32_operand(inp), f32_operand(weight), bias, N, C, OC, fc); /* 64-bit sizes */
    else if (fc->bf16_reference) matmul_forward_mixed_cpu(f32_out(out), f32_operand(inp), f32_operand(weight), bias, N, C, OC, fc);
    else matmul_forward_sliced_cpu(out, inp, weight, bias, N, C, OC, max_rows, fc);
    kernel_span_end(fc, t, KERNEL_MATMUL_FWD);
}

void matmul_backward_sliced(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, int64_t N, int64_t C, int64_t OC, int64_t max_rows,
                            struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(matmul_backward_sliced_cuda(dinp, dweight, dbias, dout, inp, weight, N, C, OC, max_rows, fc));
    else if (fc->onednn) matmul_backward_onednn(f32_out(dinp), dweight, dbias, f32_operand(dout), f32_operand(inp), f32_operand(weight), N, C, OC, fc);
    else if (fc->bf16_reference) matmul_backward_mixed_cpu(f32_out(dinp), dweight, dbias, f32_operand(dout), f32_operand(inp), f32_operand(weight), N, C, OC, fc);
    else matmul_backward_sliced_cpu(dinp, dweight, dbias, dout, inp, weight, N, C, OC, max_rows, fc);
    kernel_span_end(fc, t, KERNEL_MATMUL_BWD);
}

void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int64_t N, int64_t C,
                    int64_t OC, struct flop_counter *fc) {
    matmul_forward_sliced(out, inp, weight, bias, N, C, OC, MATMUL_MAX_DIM, fc);
}

void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, int64_t N, int64_t C, int64_t OC, struct flop_counter *fc) {
    matmul_backward_sliced(dinp, dweight, dbias, dout, inp, weight, N, C, OC, MATMUL_MAX_DIM, fc);
}

void matmul_forward_bf16(float *out, const bf16 *inp, const float *weight, const float *bias, int64_t N, int64_t C,
                         int64_t OC, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(matmul_forward_bf16_cuda(out, inp, weight, bias, N, C, OC, fc));
    else if (fc->onednn) matmul_forward_onednn(f32_out(out), bf16_operand(inp), f32_operand(weight), bias, N, C, OC, fc);
    else matmul_forward_bf16_cpu(out, inp, weight, bias, N, C, OC, fc);
    kernel_span_end(fc, t, KERNEL_MATMUL_FWD);
}

void matmul_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout, const bf16 *inp,
                          const float *weight, int64_t N, int64_t C, int64_t OC, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(matmul_backward_bf16_cuda(dinp, dweight, dbias, dout, inp, weight, N, C, OC, fc));
    else if (fc->onednn) matmul_backward_onednn(f32_out(dinp), dweight, dbias, f32_operand(dout), bf16_operand(inp), f32_operand(weight), N, C, OC, fc);
    else matmul_backward_bf16_cpu(dinp, dweight, dbias, dout, inp, weight, N, C, OC, fc);
    kernel_span_end(fc, t, KERNEL_MATMUL_BWD);
}

void matmul_forward_mixed(struct act_out out, struct operand inp, struct operand weight, const float *bias, int64_t N,
                          int64_t C, int64_t OC, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(matmul_forward_mixed_cuda(out, inp, weight, bias, N, C, OC, fc));
    else if (fc->onednn) matmul_forward_onednn(out, inp, weight, bias, N, C, OC, fc);
    else matmul_forward_mixed_cpu(out, inp, weight, bias, N, C, OC, fc);
    kernel_span_end(fc, t, KERNEL_MATMUL_FWD);
}

void matmul_backward_mixed(struct act_out dinp, float *dweight, float *dbias, struct operand dout, struct operand inp,
                           struct operand weight, int64_t N, int64_t C, int64_t OC, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(matmul_backward_mixed_cuda(dinp, dweight, dbias, dout, inp, weight, N, C, OC, fc));
    else if (fc->onednn) matmul_backward_onednn(dinp, dweight, dbias, dout, inp, weight, N, C, OC, fc);
    else matmul_backward_mixed_cpu(dinp, dweight, dbias, dout, inp, weight, N, C, OC, fc);
    kernel_span_end(fc, t, KERNEL_MATMUL_BWD);
}

/* The embedding's bf16 forms: on device memory under --gpu_path v2 only
 * (model/cuda/v2/embedding_bf16.cu); v1 stops such a call as before. */
void embedding_rows_forward_bf16(float *out, const int32_t *inp, const bf16 *wte, int64_t v0, int64_t rows,
                                 int64_t BT, int64_t C, struct flop_counter *fc) {
    bool dev = on_device(fc);
    if (dev && !fc->gpu_v2) v2_only(__func__);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(embedding_rows_forward_bf16_cuda(out, inp, wte, v0, rows, BT, C));
    else embedding_rows_forward_bf16_cpu(out, inp, wte, v0, rows, BT, C, fc);
    kernel_span_end(fc, t, KERNEL_EMBEDDING);
}

void embedding_rows_backward_bf16(float *dwte, float *dwpe, const bf16 *dout, const int32_t *inp, int64_t v0,
                                  int64_t rows, int64_t B, int64_t T, int64_t C, struct flop_counter *fc) {
    bool dev = on_device(fc);
    if (dev && !fc->gpu_v2) v2_only(__func__);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(embedding_rows_backward_bf16_cuda(dwte, dwpe, dout, inp, v0, rows, B, T, C));
    else embedding_rows_backward_bf16_cpu(dwte, dwpe, dout, inp, v0, rows, B, T, C, fc);
    kernel_span_end(fc, t, KERNEL_EMBEDDING);
}

void bias_add(float *out, const float *bias, int64_t N, int64_t OC, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(bias_add_cuda(out, bias, N, OC, fc));
    else bias_add_cpu(out, bias, N, OC, fc);
    kernel_span_end(fc, t, KERNEL_RESIDUAL);
}

void gelu_forward(float *out, const float *inp, int64_t n, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(gelu_forward_cuda(out, inp, n, fc));
    else gelu_forward_cpu(out, inp, n, fc);
    kernel_span_end(fc, t, KERNEL_GELU);
}

void gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(gelu_backward_cuda(dinp, inp, dout, n, fc));
    else gelu_backward_cpu(dinp, inp, dout, n, fc);
    kernel_span_end(fc, t, KERNEL_GELU);
}

void gelu_forward_bf16(bf16 *out, bf16 *pre_store, const float *pre, int64_t n, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(gelu_forward_bf16_cuda(out, pre_store, pre, n, fc));
    else gelu_forward_bf16_cpu(out, pre_store, pre, n, fc);
    kernel_span_end(fc, t, KERNEL_GELU);
}

void gelu_backward_bf16(float *dinp, const bf16 *inp, const float *dout, int64_t n, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(gelu_backward_bf16_cuda(dinp, inp, dout, n, fc));
    else gelu_backward_bf16_cpu(dinp, inp, dout, n, fc);
    kernel_span_end(fc, t, KERNEL_GELU);
}

void gelu_backward_bf16_grads(bf16 *dinp, const bf16 *inp, const bf16 *dout, int64_t n, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(gelu_backward_bf16_grads_cuda(dinp, inp, dout, n, fc));
    else gelu_backward_bf16_grads_cpu(dinp, inp, dout, n, fc);
    kernel_span_end(fc, t, KERNEL_GELU);
}

void residual_forward(float *out, const float *a, const float *b, int64_t n, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(residual_forward_cuda(out, a, b, n, fc));
    else residual_forward_cpu(out, a, b, n, fc);
    kernel_span_end(fc, t, KERNEL_RESIDUAL);
}

void residual_forward_bf16(bf16 *out, const bf16 *a, const float *b, int64_t n, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(residual_forward_bf16_cuda(out, a, b, n, fc));
    else residual_forward_bf16_cpu(out, a, b, n, fc);
    kernel_span_end(fc, t, KERNEL_RESIDUAL);
}

/* The host runs the two public calls (each timed as before); the device
 * one fused kernel, timed as the LayerNorm. */
void residual_layernorm_forward_bf16(bf16 *x, bf16 *out, float *mean, float *rstd, const bf16 *a, const float *b,
                                     const float *weight, const float *bias, int64_t N, int64_t C,
                                     struct flop_counter *fc) {
    if (!on_device(fc)) {
        residual_forward_bf16(x, a, b, N * C, fc);
        layernorm_forward_bf16(out, mean, rstd, x, weight, bias, N, C, fc);
        return;
    }
    struct kernel_span t = kernel_span_begin(fc, true);
    ON_DEVICE(residual_layernorm_forward_bf16_cuda(x, out, mean, rstd, a, b, weight, bias, N, C, fc));
    kernel_span_end(fc, t, KERNEL_LAYERNORM_FWD);
}

double crossentropy_forward_backward(float *logits, float *losses, const int32_t *targets, int64_t N, int64_t V,
                                     int64_t Vp, float dloss, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    double loss;
    if (dev) ON_DEVICE(loss = crossentropy_forward_backward_cuda(logits, losses, targets, N, V, Vp, dloss, fc));
    else loss = crossentropy_forward_backward_cpu(logits, losses, targets, N, V, Vp, dloss, fc);
    kernel_span_end(fc, t, KERNEL_CROSSENTROPY);
    return loss;
}

/* The bf16 logits' cross-entropy: on device memory --gpu_path v2's kernel
 * only (v1's head keeps fp32 logits: a v1 counter here is a caller bug);
 * on the host the device order's replay, which the model never calls
 * (the CPU's head keeps fp32 logits: its numerics). */
double crossentropy_forward_backward_bf16(bf16 *logits, float *losses, const int32_t *targets, int64_t N, int64_t V,
                                          int64_t Vp, float dloss, struct flop_counter *fc) {
    bool dev = on_device(fc);
    if (dev && !fc->gpu_v2) v2_only(__func__);
    struct kernel_span t = kernel_span_begin(fc, dev);
    double loss;
    if (dev) ON_DEVICE(loss = crossentropy_forward_backward_bf16_cuda(logits, losses, targets, N, V, Vp, dloss, fc));
    else loss = crossentropy_forward_backward_bf16_cpu(logits, losses, targets, N, V, Vp, dloss, fc);
    kernel_span_end(fc, t, KERNEL_CROSSENTROPY);
    return loss;
}

void crossentropy_row_max(const float *logits, float *maxv, int64_t N, int64_t Vl, int64_t valid,
                          struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(crossentropy_row_max_cuda(logits, maxv, N, Vl, valid));
    else crossentropy_row_max_cpu(logits, maxv, N, Vl, valid, fc);
    kernel_span_end(fc, t, KERNEL_CROSSENTROPY);
}

void crossentropy_exp_sum(float *logits, const float *maxv, float *sum, float *target, const int32_t *targets,
                          int64_t N, int64_t Vl, int64_t v0, int64_t valid, bool in_place, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(crossentropy_exp_sum_cuda(logits, maxv, sum, target, targets, N, Vl, v0, valid, in_place));
    else crossentropy_exp_sum_cpu(logits, maxv, sum, target, targets, N, Vl, v0, valid, in_place, fc);
    kernel_span_end(fc, t, KERNEL_CROSSENTROPY);
}

double crossentropy_finish(float *logits, float *losses, const float *maxv, const float *sum, const float *target,
                           const int32_t *targets, int64_t N, int64_t Vl, int64_t v0, int64_t valid, float dloss,
                           struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    double loss;
    if (dev) ON_DEVICE(loss = crossentropy_finish_cuda(logits, losses, maxv, sum, target, targets, N, Vl, v0, valid,
                                                       dloss, fc));
    else loss = crossentropy_finish_cpu(logits, losses, maxv, sum, target, targets, N, Vl, v0, valid, dloss, fc);
    kernel_span_end(fc, t, KERNEL_CROSSENTROPY);
    return loss;
}

void attention_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(attention_forward_cuda(out, att, qkv, B, T, C, NH, fc));
    else attention_forward_cpu(out, att, qkv, B, T, C, NH, fc);
    kernel_span_end(fc, t, KERNEL_ATTENTION_FWD);
}

void attention_forward_bf16(struct act_out out, struct act_out att, const bf16 *qkv, float *scratch, int64_t B,
                            int64_t T, int64_t C, int64_t NH, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(attention_forward_bf16_cuda(out, att, qkv, scratch, B, T, C, NH, fc));
    else attention_forward_bf16_cpu(out, att, qkv, scratch, B, T, C, NH, fc);
    kernel_span_end(fc, t, KERNEL_ATTENTION_FWD);
}

void attention_backward_bf16(bf16 *dqkv, const float *dout, const bf16 *qkv, struct operand att, float *scratch,
                             int64_t B, int64_t T, int64_t C, int64_t NH, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(attention_backward_bf16_cuda(dqkv, dout, qkv, att, scratch, B, T, C, NH, fc));
    else attention_backward_bf16_cpu(dqkv, dout, qkv, att, scratch, B, T, C, NH, fc);
    kernel_span_end(fc, t, KERNEL_ATTENTION_BWD);
}

void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                        int64_t B, int64_t T, int64_t C, int64_t NH, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(attention_backward_cuda(dqkv, dout, qkv, att, scratch, B, T, C, NH, fc));
    else attention_backward_cpu(dqkv, dout, qkv, att, scratch, B, T, C, NH, fc);
    kernel_span_end(fc, t, KERNEL_ATTENTION_BWD);
}

void attention_lse_forward_bf16(bf16 *out, float *lse, const bf16 *qkv, float *scratch, int64_t B, int64_t T,
                                int64_t C, int64_t NH, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(attention_lse_forward_bf16_cuda(out, lse, qkv, B, T, C, NH, fc));
    else attention_lse_forward_bf16_cpu(out, lse, qkv, scratch, B, T, C, NH, fc);
    kernel_span_end(fc, t, KERNEL_ATTENTION_FWD);
}

size_t attention_lse_bf16_scratch_in(enum mem_space space, int64_t B, int64_t T, int64_t C, int64_t NH) {
    if (space == MEM_DEVICE) return flash2_scratch_layout(B, T, C, NH).total;
    return attention_lse_bf16_scratch(B, T, C, NH);
}

void attention_lse_backward_bf16(bf16 *dqkv, float *scratch, const float *dout, const bf16 *qkv, const bf16 *out,
                                 const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                                 struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(attention_lse_backward_bf16_cuda(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, fc));
    else attention_lse_backward_bf16_cpu(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, fc);
    kernel_span_end(fc, t, KERNEL_ATTENTION_BWD);
}

void attention_lse_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                           struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(attention_lse_forward_cuda(out, lse, qkv, B, T, C, NH, fc));
    else attention_lse_forward_cpu(out, lse, qkv, B, T, C, NH, fc);
    kernel_span_end(fc, t, KERNEL_ATTENTION_FWD);
}

void attention_lse_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                            const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH, struct flop_counter *fc) {
    bool dev = on_device(fc);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) ON_DEVICE(attention_lse_backward_cuda(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, fc));
    else attention_lse_backward_cpu(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, fc);
    kernel_span_end(fc, t, KERNEL_ATTENTION_BWD);
}
