/* include/optim.h's update rules and 8-bit codec, in every build: each call
 * runs on the backend of its memory space (include/backend.h): the update
 * rules by fc->space (counters.h: the trainer sets its counter's from the
 * run's space), the codec by its argument. X_cpu on host memory, X_cuda on
 * device memory, so --device cpu in the CUDA build keeps the CPU build's
 * results; the CPU build stops a device call by name. n == 0 touches
 * nothing: the CPU's path counts its zero FLOPs, whatever the pointers (one
 * past an end, say). The updates are timed into the counter's kernel
 * profile by the clock (on a GPU too: their kernels return finished). */
#include "backend.h"
#include "optim.h"

static bool on_device(size_t n, const struct exec_ctx *fc) { return n && fc->space == MEM_DEVICE; }

static void profile_update(struct exec_ctx *fc, double t0) { kernel_profile_add(fc, KERNEL_OPTIMIZER, t0); }

void adamw_update(const struct adamw_hparams *h, size_t n, float *w, float *m, float *v, const void *grad,
                  enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    double t0 = kernel_clock();
    if (on_device(n, fc)) ON_DEVICE(adamw_update_cuda(h, n, w, m, v, grad, grad_dtype, out, fc));
    else adamw_update_cpu(h, n, w, m, v, grad, grad_dtype, out, fc);
    profile_update(fc, t0);
}

void sgd_update(const struct sgd_hparams *h, size_t n, float *w, float *buf, const void *grad, enum dtype grad_dtype,
                const struct param_writeback *out, struct exec_ctx *fc) {
    double t0 = kernel_clock();
    if (on_device(n, fc)) ON_DEVICE(sgd_update_cuda(h, n, w, buf, grad, grad_dtype, out, fc));
    else sgd_update_cpu(h, n, w, buf, grad, grad_dtype, out, fc);
    profile_update(fc, t0);
}

void sgd8bit_update(const struct sgd_hparams *h, size_t n, float *w, uint8_t *q, float *absmax, const float *map_signed,
                    const struct qmap_index *ix_signed, const void *grad, enum dtype grad_dtype,
                    const struct param_writeback *out, struct exec_ctx *fc) {
    double t0 = kernel_clock();
    if (on_device(n, fc)) ON_DEVICE(sgd8bit_update_cuda(h, n, w, q, absmax, map_signed, grad, grad_dtype, out, fc));
    else sgd8bit_update_cpu(h, n, w, q, absmax, map_signed, ix_signed, grad, grad_dtype, out, fc);
    profile_update(fc, t0);
}

void lion_update(const struct lion_hparams *h, size_t n, float *w, float *m, const void *grad, enum dtype grad_dtype,
                 const struct param_writeback *out, struct exec_ctx *fc) {
    double t0 = kernel_clock();
    if (on_device(n, fc)) ON_DEVICE(lion_update_cuda(h, n, w, m, grad, grad_dtype, out, fc));
    else lion_update_cpu(h, n, w, m, grad, grad_dtype, out, fc);
    profile_update(fc, t0);
}

void lion8bit_update(const struct lion_hparams *h, size_t n, float *w, uint8_t *q, float *absmax,
                     const float *map_signed, const struct qmap_index *ix_signed, const void *grad,
                     enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    double t0 = kernel_clock();
    if (on_device(n, fc)) ON_DEVICE(lion8bit_update_cuda(h, n, w, q, absmax, map_signed, grad, grad_dtype, out, fc));
    else lion8bit_update_cpu(h, n, w, q, absmax, map_signed, ix_signed, grad, grad_dtype, out, fc);
    profile_update(fc, t0);
}

void adamw8bit_update(const struct adamw_hparams *h, size_t n, float *w, uint8_t *q1, uint8_t *q2, float *absmax1,
                      float *absmax2, const float *map_signed, const float *map_unsigned,
                      const struct qmap_index *ix_signed, const struct qmap_index *ix_unsigned, const void *grad,
                      enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    double t0 = kernel_clock();
    if (on_device(n, fc))
        ON_DEVICE(adamw8bit_update_cuda(h, n, w, q1, q2, absmax1, absmax2, map_signed, map_unsigned, grad, grad_dtype,
                                        out, fc));
    else
        adamw8bit_update_cpu(h, n, w, q1, q2, absmax1, absmax2, map_signed, map_unsigned, ix_signed, ix_unsigned,
                             grad, grad_dtype, out, fc);
    profile_update(fc, t0);
}

/* Adafactor's per-piece kernels: the step is timed as an update, the
 * statistics' passes are not (the norm's passes are not either). */
void adafactor_square_sums(enum mem_space space, size_t n, const void *grad, enum dtype grad_dtype, float grad_scale,
                           float eps1, size_t c0, int ncols, float *rows, float *cols) {
    if (n && space == MEM_DEVICE)
        ON_DEVICE(adafactor_square_sums_cuda(n, grad, grad_dtype, grad_scale, eps1, c0, ncols, rows, cols));
    else adafactor_square_sums_cpu(n, grad, grad_dtype, grad_scale, eps1, c0, ncols, rows, cols);
}

void adafactor_ema(enum mem_space space, size_t n, float *stat, const float *sums, float beta2t) {
    if (n && space == MEM_DEVICE) ON_DEVICE(adafactor_ema_cuda(n, stat, sums, beta2t));
    else adafactor_ema_cpu(n, stat, sums, beta2t);
}

void adafactor_vector_ema(enum mem_space space, size_t n, float *v, const void *grad, enum dtype grad_dtype,
                          float grad_scale, float eps1, float beta2t) {
    if (n && space == MEM_DEVICE)
        ON_DEVICE(adafactor_vector_ema_cuda(n, v, grad, grad_dtype, grad_scale, eps1, beta2t));
    else adafactor_vector_ema_cpu(n, v, grad, grad_dtype, grad_scale, eps1, beta2t);
}

/* (n == 0 still sets *dst: 0 or itself) */
void adafactor_total(enum mem_space space, size_t n, const float *src, float *dst, bool accumulate) {
    if (space == MEM_DEVICE) ON_DEVICE(adafactor_total_cuda(n, src, dst, accumulate));
    else adafactor_total_cpu(n, src, dst, accumulate);
}

void adafactor_moment_values(enum mem_space space, size_t n, const struct adafactor_moment *s, float *out) {
    if (n && space == MEM_DEVICE) ON_DEVICE(adafactor_moment_values_cuda(n, s, out));
    else adafactor_moment_values_cpu(n, s, out);
}

void adafactor_update_squares(enum mem_space space, size_t n, const void *grad, enum dtype grad_dtype,
                              float grad_scale, const struct adafactor_moment *s, double *sum) {
    if (!n) return; /* (*sum may be device memory) */
    if (space == MEM_DEVICE) ON_DEVICE(adafactor_update_squares_cuda(n, grad, grad_dtype, grad_scale, s, sum));
    else adafactor_update_squares_cpu(n, grad, grad_dtype, grad_scale, s, sum);
}

void adafactor_apply(const struct adafactor_hparams *h, size_t n, float *w, float *m, const void *grad,
                     enum dtype grad_dtype, const struct adafactor_moment *s, float clip_scale,
                     const struct param_writeback *out, struct exec_ctx *fc) {
    double t0 = kernel_clock();
    if (on_device(n, fc)) ON_DEVICE(adafactor_apply_cuda(h, n, w, m, grad, grad_dtype, s, clip_scale, out, fc));
    else adafactor_apply_cpu(h, n, w, m, grad, grad_dtype, s, clip_scale, out, fc);
    profile_update(fc, t0);
}

/* The fp32 values are in the states' space (the CUDA codec would also take
 * them from host memory: no caller has them there). */
void adamw8bit_dequantize(enum mem_space space, const float map[QMAP_SIZE], const uint8_t *q, const float *absmax,
                          size_t n, float *out) {
    if (n && space == MEM_DEVICE) ON_DEVICE(adamw8bit_dequantize_cuda(map, q, absmax, n, out, true));
    else adamw8bit_dequantize_cpu(map, q, absmax, n, out);
}

void adamw8bit_quantize(enum mem_space space, const float map[QMAP_SIZE], const struct qmap_index *ix, const float *x,
                        size_t n, uint8_t *q, float *absmax) {
    if (n && space == MEM_DEVICE) ON_DEVICE(adamw8bit_quantize_cuda(map, x, true, n, q, absmax));
    else adamw8bit_quantize_cpu(map, ix, x, n, q, absmax);
}
