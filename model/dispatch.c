/* The one place a model op's backend is chosen, in every build: each
 * family of ops sits behind one table of its backends' forms, and one
 * function per family chooses the table (include/backend.h):
 *   - include/layers.h's layer ops: layer_backend, by the operands' memory
 *     space, then the run's GEMM flavour (model/layer_ops.h);
 *   - include/bufops.h's buffer operations: buf_backend, by the space the
 *     call names (model/bufops_ops.h).
 * The update rules' choice is optim/optim_dispatch.c's (optim/ is a
 * sibling of model/, not below it).
 *
 * The layer ops: each call runs on the backend layer_backend chooses for
 * it, timed into the counter's kernel profile (model/kernel_timing.h: CUDA
 * events on the device, which does not synchronize per call; the clock on
 * the host). Every op but encoder_forward/backward (no counter; the model
 * calls the embedding_rows_* forms) is timed; gemm_counted on device
 * memory only (on the host the attention's threads call it, and the
 * profile is plain doubles).
 *
 * The buffer operations: each call runs on buf_ops_cpu on host memory and
 * buf_ops_cuda on device memory, so --device cpu in the CUDA build keeps
 * the CPU build's results; the CPU build stops a device call by name. A
 * call of zero elements or bytes touches nothing, on either backend: it
 * runs the host's form, whatever the space, as it always has (its pointers
 * may be anywhere). */
#include <stdbool.h>

#include "backend.h"
#include "bufops.h"
#include "bufops_ops.h"
#include "kernel_timing.h"
#include "layer_ops.h"
#include "cuda/device_scratch.h"

/* ---- the layer ops (include/layers.h) */

/* The one place a call's backend is chosen: its memory space, then the
 * run's kernel choice. On the host the layer GEMMs' flavour: oneDNN in
 * bf16 when the counter carries the CPU's context (fc->onednn: --gemm_dtype
 * bf16; include/onednn_gemms.h), the reference bf16 GEMM when it says so
 * (fc->bf16_reference: --gemm_kernel reference), else OpenBLAS in fp32; so
 * --device cpu in the CUDA build runs the CPU build's kernels and gives
 * its results. On device memory the CUDA build's table; the CPU build
 * stops the run there, naming the op (include/backend.h). An op on
 * operands or outputs (struct operand, struct act_out: include/layers.h)
 * passes their space: see ops_on, below. */
const struct layer_ops *layer_backend(enum mem_space space, const struct exec_ctx *fc, const char *op) {
    if (space == MEM_DEVICE) return BACKEND_DEVICE(layer_ops_cuda, op);
    if (fc && fc->onednn) return &layer_ops_cpu_onednn;
    if (fc && fc->bf16_reference) return &layer_ops_cpu_reference;
    return &layer_ops_cpu;
}

static struct operand f32_operand(const float *x, const struct exec_ctx *fc) { return operand_f32(x, fc->space); }
static struct operand bf16_operand(const bf16 *x, const struct exec_ctx *fc) { return operand_bf16(x, fc->space); }
static struct act_out f32_out(float *x, const struct exec_ctx *fc) { return act_out_f32(x, fc->space); }

static const struct layer_ops *ops(const struct exec_ctx *fc, const char *op) {
    return layer_backend(fc->space, fc, op);
}

static const char *space_name(enum mem_space s) { return s == MEM_DEVICE ? "device" : "host"; }

static void check_space(const struct exec_ctx *fc, const char *op, const char *what, enum mem_space space) {
    if (space == fc->space) return;
    fprintf(stderr, "error: %s: %s on %s memory, the call's counter on %s (a bug)\n", op, what, space_name(space),
            space_name(fc->space));
    abort();
}

/* An op on operands (x, nx of them) and outputs (y, ny; struct act_out,
 * one with no data stores nothing and is not checked) runs where they
 * live: their space chooses the backend. The counter times the call in
 * its own space, so a tensor elsewhere is a programming error: it stops
 * the run, naming the op. */
static const struct layer_ops *ops_on(const struct exec_ctx *fc, const char *op, const struct operand *x, int nx,
                                      const struct act_out *y, int ny) {
    for (int i = 0; i < nx; i++) check_space(fc, op, "an operand", x[i].space);
    for (int i = 0; i < ny; i++)
        if (y[i].data) check_space(fc, op, "an output", y[i].space);
    return layer_backend(fc->space, fc, op); /* theirs: checked above */
}

/* One call of op on its tensors' backend (ops_on), timed as RUN_TIMED. */
#define RUN_ON(x, nx, y, ny, kind, op, ...)                         \
    do {                                                            \
        const struct layer_ops *b_ = ops_on(fc, #op, x, nx, y, ny); \
        struct kernel_span t_ = span_begin(fc);                     \
        b_->op(__VA_ARGS__);                                        \
        kernel_span_end(fc, t_, kind);                              \
    } while (0)

static struct kernel_span span_begin(struct exec_ctx *fc) {
    return kernel_span_begin(fc, fc->space == MEM_DEVICE);
}

/* One call of op on fc's backend, timed into fc's profile as `kind`. */
#define RUN_TIMED(kind, op, ...)                \
    do {                                        \
        struct kernel_span t_ = span_begin(fc); \
        ops(fc, #op)->op(__VA_ARGS__);          \
        kernel_span_end(fc, t_, kind);          \
    } while (0)

void encoder_forward(enum mem_space space, float *out, const int32_t *inp, const float *wte, const float *wpe,
                     int64_t B, int64_t T, int64_t C) {
    layer_backend(space, NULL, __func__)->encoder_forward(out, inp, wte, wpe, B, T, C);
}

void encoder_backward(enum mem_space space, float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                      int64_t B, int64_t T, int64_t C) {
    layer_backend(space, NULL, __func__)->encoder_backward(dwte, dwpe, dout, inp, B, T, C);
}

void embedding_rows_forward(float *out, const int32_t *inp, const float *wte, int64_t v0, int64_t rows, int64_t BT,
                            int64_t C, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_EMBEDDING, embedding_rows_forward, out, inp, wte, v0, rows, BT, C, fc);
}

void positions_add(float *out, const float *wpe, int64_t B, int64_t T, int64_t C, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_EMBEDDING, positions_add, out, wpe, B, T, C, fc);
}

void embedding_rows_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t v0,
                             int64_t rows, int64_t B, int64_t T, int64_t C, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_EMBEDDING, embedding_rows_backward, dwte, dwpe, dout, inp, v0, rows, B, T, C, fc);
}

void embedding_rows_forward_bf16(float *out, const int32_t *inp, const bf16 *wte, int64_t v0, int64_t rows,
                                 int64_t BT, int64_t C, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_EMBEDDING, embedding_rows_forward_bf16, out, inp, wte, v0, rows, BT, C, fc);
}

void embedding_rows_backward_bf16(float *dwte, float *dwpe, const bf16 *dout, const int32_t *inp, int64_t v0,
                                  int64_t rows, int64_t B, int64_t T, int64_t C, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_EMBEDDING, embedding_rows_backward_bf16, dwte, dwpe, dout, inp, v0, rows, B, T, C, fc);
}

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                       const float *bias, int64_t N, int64_t C, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_LAYERNORM_FWD, layernorm_forward, out, mean, rstd, inp, weight, bias, N, C, fc);
}

void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, int64_t N, int64_t C,
                        struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_LAYERNORM_BWD, layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, fc);
}

void layernorm_forward_bf16(bf16 *out, float *mean, float *rstd, const bf16 *inp, const float *weight,
                            const float *bias, int64_t N, int64_t C, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_LAYERNORM_FWD, layernorm_forward_bf16, out, mean, rstd, inp, weight, bias, N, C, fc);
}

void layernorm_backward_bf16(struct act_out dinp, float *dweight, float *dbias, const float *dout, const bf16 *inp,
                             const float *weight, const float *mean, const float *rstd, int64_t N, int64_t C,
                             struct exec_ctx *fc) {
    RUN_ON(NULL, 0, &dinp, 1, KERNEL_LAYERNORM_BWD, layernorm_backward_bf16, dinp, dweight, dbias, dout, inp, weight,
           mean, rstd, N, C, fc);
}

void residual_forward(float *out, const float *a, const float *b, int64_t n, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_RESIDUAL, residual_forward, out, a, b, n, fc);
}

void residual_forward_bf16(bf16 *out, const bf16 *a, const float *b, int64_t n, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_RESIDUAL, residual_forward_bf16, out, a, b, n, fc);
}

/* A backend without the fused kernel (the host's) runs the two ops, each
 * timed as itself; a fused kernel is timed as the LayerNorm. */
void residual_layernorm_forward_bf16(bf16 *x, bf16 *out, float *mean, float *rstd, const bf16 *a, const float *b,
                                     const float *weight, const float *bias, int64_t N, int64_t C,
                                     struct exec_ctx *fc) {
    const struct layer_ops *backend = ops(fc, __func__);
    if (!backend->residual_layernorm_forward_bf16) {
        residual_forward_bf16(x, a, b, N * C, fc);
        layernorm_forward_bf16(out, mean, rstd, x, weight, bias, N, C, fc);
        return;
    }
    struct kernel_span t = span_begin(fc);
    backend->residual_layernorm_forward_bf16(x, out, mean, rstd, a, b, weight, bias, N, C, fc);
    kernel_span_end(fc, t, KERNEL_LAYERNORM_FWD);
}

void gemm_counted(struct exec_ctx *fc, enum gemm_kind kind, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                  float *c, int64_t ldc) {
    const struct layer_ops *backend = ops(fc, __func__);
    if (fc->space == MEM_HOST) { /* untimed: called from the CPU attention's OpenMP threads */
        backend->gemm_counted(fc, kind, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    struct kernel_span t = span_begin(fc);
    backend->gemm_counted(fc, kind, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    kernel_span_end(fc, t, KERNEL_GEMM);
}

void matmul_forward_sliced(float *out, const float *inp, const float *weight, const float *bias, int64_t N,
                           int64_t C, int64_t OC, int64_t max_rows, struct exec_ctx *fc) {
    const struct layer_ops *backend = ops(fc, __func__);
    struct kernel_span t = span_begin(fc);
    if (backend->matmul_forward_sliced) backend->matmul_forward_sliced(out, inp, weight, bias, N, C, OC, max_rows, fc);
    else backend->matmul_forward_mixed(f32_out(out, fc), f32_operand(inp, fc), f32_operand(weight, fc), bias, N, C, OC,
                                       fc);
    kernel_span_end(fc, t, KERNEL_MATMUL_FWD);
}

void matmul_backward_sliced(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, int64_t N, int64_t C, int64_t OC, int64_t max_rows,
                            struct exec_ctx *fc) {
    const struct layer_ops *backend = ops(fc, __func__);
    struct kernel_span t = span_begin(fc);
    if (backend->matmul_backward_sliced)
        backend->matmul_backward_sliced(dinp, dweight, dbias, dout, inp, weight, N, C, OC, max_rows, fc);
    else backend->matmul_backward_mixed(f32_out(dinp, fc), dweight, dbias, f32_operand(dout, fc), f32_operand(inp, fc),
                                        f32_operand(weight, fc), N, C, OC, fc);
    kernel_span_end(fc, t, KERNEL_MATMUL_BWD);
}

void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int64_t N, int64_t C,
                    int64_t OC, struct exec_ctx *fc) {
    matmul_forward_sliced(out, inp, weight, bias, N, C, OC, MATMUL_MAX_DIM, fc);
}

void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, int64_t N, int64_t C, int64_t OC, struct exec_ctx *fc) {
    matmul_backward_sliced(dinp, dweight, dbias, dout, inp, weight, N, C, OC, MATMUL_MAX_DIM, fc);
}

void matmul_forward_bf16(float *out, const bf16 *inp, const float *weight, const float *bias, int64_t N, int64_t C,
                         int64_t OC, struct exec_ctx *fc) {
    const struct layer_ops *backend = ops(fc, __func__);
    struct kernel_span t = span_begin(fc);
    if (backend->matmul_forward_bf16) backend->matmul_forward_bf16(out, inp, weight, bias, N, C, OC, fc);
    else backend->matmul_forward_mixed(f32_out(out, fc), bf16_operand(inp, fc), f32_operand(weight, fc), bias, N, C, OC,
                                       fc);
    kernel_span_end(fc, t, KERNEL_MATMUL_FWD);
}

void matmul_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout, const bf16 *inp,
                          const float *weight, int64_t N, int64_t C, int64_t OC, struct exec_ctx *fc) {
    const struct layer_ops *backend = ops(fc, __func__);
    struct kernel_span t = span_begin(fc);
    if (backend->matmul_backward_bf16)
        backend->matmul_backward_bf16(dinp, dweight, dbias, dout, inp, weight, N, C, OC, fc);
    else backend->matmul_backward_mixed(f32_out(dinp, fc), dweight, dbias, f32_operand(dout, fc), bf16_operand(inp, fc),
                                        f32_operand(weight, fc), N, C, OC, fc);
    kernel_span_end(fc, t, KERNEL_MATMUL_BWD);
}

void matmul_forward_mixed(struct act_out out, struct operand inp, struct operand weight, const float *bias, int64_t N,
                          int64_t C, int64_t OC, struct exec_ctx *fc) {
    const struct operand x[] = {inp, weight};
    RUN_ON(x, 2, &out, 1, KERNEL_MATMUL_FWD, matmul_forward_mixed, out, inp, weight, bias, N, C, OC, fc);
}

void matmul_backward_mixed(struct act_out dinp, float *dweight, float *dbias, struct operand dout, struct operand inp,
                           struct operand weight, int64_t N, int64_t C, int64_t OC, struct exec_ctx *fc) {
    const struct operand x[] = {dout, inp, weight};
    RUN_ON(x, 3, &dinp, 1, KERNEL_MATMUL_BWD, matmul_backward_mixed, dinp, dweight, dbias, dout, inp, weight, N, C,
           OC, fc);
}

void bias_add(float *out, const float *bias, int64_t N, int64_t OC, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_RESIDUAL, bias_add, out, bias, N, OC, fc);
}

void gelu_forward(float *out, const float *inp, int64_t n, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_GELU, gelu_forward, out, inp, n, fc);
}

void gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_GELU, gelu_backward, dinp, inp, dout, n, fc);
}

void gelu_forward_bf16(bf16 *out, bf16 *pre_store, const float *pre, int64_t n, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_GELU, gelu_forward_bf16, out, pre_store, pre, n, fc);
}

void gelu_backward_bf16(float *dinp, const bf16 *inp, const float *dout, int64_t n, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_GELU, gelu_backward_bf16, dinp, inp, dout, n, fc);
}

void gelu_backward_bf16_grads(bf16 *dinp, const bf16 *inp, const bf16 *dout, int64_t n, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_GELU, gelu_backward_bf16_grads, dinp, inp, dout, n, fc);
}

double crossentropy_forward_backward(float *logits, float *losses, const int32_t *targets, int64_t N, int64_t V,
                                     int64_t Vp, float dloss, struct exec_ctx *fc) {
    struct kernel_span t = span_begin(fc);
    double loss = ops(fc, __func__)->crossentropy_forward_backward(logits, losses, targets, N, V, Vp, dloss, fc);
    kernel_span_end(fc, t, KERNEL_CROSSENTROPY);
    return loss;
}

double crossentropy_forward_backward_bf16(bf16 *logits, float *losses, const int32_t *targets, int64_t N, int64_t V,
                                          int64_t Vp, float dloss, struct exec_ctx *fc) {
    struct kernel_span t = span_begin(fc);
    double loss = ops(fc, __func__)->crossentropy_forward_backward_bf16(logits, losses, targets, N, V, Vp, dloss, fc);
    kernel_span_end(fc, t, KERNEL_CROSSENTROPY);
    return loss;
}

void crossentropy_row_max(const float *logits, float *maxv, int64_t N, int64_t Vl, int64_t valid,
                          struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_CROSSENTROPY, crossentropy_row_max, logits, maxv, N, Vl, valid, fc);
}

void crossentropy_exp_sum(float *logits, const float *maxv, float *sum, float *target, const int32_t *targets,
                          int64_t N, int64_t Vl, int64_t v0, int64_t valid, bool in_place, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_CROSSENTROPY, crossentropy_exp_sum, logits, maxv, sum, target, targets, N, Vl, v0, valid,
              in_place, fc);
}

double crossentropy_finish(float *logits, float *losses, const float *maxv, const float *sum, const float *target,
                           const int32_t *targets, int64_t N, int64_t Vl, int64_t v0, int64_t valid, float dloss,
                           struct exec_ctx *fc) {
    struct kernel_span t = span_begin(fc);
    double loss = ops(fc, __func__)->crossentropy_finish(logits, losses, maxv, sum, target, targets, N, Vl, v0, valid,
                                                         dloss, fc);
    kernel_span_end(fc, t, KERNEL_CROSSENTROPY);
    return loss;
}

void attention_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_ATTENTION_FWD, attention_forward, out, att, qkv, B, T, C, NH, fc);
}

void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                        int64_t B, int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_ATTENTION_BWD, attention_backward, dqkv, dout, qkv, att, scratch, B, T, C, NH, fc);
}

void attention_forward_bf16(struct act_out out, struct act_out att, const bf16 *qkv, float *scratch, int64_t B,
                            int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc) {
    const struct act_out y[] = {out, att};
    RUN_ON(NULL, 0, y, 2, KERNEL_ATTENTION_FWD, attention_forward_bf16, out, att, qkv, scratch, B, T, C, NH, fc);
}

void attention_backward_bf16(bf16 *dqkv, const float *dout, const bf16 *qkv, struct operand att, float *scratch,
                             int64_t B, int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc) {
    const struct operand x[] = {att};
    RUN_ON(x, 1, NULL, 0, KERNEL_ATTENTION_BWD, attention_backward_bf16, dqkv, dout, qkv, att, scratch, B, T, C, NH,
           fc);
}

void attention_lse_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                           struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_ATTENTION_FWD, attention_lse_forward, out, lse, qkv, B, T, C, NH, fc);
}

void attention_lse_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                            const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_ATTENTION_BWD, attention_lse_backward, dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, fc);
}

void attention_lse_forward_bf16(bf16 *out, float *lse, const bf16 *qkv, float *scratch, int64_t B, int64_t T,
                                int64_t C, int64_t NH, struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_ATTENTION_FWD, attention_lse_forward_bf16, out, lse, qkv, scratch, B, T, C, NH, fc);
}

void attention_lse_backward_bf16(bf16 *dqkv, float *scratch, const float *dout, const bf16 *qkv, const bf16 *out,
                                 const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                                 struct exec_ctx *fc) {
    RUN_TIMED(KERNEL_ATTENTION_BWD, attention_lse_backward_bf16, dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, fc);
}

size_t attention_lse_bf16_scratch_in(enum mem_space space, int64_t B, int64_t T, int64_t C, int64_t NH) {
    if (space == MEM_DEVICE) return device_attention_lse_bf16_scratch(B, T, C, NH);
    return attention_lse_bf16_scratch(B, T, C, NH);
}

/* LLaMA's ops (include/llama_layers.h): a backend without a form (every
 * device, yet) stops the call, naming the op. */
static const struct layer_ops *llama_ops(const struct exec_ctx *fc, const char *op, bool has_form) {
    if (!has_form) {
        fprintf(stderr, "error: %s: no form on %s memory yet (LLaMA's kernels run on the host only)\n", op,
                space_name(fc->space));
        exit(EXIT_FAILURE);
    }
    return layer_backend(fc->space, fc, op);
}

#define RUN_LLAMA(kind, op, ...)                                                    \
    do {                                                                            \
        const struct layer_ops *b_ = llama_ops(fc, #op, ops(fc, #op)->op != NULL); \
        struct kernel_span t_ = span_begin(fc);                                     \
        b_->op(__VA_ARGS__);                                                        \
        kernel_span_end(fc, t_, kind);                                              \
    } while (0)

void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, float eps, int64_t N, int64_t C,
                     struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_RMSNORM, rmsnorm_forward, out, rstd, inp, weight, eps, N, C, fc);
}

void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                      const float *rstd, int64_t N, int64_t C, struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_RMSNORM, rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd, N, C, fc);
}

void rmsnorm_forward_bf16(bf16 *out, float *rstd, const bf16 *inp, const float *weight, float eps, int64_t N,
                          int64_t C, struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_RMSNORM, rmsnorm_forward_bf16, out, rstd, inp, weight, eps, N, C, fc);
}

void rmsnorm_backward_bf16(struct act_out dinp, float *dweight, const float *dout, const bf16 *inp,
                           const float *weight, const float *rstd, int64_t N, int64_t C, struct exec_ctx *fc) {
    ops_on(fc, __func__, NULL, 0, &dinp, 1); /* checks dinp's space; RUN_LLAMA chooses the backend */
    RUN_LLAMA(KERNEL_RMSNORM, rmsnorm_backward_bf16, dinp, dweight, dout, inp, weight, rstd, N, C, fc);
}

void rope_forward(float *out, const float *inp, int64_t ld, const float *freqs, const int32_t *pos, int64_t N,
                  int64_t heads, int64_t hs, struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_ROPE, rope_forward, out, inp, ld, freqs, pos, N, heads, hs, fc);
}

void rope_backward(float *dinp, const float *dout, int64_t ld, const float *freqs, const int32_t *pos, int64_t N,
                   int64_t heads, int64_t hs, struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_ROPE, rope_backward, dinp, dout, ld, freqs, pos, N, heads, hs, fc);
}

void rope_forward_bf16(bf16 *out, const bf16 *inp, int64_t ld, const float *freqs, const int32_t *pos, int64_t N,
                       int64_t heads, int64_t hs, struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_ROPE, rope_forward_bf16, out, inp, ld, freqs, pos, N, heads, hs, fc);
}

void rope_backward_bf16(bf16 *dinp, const bf16 *dout, int64_t ld, const float *freqs, const int32_t *pos,
                        int64_t N, int64_t heads, int64_t hs, struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_ROPE, rope_backward_bf16, dinp, dout, ld, freqs, pos, N, heads, hs, fc);
}

void swiglu_forward(float *out, const float *up, const float *gate, int64_t n, struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_SWIGLU, swiglu_forward, out, up, gate, n, fc);
}

void swiglu_backward(float *dup, float *dgate, const float *dout, const float *up, const float *gate, int64_t n,
                     struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_SWIGLU, swiglu_backward, dup, dgate, dout, up, gate, n, fc);
}

void swiglu_forward_bf16(bf16 *out, const bf16 *up, const bf16 *gate, int64_t n, struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_SWIGLU, swiglu_forward_bf16, out, up, gate, n, fc);
}

void swiglu_backward_bf16(float *dup, float *dgate, const float *dout, const bf16 *up, const bf16 *gate, int64_t n,
                          struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_SWIGLU, swiglu_backward_bf16, dup, dgate, dout, up, gate, n, fc);
}

void swiglu_backward_bf16_grads(bf16 *dup, bf16 *dgate, const bf16 *dout, const bf16 *up, const bf16 *gate,
                                int64_t n, struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_SWIGLU, swiglu_backward_bf16_grads, dup, dgate, dout, up, gate, n, fc);
}

void attention_gqa_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t NH, int64_t KV,
                           int64_t hs, struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_ATTENTION_FWD, attention_gqa_forward, out, att, qkv, B, T, NH, KV, hs, fc);
}

void attention_gqa_backward(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                            int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t hs, struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_ATTENTION_BWD, attention_gqa_backward, dqkv, dout, qkv, att, scratch, B, T, NH, KV, hs, fc);
}

void attention_gqa_forward_bf16(bf16 *out, float *att, const bf16 *qkv, float *scratch, int64_t B, int64_t T,
                                int64_t NH, int64_t KV, int64_t hs, struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_ATTENTION_FWD, attention_gqa_forward_bf16, out, att, qkv, scratch, B, T, NH, KV, hs, fc);
}

void attention_gqa_backward_bf16(bf16 *dqkv, const float *dout, const bf16 *qkv, const float *att, float *scratch,
                                 int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t hs, struct exec_ctx *fc) {
    RUN_LLAMA(KERNEL_ATTENTION_BWD, attention_gqa_backward_bf16, dqkv, dout, qkv, att, scratch, B, T, NH, KV, hs, fc);
}

/* ---- the buffer operations (include/bufops.h) */

/* The one place a buffer operation's backend is chosen. */
const struct buf_ops *buf_backend(enum mem_space space, const char *op) {
    if (space == MEM_DEVICE) return BACKEND_DEVICE(buf_ops_cuda, op);
    return &buf_ops_cpu;
}

/* The backend of a call of `count` elements or bytes (above: none run on
 * the host's form). */
static const struct buf_ops *buf_ops_for(enum mem_space space, size_t count, const char *op) {
    return buf_backend(count ? space : MEM_HOST, op);
}

void buf_zero(enum mem_space space, void *dst, size_t bytes) { buf_ops_for(space, bytes, __func__)->buf_zero(dst, bytes); }

void buf_copy(enum mem_space space, void *dst, const void *src, size_t bytes) {
    buf_ops_for(space, bytes, __func__)->buf_copy(dst, src, bytes);
}

void buf_widen(enum mem_space space, float *dst, const bf16 *src, size_t n) {
    buf_ops_for(space, n, __func__)->buf_widen(dst, src, n);
}

void buf_narrow(enum mem_space space, bf16 *dst, const float *src, size_t n) {
    buf_ops_for(space, n, __func__)->buf_narrow(dst, src, n);
}

void buf_round_bf16(enum mem_space space, float *x, size_t n) { buf_ops_for(space, n, __func__)->buf_round_bf16(x, n); }

void buf_round_narrow(enum mem_space space, bf16 *dst, float *x, size_t n) {
    buf_ops_for(space, n, __func__)->buf_round_narrow(dst, x, n);
}

void buf_from_fp32(enum mem_space space, void *dst, enum dtype dt, const float *src, size_t n) {
    buf_ops_for(space, n, __func__)->buf_from_fp32(dst, dt, src, n);
}

void buf_to_fp32(enum mem_space space, float *dst, const void *src, enum dtype dt, size_t n) {
    buf_ops_for(space, n, __func__)->buf_to_fp32(dst, src, dt, n);
}

void buf_accumulate(enum mem_space space, void *dst, enum dtype dt, const float *src, size_t n) {
    buf_ops_for(space, n, __func__)->buf_accumulate(dst, dt, src, n);
}

void buf_add(enum mem_space space, void *dst, const void *src, enum dtype dt, size_t n) {
    buf_ops_for(space, n, __func__)->buf_add(dst, src, dt, n);
}

double buf_sum_squares(enum mem_space space, const void *src, enum dtype dt, size_t n) {
    return buf_ops_for(space, n, __func__)->buf_sum_squares(src, dt, n);
}

/* buf_sumsq_open's list: its segments, and on the device the CUDA
 * backend's plan (its buf_sumsq_open). */
struct sumsq_list {
    enum mem_space space;
    int nseg;
    enum dtype dt;
    const void **data;
    size_t *n;
    double *out;
    void *device;
};

void buf_sumsq_close(struct sumsq_list *l) {
    if (!l) return;
    if (l->device) buf_backend(l->space, __func__)->buf_sumsq_close(l->device);
    free(l->data);
    free(l->n);
    free(l->out);
    free(l);
}

struct sumsq_list *buf_sumsq_open(enum mem_space space, const void *const *data, enum dtype dt, const size_t *n,
                                  int nseg) {
    struct sumsq_list *l = nseg >= 0 ? calloc(1, sizeof *l) : NULL;
    if (!l) return NULL;
    size_t k = nseg > 0 ? (size_t)nseg : 1;
    *l = (struct sumsq_list){.space = space, .nseg = nseg, .dt = dt, .data = calloc(k, sizeof *l->data),
                             .n = calloc(k, sizeof *l->n), .out = calloc(k, sizeof *l->out)};
    bool ok = l->data && l->n && l->out;
    for (int s = 0; ok && s < nseg; s++) l->data[s] = data[s], l->n[s] = n[s];
    /* the device's table, uploaded once (its few device buffers are
     * cudaMalloc'd: the memory table's "device untracked" row) */
    if (ok && space == MEM_DEVICE) {
        l->device = buf_backend(space, __func__)->buf_sumsq_open(data, dt, n, nseg);
        ok = l->device != NULL;
    }
    if (ok) return l;
    buf_sumsq_close(l);
    return NULL;
}

int buf_sumsq_count(const struct sumsq_list *l) { return l->nseg; }

const double *buf_sumsq_run(struct sumsq_list *l) {
    const struct buf_ops *b = buf_backend(l->space, __func__);
    if (b->buf_sumsq_run) return b->buf_sumsq_run(l->device);
    for (int s = 0; s < l->nseg; s++) l->out[s] = b->buf_sum_squares(l->data[s], l->dt, l->n[s]);
    return l->out;
}
