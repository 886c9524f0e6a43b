/* include/layers.h in the CUDA build: each call runs where its buffers
 * live (pointer_space.h): host memory takes the CPU's kernels (cpu_*,
 * model/cpu/ renamed by layers_rename.h), so --device cpu keeps working in
 * this build with the CPU build's results; device memory takes the CUDA
 * kernels (cuda_*, the .cu files of model/cuda/). A NULL pointer (an
 * absent bias, an empty tensor) has no say. Buffers of one call in both
 * spaces are a caller bug, reported by name (exit non-zero). The
 * flop_counter is always host memory. attention_backward_scratch is not
 * dispatched (no pointer): model/cpu/attention.c's one definition sizes
 * the scratch of both paths. attention_lse_* on device memory is flash
 * attention (flash_attention.h), its FLOPs flash_attention_flops' issued
 * numbers; a shape it does not take (a head size other than 32, 64, 128)
 * exits non-zero with its message (the trainer refuses such a run at
 * start-up: device_check_flash_attention). Every call but encoder_forward/
 * backward (no counter; the model calls the embedding_rows_* forms) is timed
 * into the counter's kernel profile (include/kernel_timing.h: CUDA events
 * on the device, which does not synchronize per call; the clock on the
 * host); gemm_counted on device memory only. */
#include <stdio.h>
#include <stdlib.h>

#include "flash_attention.h"
#include "kernel_timing.h"
#include "layers.h"
#include "layers_cuda.h"
#include "pointer_space.h"

static bool on_device_all(const char *op, const void *const *p, size_t n) {
    size_t dev = 0, host = 0;
    for (size_t i = 0; i < n; i++) {
        if (!p[i]) continue;
        if (cuda_on_device(p[i])) dev++;
        else host++;
    }
    if (dev && host) {
        fprintf(stderr, "error: %s: %zu of its buffers are in device memory and %zu in host memory (one space per "
                        "call)\n", op, dev, host);
        exit(EXIT_FAILURE);
    }
    return dev > 0;
}

/* ON_DEVICE("name", p, q, ...): whether every non-NULL pointer is device memory. */
#define PTRS(...) ((const void *const[]){__VA_ARGS__})
#define ON_DEVICE(op, ...) on_device_all(op, PTRS(__VA_ARGS__), sizeof PTRS(__VA_ARGS__) / sizeof(const void *))

void encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int64_t B, int64_t T,
                     int64_t C) {
    if (ON_DEVICE("encoder_forward", out, inp, wte, wpe)) cuda_encoder_forward(out, inp, wte, wpe, B, T, C);
    else cpu_encoder_forward(out, inp, wte, wpe, B, T, C);
}

void encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t B, int64_t T,
                      int64_t C) {
    if (ON_DEVICE("encoder_backward", dwte, dwpe, dout, inp)) cuda_encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    else cpu_encoder_backward(dwte, dwpe, dout, inp, B, T, C);
}

void embedding_rows_forward(float *out, const int32_t *inp, const float *wte, int64_t v0, int64_t rows, int64_t BT,
                            int64_t C, struct flop_counter *fc) {
    bool dev = ON_DEVICE("embedding_rows_forward", out, inp, wte);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_embedding_rows_forward(out, inp, wte, v0, rows, BT, C);
    else cpu_embedding_rows_forward(out, inp, wte, v0, rows, BT, C, fc);
    kernel_span_end(fc, t, KERNEL_EMBEDDING);
}

void positions_add(float *out, const float *wpe, int64_t B, int64_t T, int64_t C, struct flop_counter *fc) {
    bool dev = ON_DEVICE("positions_add", out, wpe);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_positions_add(out, wpe, B, T, C);
    else cpu_positions_add(out, wpe, B, T, C, fc);
    kernel_span_end(fc, t, KERNEL_EMBEDDING);
}

void embedding_rows_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t v0,
                             int64_t rows, int64_t B, int64_t T, int64_t C, struct flop_counter *fc) {
    bool dev = ON_DEVICE("embedding_rows_backward", dwte, dwpe, dout, inp);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_embedding_rows_backward(dwte, dwpe, dout, inp, v0, rows, B, T, C);
    else cpu_embedding_rows_backward(dwte, dwpe, dout, inp, v0, rows, B, T, C, fc);
    kernel_span_end(fc, t, KERNEL_EMBEDDING);
}

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                       const float *bias, int64_t N, int64_t C, struct flop_counter *fc) {
    bool dev = ON_DEVICE("layernorm_forward", out, mean, rstd, inp, weight, bias);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, fc);
    else cpu_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, fc);
    kernel_span_end(fc, t, KERNEL_LAYERNORM_FWD);
}

void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, int64_t N, int64_t C,
                        struct flop_counter *fc) {
    bool dev = ON_DEVICE("layernorm_backward", dinp, dweight, dbias, dout, inp, weight, mean, rstd);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, fc);
    else cpu_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, fc);
    kernel_span_end(fc, t, KERNEL_LAYERNORM_BWD);
}

void gemm_counted(struct flop_counter *fc, enum gemm_kind kind, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                  float *c, int64_t ldc) {
    /* the host path is called from the CPU attention's OpenMP threads, and
     * the profile is plain doubles: timed on the device path only */
    if (ON_DEVICE("gemm_counted", a, b, c)) {
        struct kernel_span t = kernel_span_begin(fc, true);
        cuda_gemm_counted(fc, kind, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        kernel_span_end(fc, t, KERNEL_GEMM);
    } else {
        cpu_gemm_counted(fc, kind, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
}

void matmul_forward_sliced(float *out, const float *inp, const float *weight, const float *bias, int64_t N,
                           int64_t C, int64_t OC, int64_t max_rows, struct flop_counter *fc) {
    bool dev = ON_DEVICE("matmul_forward", out, inp, weight, bias);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_matmul_forward_sliced(out, inp, weight, bias, N, C, OC, max_rows, fc);
    else cpu_matmul_forward_sliced(out, inp, weight, bias, N, C, OC, max_rows, fc);
    kernel_span_end(fc, t, KERNEL_MATMUL_FWD);
}

void matmul_backward_sliced(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, int64_t N, int64_t C, int64_t OC, int64_t max_rows,
                            struct flop_counter *fc) {
    bool dev = ON_DEVICE("matmul_backward", dinp, dweight, dbias, dout, inp, weight);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_matmul_backward_sliced(dinp, dweight, dbias, dout, inp, weight, N, C, OC, max_rows, fc);
    else cpu_matmul_backward_sliced(dinp, dweight, dbias, dout, inp, weight, N, C, OC, max_rows, fc);
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
    bool dev = ON_DEVICE("matmul_forward_bf16", out, inp, weight, bias);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_matmul_forward_bf16(out, inp, weight, bias, N, C, OC, fc);
    else cpu_matmul_forward_bf16(out, inp, weight, bias, N, C, OC, fc);
    kernel_span_end(fc, t, KERNEL_MATMUL_FWD);
}

void matmul_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout, const bf16 *inp,
                          const float *weight, int64_t N, int64_t C, int64_t OC, struct flop_counter *fc) {
    bool dev = ON_DEVICE("matmul_backward_bf16", dinp, dweight, dbias, dout, inp, weight);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_matmul_backward_bf16(dinp, dweight, dbias, dout, inp, weight, N, C, OC, fc);
    else cpu_matmul_backward_bf16(dinp, dweight, dbias, dout, inp, weight, N, C, OC, fc);
    kernel_span_end(fc, t, KERNEL_MATMUL_BWD);
}

void bias_add(float *out, const float *bias, int64_t N, int64_t OC, struct flop_counter *fc) {
    bool dev = ON_DEVICE("bias_add", out, bias);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_bias_add(out, bias, N, OC, fc);
    else cpu_bias_add(out, bias, N, OC, fc);
    kernel_span_end(fc, t, KERNEL_RESIDUAL);
}

void gelu_forward(float *out, const float *inp, int64_t n, struct flop_counter *fc) {
    bool dev = ON_DEVICE("gelu_forward", out, inp);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_gelu_forward(out, inp, n, fc);
    else cpu_gelu_forward(out, inp, n, fc);
    kernel_span_end(fc, t, KERNEL_GELU);
}

void gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n, struct flop_counter *fc) {
    bool dev = ON_DEVICE("gelu_backward", dinp, inp, dout);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_gelu_backward(dinp, inp, dout, n, fc);
    else cpu_gelu_backward(dinp, inp, dout, n, fc);
    kernel_span_end(fc, t, KERNEL_GELU);
}

void gelu_forward_bf16(bf16 *out, bf16 *pre_store, const float *pre, int64_t n, struct flop_counter *fc) {
    bool dev = ON_DEVICE("gelu_forward_bf16", out, pre_store, pre);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_gelu_forward_bf16(out, pre_store, pre, n, fc);
    else cpu_gelu_forward_bf16(out, pre_store, pre, n, fc);
    kernel_span_end(fc, t, KERNEL_GELU);
}

void gelu_backward_bf16(float *dinp, const bf16 *inp, const float *dout, int64_t n, struct flop_counter *fc) {
    bool dev = ON_DEVICE("gelu_backward_bf16", dinp, inp, dout);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_gelu_backward_bf16(dinp, inp, dout, n, fc);
    else cpu_gelu_backward_bf16(dinp, inp, dout, n, fc);
    kernel_span_end(fc, t, KERNEL_GELU);
}

void residual_forward(float *out, const float *a, const float *b, int64_t n, struct flop_counter *fc) {
    bool dev = ON_DEVICE("residual_forward", out, a, b);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_residual_forward(out, a, b, n, fc);
    else cpu_residual_forward(out, a, b, n, fc);
    kernel_span_end(fc, t, KERNEL_RESIDUAL);
}

double crossentropy_forward_backward(float *logits, float *losses, const int32_t *targets, int64_t N, int64_t V,
                                     int64_t Vp, float dloss, struct flop_counter *fc) {
    bool dev = ON_DEVICE("crossentropy_forward_backward", logits, losses, targets);
    struct kernel_span t = kernel_span_begin(fc, dev);
    double loss = dev ? cuda_crossentropy_forward_backward(logits, losses, targets, N, V, Vp, dloss, fc)
                      : cpu_crossentropy_forward_backward(logits, losses, targets, N, V, Vp, dloss, fc);
    kernel_span_end(fc, t, KERNEL_CROSSENTROPY);
    return loss;
}

void crossentropy_row_max(const float *logits, float *maxv, int64_t N, int64_t Vl, int64_t valid,
                          struct flop_counter *fc) {
    bool dev = ON_DEVICE("crossentropy_row_max", logits, maxv);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_crossentropy_row_max(logits, maxv, N, Vl, valid);
    else cpu_crossentropy_row_max(logits, maxv, N, Vl, valid, fc);
    kernel_span_end(fc, t, KERNEL_CROSSENTROPY);
}

void crossentropy_exp_sum(float *logits, const float *maxv, float *sum, float *target, const int32_t *targets,
                          int64_t N, int64_t Vl, int64_t v0, int64_t valid, bool in_place, struct flop_counter *fc) {
    bool dev = ON_DEVICE("crossentropy_exp_sum", logits, maxv, sum, target, targets);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_crossentropy_exp_sum(logits, maxv, sum, target, targets, N, Vl, v0, valid, in_place);
    else cpu_crossentropy_exp_sum(logits, maxv, sum, target, targets, N, Vl, v0, valid, in_place, fc);
    kernel_span_end(fc, t, KERNEL_CROSSENTROPY);
}

double crossentropy_finish(float *logits, float *losses, const float *maxv, const float *sum, const float *target,
                           const int32_t *targets, int64_t N, int64_t Vl, int64_t v0, int64_t valid, float dloss,
                           struct flop_counter *fc) {
    bool dev = ON_DEVICE("crossentropy_finish", logits, losses, maxv, sum, target, targets);
    struct kernel_span t = kernel_span_begin(fc, dev);
    double loss = dev
        ? cuda_crossentropy_finish(logits, losses, maxv, sum, target, targets, N, Vl, v0, valid, dloss, fc)
        : cpu_crossentropy_finish(logits, losses, maxv, sum, target, targets, N, Vl, v0, valid, dloss, fc);
    kernel_span_end(fc, t, KERNEL_CROSSENTROPY);
    return loss;
}

void attention_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       struct flop_counter *fc) {
    bool dev = ON_DEVICE("attention_forward", out, att, qkv);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_attention_forward(out, att, qkv, B, T, C, NH, fc);
    else cpu_attention_forward(out, att, qkv, B, T, C, NH, fc);
    kernel_span_end(fc, t, KERNEL_ATTENTION_FWD);
}

void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                        int64_t B, int64_t T, int64_t C, int64_t NH, struct flop_counter *fc) {
    bool dev = ON_DEVICE("attention_backward", dqkv, dout, qkv, att, scratch);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) cuda_attention_backward(dqkv, dout, qkv, att, scratch, B, T, C, NH, fc);
    else cpu_attention_backward(dqkv, dout, qkv, att, scratch, B, T, C, NH, fc);
    kernel_span_end(fc, t, KERNEL_ATTENTION_BWD);
}

/* flash_attention.h's kernels return non-zero for a shape they do not
 * take, after their message; layers.h's functions return nothing. */
static void flash_or_exit(const char *op, int rc) {
    if (rc == 0) return;
    fprintf(stderr, "error: %s: flash attention refused the shape (above)\n", op);
    exit(EXIT_FAILURE);
}

void attention_lse_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                           struct flop_counter *fc) {
    bool dev = ON_DEVICE("attention_lse_forward", out, lse, qkv);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) {
        flash_or_exit("attention_lse_forward", flash_attention_forward(out, lse, qkv, B, T, C, NH));
        struct flash_attention_flops f = flash_attention_flops(B, T, C, NH);
        fc->attention += f.forward_mma;
        fc->other += f.forward_other;
    } else {
        cpu_attention_lse_forward(out, lse, qkv, B, T, C, NH, fc);
    }
    kernel_span_end(fc, t, KERNEL_ATTENTION_FWD);
}

void attention_lse_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                            const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH, struct flop_counter *fc) {
    bool dev = ON_DEVICE("attention_lse_backward", dqkv, scratch, dout, qkv, out, lse);
    struct kernel_span t = kernel_span_begin(fc, dev);
    if (dev) {
        flash_or_exit("attention_lse_backward",
                      flash_attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH));
        struct flash_attention_flops f = flash_attention_flops(B, T, C, NH);
        fc->attention += f.backward_mma;
        fc->other += f.backward_other;
    } else {
        cpu_attention_lse_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, fc);
    }
    kernel_span_end(fc, t, KERNEL_ATTENTION_BWD);
}
