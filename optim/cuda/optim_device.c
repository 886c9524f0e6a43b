/* The X_cuda update rules, Adafactor's per-piece kernels and the 8-bit
 * codec (include/optim.h): the per-call
 * constants from the CPU's own function (include/optim.h:
 * adamw_step_consts, in optim/adamw.c: the CPU's powf and sqrtf), then the
 * kernels of optim_kernels.h, a wait, and the FLOPs counted as the CPU
 * counts. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "optim_kernels.h"

/* As optim/adamw.c, sgd.c, adamw8bit.c, lion.c, sgd8bit.c and lion8bit.c
 * count (their FLOPS_PER_PARAM). */
/* (lion.c and the one-state 8-bit rules: 11, and each of sgd and lion
 * plus 5 for the codec) */
enum { ADAMW_FLOPS = 14, SGD_FLOPS = 9, ADAMW8BIT_FLOPS = 24, LION_FLOPS = 11, CODEC8_FLOPS = 5 };

/* A failed launch or run leaves the device unusable: say which and exit. */
static void check(int err, const char *what) {
    if (err == (int)cudaSuccess) return;
    fprintf(stderr, "error: CUDA %s: %s (error %d)\n", what, cudaGetErrorString((cudaError_t)err), err);
    exit(EXIT_FAILURE);
}

/* The launch's error, then the run's: the results are in place on return. */
static void finish(int launch_err, const char *what) {
    check(launch_err, what);
    check((int)cudaDeviceSynchronize(), what);
}

/* An update rule's end. v1 (the default): finish's wait per call, about
 * 196 a step at GPT-2 124M. --gpu_path v2 (fc->device.queued_updates): the launch's error
 * only; the kernels stay queued on the default stream, in order before
 * every later kernel, copy and collective, and an error while they run
 * shows at the step's one wait after the update (train/run/run_hooks.c:
 * device_kernels_sync at OPTIMIZER_ENDS, which checks it). */
static void finish_rule(int launch_err, const char *what, const struct exec_ctx *fc) {
    if (fc->device.queued_updates) check(launch_err, what);
    else finish(launch_err, what);
}

static struct cuda_k_adam_consts adam_consts(const struct adamw_hparams *h) {
    const struct adamw_step_consts c = adamw_step_consts(h);
    return (struct cuda_k_adam_consts){
        .b1 = h->beta1,
        .b2 = h->beta2,
        .eps = h->eps,
        .step_size = c.step_size,
        .isb = c.isb,
        .decay = c.decay,
        .grad_scale = h->grad_scale,
    };
}

static struct cuda_k_writeback writeback(const struct param_writeback *out) {
    return (struct cuda_k_writeback){.params = out->params, .stochastic = out->rounding == ROUND_STOCHASTIC,
                                     .seed = out->seed, .noise_index = out->noise_index};
}

/* The CPU reads any dtype but fp32 as bf16; so does this. */
static int is_bf16(enum dtype dt) { return dt != DTYPE_FP32; }

static struct cuda_k_map map_of(const float map[QMAP_SIZE]) {
    struct cuda_k_map m;
    _Static_assert(sizeof m.code == QMAP_SIZE * sizeof(float), "one code book");
    memcpy(m.code, map, sizeof m.code);
    return m;
}

static struct cuda_k_sgd_consts sgd_consts(const struct sgd_hparams *h) {
    return (struct cuda_k_sgd_consts){.lr = h->lr, .momentum = h->momentum, .weight_decay = h->weight_decay,
                                      .grad_scale = h->grad_scale, .nesterov = h->nesterov,
                                      .first_step = h->first_step};
}

static struct cuda_k_lion_consts lion_consts(const struct lion_hparams *h) {
    return (struct cuda_k_lion_consts){.lr = h->lr, .b1 = h->beta1, .b2 = h->beta2, .decay = lion_decay(h),
                                       .grad_scale = h->grad_scale};
}

void adamw_update_cuda(const struct adamw_hparams *h, size_t n, float *w, float *m, float *v, const void *grad,
                       enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    const struct cuda_k_adam_consts k = adam_consts(h);
    const struct cuda_k_writeback wb = writeback(out);
    if (n) finish_rule(cuda_k_adamw(&k, n, w, m, v, grad, is_bf16(grad_dtype), &wb), "adamw_update", fc);
    fc->other += (double)ADAMW_FLOPS * (double)n;
}

void sgd_update_cuda(const struct sgd_hparams *h, size_t n, float *w, float *buf, const void *grad,
                     enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    const struct cuda_k_sgd_consts k = sgd_consts(h);
    const struct cuda_k_writeback wb = writeback(out);
    if (n) finish_rule(cuda_k_sgd(&k, n, w, buf, grad, is_bf16(grad_dtype), &wb), "sgd_update", fc);
    fc->other += (double)SGD_FLOPS * (double)n;
}

void adamw8bit_update_cuda(const struct adamw_hparams *h, size_t n, float *w, uint8_t *q1, uint8_t *q2,
                           float *absmax1, float *absmax2, const float *map_signed, const float *map_unsigned,
                           const void *grad, enum dtype grad_dtype, const struct param_writeback *out,
                           struct exec_ctx *fc) {
    const struct cuda_k_adam_consts k = adam_consts(h);
    const struct cuda_k_writeback wb = writeback(out);
    const struct cuda_k_map ms = map_of(map_signed), mu = map_of(map_unsigned);
    /* as adamw8bit.c: the codes of an all-zero block */
    const uint8_t zero_s = qmap_nearest(map_signed, 0.0f), zero_u = qmap_nearest(map_unsigned, 0.0f);
    if (n)
        finish_rule(cuda_k_adamw8bit(&k, n, w, q1, q2, absmax1, absmax2, &ms, &mu, zero_s, zero_u, grad,
                                is_bf16(grad_dtype), &wb), "adamw8bit_update", fc);
    fc->other += (double)ADAMW8BIT_FLOPS * (double)n;
}

void lion_update_cuda(const struct lion_hparams *h, size_t n, float *w, float *m, const void *grad,
                      enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    const struct cuda_k_lion_consts k = lion_consts(h);
    const struct cuda_k_writeback wb = writeback(out);
    if (n) finish_rule(cuda_k_lion(&k, n, w, m, grad, is_bf16(grad_dtype), &wb), "lion_update", fc);
    fc->other += (double)LION_FLOPS * (double)n;
}

void sgd8bit_update_cuda(const struct sgd_hparams *h, size_t n, float *w, uint8_t *q, float *absmax,
                         const float *map_signed, const void *grad, enum dtype grad_dtype,
                         const struct param_writeback *out, struct exec_ctx *fc) {
    const struct cuda_k_sgd_consts k = sgd_consts(h);
    const struct cuda_k_writeback wb = writeback(out);
    const struct cuda_k_map ms = map_of(map_signed);
    if (n)
        finish_rule(cuda_k_sgd8bit(&k, n, w, q, absmax, &ms, qmap_nearest(map_signed, 0.0f), grad, is_bf16(grad_dtype),
                              &wb), "sgd8bit_update", fc);
    fc->other += (double)(SGD_FLOPS + CODEC8_FLOPS) * (double)n;
}

void lion8bit_update_cuda(const struct lion_hparams *h, size_t n, float *w, uint8_t *q, float *absmax,
                          const float *map_signed, const void *grad, enum dtype grad_dtype,
                          const struct param_writeback *out, struct exec_ctx *fc) {
    const struct cuda_k_lion_consts k = lion_consts(h);
    const struct cuda_k_writeback wb = writeback(out);
    const struct cuda_k_map ms = map_of(map_signed);
    if (n)
        finish_rule(cuda_k_lion8bit(&k, n, w, q, absmax, &ms, qmap_nearest(map_signed, 0.0f), grad, is_bf16(grad_dtype),
                               &wb), "lion8bit_update", fc);
    fc->other += (double)(LION_FLOPS + CODEC8_FLOPS) * (double)n;
}

/* ---- Adafactor (adafactor.cu) */

static struct cuda_k_adafactor_moment adafactor_moment_of(const struct adafactor_moment *s) {
    return (struct cuda_k_adafactor_moment){.rows = s->rows, .cols = s->cols, .col_total = s->col_total, .v = s->v,
                                            .c0 = s->c0, .ncols = s->ncols};
}

void adafactor_square_sums_cuda(size_t n, const void *grad, enum dtype grad_dtype, float grad_scale, float eps1,
                                size_t c0, int ncols, float *rows, float *cols) {
    finish(cuda_k_adafactor_square_sums(n, grad, is_bf16(grad_dtype), grad_scale, eps1, c0, ncols, rows, cols),
           "adafactor_square_sums");
}

void adafactor_ema_cuda(size_t n, float *stat, const float *sums, float beta2t) {
    finish(cuda_k_adafactor_ema(n, stat, sums, beta2t), "adafactor_ema");
}

void adafactor_vector_ema_cuda(size_t n, float *v, const void *grad, enum dtype grad_dtype, float grad_scale,
                               float eps1, float beta2t) {
    finish(cuda_k_adafactor_vector_ema(n, v, grad, is_bf16(grad_dtype), grad_scale, eps1, beta2t),
           "adafactor_vector_ema");
}

void adafactor_total_cuda(size_t n, const float *src, float *dst, bool accumulate) {
    finish(cuda_k_adafactor_total(n, src, dst, accumulate), "adafactor_total");
}

void adafactor_moment_values_cuda(size_t n, const struct adafactor_moment *s, float *out) {
    const struct cuda_k_adafactor_moment k = adafactor_moment_of(s);
    finish(cuda_k_adafactor_moment_values(n, &k, out), "adafactor_moment_values");
}

void adafactor_update_squares_cuda(size_t n, const void *grad, enum dtype grad_dtype, float grad_scale,
                                   const struct adafactor_moment *s, double *sum) {
    const struct cuda_k_adafactor_moment k = adafactor_moment_of(s);
    finish(cuda_k_adafactor_squares(n, grad, is_bf16(grad_dtype), grad_scale, &k, sum), "adafactor_update_squares");
}

void adafactor_apply_cuda(const struct adafactor_hparams *h, size_t n, float *w, float *m, const void *grad,
                          enum dtype grad_dtype, const struct adafactor_moment *s, float clip_scale,
                          const struct param_writeback *out, struct exec_ctx *fc) {
    const struct cuda_k_adafactor_moment k = adafactor_moment_of(s);
    const struct cuda_k_adafactor_consts c = {.lr = h->lr, .b1 = h->beta1, .decay = adafactor_decay_factor(h),
                                              .grad_scale = h->grad_scale, .clip_scale = clip_scale};
    const struct cuda_k_writeback wb = writeback(out);
    if (n) finish(cuda_k_adafactor_apply(&c, n, w, m, grad, is_bf16(grad_dtype), &k, &wb), "adafactor_apply");
    fc->other += adafactor_flops(n, m != NULL);
}

/* A device buffer of `bytes` for staging a host-side fp32 range. */
static float *staging(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        fprintf(stderr, "error: %s: no device memory to stage %zu bytes of fp32 states (%s)\n", what, bytes,
                cudaGetErrorString(e));
        exit(EXIT_FAILURE);
    }
    return p;
}

void adamw8bit_dequantize_cuda(const float map[QMAP_SIZE], const uint8_t *q, const float *absmax, size_t n,
                               float *out, bool out_on_device) {
    if (!n) return;
    const struct cuda_k_map m = map_of(map);
    float *d = out_on_device ? out : staging(n * sizeof *d, "adamw8bit_dequantize");
    finish(cuda_k_dequantize8(&m, q, absmax, n, d), "adamw8bit_dequantize");
    if (out_on_device) return;
    check((int)cudaMemcpy(out, d, n * sizeof *d, cudaMemcpyDeviceToHost), "adamw8bit_dequantize (to the host)");
    check((int)cudaFree(d), "adamw8bit_dequantize");
}

void adamw8bit_quantize_cuda(const float map[QMAP_SIZE], const float *x, bool x_on_device, size_t n, uint8_t *q,
                             float *absmax) {
    if (!n) return;
    const struct cuda_k_map m = map_of(map);
    float *tmp = x_on_device ? NULL : staging(n * sizeof *tmp, "adamw8bit_quantize");
    if (tmp)
        check((int)cudaMemcpy(tmp, x, n * sizeof *tmp, cudaMemcpyHostToDevice), "adamw8bit_quantize (from the host)");
    finish(cuda_k_quantize8(&m, tmp ? tmp : x, n, q, absmax), "adamw8bit_quantize");
    if (tmp) check((int)cudaFree(tmp), "adamw8bit_quantize");
}
