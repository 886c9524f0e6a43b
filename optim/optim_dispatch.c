/* include/optim.h's update rules and 8-bit codec, in every build: each call
 * runs on the table that optim_backend, below, chooses by its memory space
 * (optim/optim_ops.h): the update rules' fc->space (counters.h: the
 * trainer sets its counter's from the run's space), the others' argument.
 * optim_ops_cpu on host memory, optim_ops_cuda on device memory, so
 * --device cpu in the CUDA build keeps the CPU build's results; the CPU
 * build stops a device call by name. n == 0 touches nothing: it runs the
 * host's form, whatever the space, and the CPU's path counts its zero
 * FLOPs, whatever the pointers (one past an end, say). The updates are
 * timed into the counter's kernel profile by the clock (on a GPU too:
 * their kernels return finished). At the end, the two scalars an update
 * takes from the step (lr_at, clip_scale), computed on the host. */
#include <math.h>

#include "backend.h"
#include "optim_ops.h"

/* The one place an update rule's or the codec's backend is chosen. */
const struct optim_ops *optim_backend(enum mem_space space, const char *op) {
    if (space == MEM_DEVICE) return BACKEND_DEVICE(optim_ops_cuda, op);
    return &optim_ops_cpu;
}

/* The backend of a call of n elements (above: none run on the host's form). */
static const struct optim_ops *ops(enum mem_space space, size_t n, const char *op) {
    return optim_backend(n ? space : MEM_HOST, op);
}

/* One update on fc's backend, timed into fc's profile. */
#define RUN_UPDATE(op, ...)                              \
    do {                                                 \
        double t0_ = kernel_clock();                     \
        ops(fc->space, n, #op)->op(__VA_ARGS__);         \
        kernel_profile_add(fc, KERNEL_OPTIMIZER, t0_);   \
    } while (0)

void adamw_update(const struct adamw_hparams *h, size_t n, float *w, float *m, float *v, const void *grad,
                  enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    RUN_UPDATE(adamw_update, h, n, w, m, v, grad, grad_dtype, out, fc);
}

void sgd_update(const struct sgd_hparams *h, size_t n, float *w, float *buf, const void *grad, enum dtype grad_dtype,
                const struct param_writeback *out, struct exec_ctx *fc) {
    RUN_UPDATE(sgd_update, h, n, w, buf, grad, grad_dtype, out, fc);
}

void sgd8bit_update(const struct sgd_hparams *h, size_t n, float *w, uint8_t *q, float *absmax, const float *map_signed,
                    const struct qmap_index *ix_signed, const void *grad, enum dtype grad_dtype,
                    const struct param_writeback *out, struct exec_ctx *fc) {
    RUN_UPDATE(sgd8bit_update, h, n, w, q, absmax, map_signed, ix_signed, grad, grad_dtype, out, fc);
}

void lion_update(const struct lion_hparams *h, size_t n, float *w, float *m, const void *grad, enum dtype grad_dtype,
                 const struct param_writeback *out, struct exec_ctx *fc) {
    RUN_UPDATE(lion_update, h, n, w, m, grad, grad_dtype, out, fc);
}

void lion8bit_update(const struct lion_hparams *h, size_t n, float *w, uint8_t *q, float *absmax,
                     const float *map_signed, const struct qmap_index *ix_signed, const void *grad,
                     enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    RUN_UPDATE(lion8bit_update, h, n, w, q, absmax, map_signed, ix_signed, grad, grad_dtype, out, fc);
}

void adamw8bit_update(const struct adamw_hparams *h, size_t n, float *w, uint8_t *q1, uint8_t *q2, float *absmax1,
                      float *absmax2, const float *map_signed, const float *map_unsigned,
                      const struct qmap_index *ix_signed, const struct qmap_index *ix_unsigned, const void *grad,
                      enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    RUN_UPDATE(adamw8bit_update, h, n, w, q1, q2, absmax1, absmax2, map_signed, map_unsigned, ix_signed, ix_unsigned,
               grad, grad_dtype, out, fc);
}

/* Adafactor's per-piece kernels: the step is timed as an update, the
 * statistics' passes are not (the norm's passes are not either). */
void adafactor_square_sums(enum mem_space space, size_t n, const void *grad, enum dtype grad_dtype, float grad_scale,
                           float eps1, size_t c0, int ncols, float *rows, float *cols) {
    ops(space, n, __func__)->adafactor_square_sums(n, grad, grad_dtype, grad_scale, eps1, c0, ncols, rows, cols);
}

void adafactor_ema(enum mem_space space, size_t n, float *stat, const float *sums, float beta2t) {
    ops(space, n, __func__)->adafactor_ema(n, stat, sums, beta2t);
}

void adafactor_vector_ema(enum mem_space space, size_t n, float *v, const void *grad, enum dtype grad_dtype,
                          float grad_scale, float eps1, float beta2t) {
    ops(space, n, __func__)->adafactor_vector_ema(n, v, grad, grad_dtype, grad_scale, eps1, beta2t);
}

/* (n == 0 still sets *dst: 0 or itself, on dst's own backend) */
void adafactor_total(enum mem_space space, size_t n, const float *src, float *dst, bool accumulate) {
    optim_backend(space, __func__)->adafactor_total(n, src, dst, accumulate);
}

void adafactor_moment_values(enum mem_space space, size_t n, const struct adafactor_moment *s, float *out) {
    ops(space, n, __func__)->adafactor_moment_values(n, s, out);
}

void adafactor_update_squares(enum mem_space space, size_t n, const void *grad, enum dtype grad_dtype,
                              float grad_scale, const struct adafactor_moment *s, double *sum) {
    if (!n) return; /* (*sum may be device memory) */
    optim_backend(space, __func__)->adafactor_update_squares(n, grad, grad_dtype, grad_scale, s, sum);
}

void adafactor_apply(const struct adafactor_hparams *h, size_t n, float *w, float *m, const void *grad,
                     enum dtype grad_dtype, const struct adafactor_moment *s, float clip_scale,
                     const struct param_writeback *out, struct exec_ctx *fc) {
    RUN_UPDATE(adafactor_apply, h, n, w, m, grad, grad_dtype, s, clip_scale, out, fc);
}

/* The fp32 values are in the states' space (optim/cuda/optim_ops_cuda.c). */
void adamw8bit_dequantize(enum mem_space space, const float map[QMAP_SIZE], const uint8_t *q, const float *absmax,
                          size_t n, float *out) {
    ops(space, n, __func__)->adamw8bit_dequantize(map, q, absmax, n, out);
}

void adamw8bit_quantize(enum mem_space space, const float map[QMAP_SIZE], const struct qmap_index *ix, const float *x,
                        size_t n, uint8_t *q, float *absmax) {
    ops(space, n, __func__)->adamw8bit_quantize(map, ix, x, n, q, absmax);
}

/* The two scalars an update rule takes from the step (include/optim.h):
 * the learning rate at a step (linear warmup, then constant or cosine decay
 * to min_lr_frac of lr) and the clip scale of global-norm clipping (Pascanu
 * et al. 2013: gradients scaled by max_norm / ||g|| when ||g|| > max_norm).
 * Every rank computes both alike, from the step and the all-reduced norm. */
float lr_at(const struct lr_options *c, int step) {
    if (step < c->warmup_steps) return c->lr * (float)(step + 1) / (float)c->warmup_steps;
    if (c->schedule == LR_CONSTANT) return c->lr;
    int decay_steps = c->steps - c->warmup_steps;
    if (decay_steps <= 1) return c->lr;
    double progress = (double)(step - c->warmup_steps) / (double)(decay_steps - 1);
    if (progress > 1.0) progress = 1.0;
    double min_lr = (double)c->lr * c->min_lr_frac;
    return (float)(min_lr + 0.5 * (1.0 + cos(M_PI * progress)) * ((double)c->lr - min_lr));
}

float clip_scale(double global_norm, float max_norm) {
    if (max_norm <= 0.0f || !(global_norm > max_norm)) return 1.0f;
    return (float)(max_norm / global_norm);
}
