/* Adafactor's per-piece kernels (include/optim.h; Shazeer & Stern 2018,
 * Algorithms 4 and 5): the factored second moment's sums and moving
 * averages, the update's squares for the clipping RMS, and the step. Host
 * memory (X_cpu; optim/cuda/adafactor.cu the device's); parallel/zero/factored.c
 * runs them tensor by tensor. */
#include <math.h>

#include "optim.h"
#include "rng.h"

/* Per element of the step: grad scale, the moment (2 mul, div: R C / sum
 * C), sqrt, divide, clip (mul), decay (mul), step (mul, sub); the sums and
 * EMAs (square, add, 2 adds) and the squares pass (square, add) besides;
 * beta1's moment 3 more when on. */
enum { ADAFACTOR_FLOPS_PER_PARAM = 16, ADAFACTOR_MOMENT_FLOPS = 3 };

double adafactor_flops(size_t n, bool moment) {
    return (double)(ADAFACTOR_FLOPS_PER_PARAM + (moment ? ADAFACTOR_MOMENT_FLOPS : 0)) * (double)n;
}

float adafactor_decay_factor(const struct adafactor_hparams *h) { return 1.0f - h->lr * h->weight_decay; }

float adafactor_beta2t(float decay, int64_t t) { return 1.0f - powf((float)t, -decay); }

static inline float grad_at(const void *grad, enum dtype dt, size_t k, float gs) {
    return (dt == DTYPE_FP32 ? ((const float *)grad)[k] : bf16_to_f32(((const bf16 *)grad)[k])) * gs;
}

/* A piece is walked in runs that stay inside one row of the matrix (a
 * vector: one long row), at most `cap` elements each: the run starting at
 * element k lies in row *r, columns [*j0, *j0 + len); one division per
 * run, none per element, so the inner loops index columns directly and
 * vectorize. Returns len. */
static size_t run_at(size_t c0, int ncols, size_t n, size_t k, size_t cap, size_t *r, size_t *j0) {
    const size_t m = ncols > 0 ? (size_t)ncols : n, p = c0 + k;
    *r = p / m;
    *j0 = p % m;
    size_t len = m - *j0 < n - k ? m - *j0 : n - k;
    return len < cap ? len : cap;
}

void adafactor_square_sums_cpu(size_t n, const void *grad, enum dtype grad_dtype, float grad_scale, float eps1,
                               size_t c0, int ncols, float *rows, float *cols) {
    for (size_t k = 0, len, r, j0; k < n; k += len) {
        len = run_at(c0, ncols, n, k, n, &r, &j0);
        float row = rows[r];
        for (size_t j = 0; j < len; j++) {
            const float g = grad_at(grad, grad_dtype, k + j, grad_scale), sq = g * g + eps1;
            row += sq;
            cols[j0 + j] += sq;
        }
        rows[r] = row;
    }
}

void adafactor_ema_cpu(size_t n, float *stat, const float *sums, float beta2t) {
    for (size_t i = 0; i < n; i++) stat[i] = beta2t * stat[i] + (1.0f - beta2t) * sums[i];
}

void adafactor_vector_ema_cpu(size_t n, float *v, const void *grad, enum dtype grad_dtype, float grad_scale,
                              float eps1, float beta2t) {
    for (size_t k = 0; k < n; k++) {
        const float g = grad_at(grad, grad_dtype, k, grad_scale);
        v[k] = beta2t * v[k] + (1.0f - beta2t) * (g * g + eps1);
    }
}

void adafactor_total_cpu(size_t n, const float *src, float *dst, bool accumulate) {
    float sum = accumulate ? *dst : 0.0f;
    for (size_t i = 0; i < n; i++) sum += src[i];
    *dst = sum;
}

/* update_run's buffer: runs of at most this many elements. */
enum { RUN = 256 };

/* The run of the piece at element k (run_at, the moment's shape). */
static size_t moment_run(const struct adafactor_moment *s, size_t n, size_t k, size_t *r, size_t *j0) {
    return s->v ? run_at(0, 0, n, k, RUN, r, j0) : run_at(s->c0, s->ncols, n, k, RUN, r, j0);
}

/* U of the piece's elements [k, k + len), which lie in one row: u[j].
 * V = (R_r / sum C) C_j: the row's share first, so that R C (each near
 * eps1 where gradients vanish, 1e-30 x 1e-30) cannot underflow to 0. */
static void update_run(const struct adafactor_moment *s, const void *grad, enum dtype dt, float gs, size_t r,
                       size_t j0, size_t k, size_t len, float *u) {
    if (s->v) {
        for (size_t j = 0; j < len; j++) u[j] = grad_at(grad, dt, k + j, gs) / sqrtf(s->v[k + j]);
        return;
    }
    const float share = s->rows[r] / *s->col_total, *cols = s->cols + j0;
    for (size_t j = 0; j < len; j++) u[j] = grad_at(grad, dt, k + j, gs) / sqrtf(share * cols[j]);
}

void adafactor_moment_values_cpu(size_t n, const struct adafactor_moment *s, float *out) {
    for (size_t k = 0, len, r, j0; k < n; k += len) {
        len = moment_run(s, n, k, &r, &j0);
        if (s->v) {
            for (size_t j = 0; j < len; j++) out[k + j] = s->v[k + j];
            continue;
        }
        const float share = s->rows[r] / *s->col_total;
        for (size_t j = 0; j < len; j++) out[k + j] = share * s->cols[j0 + j];
    }
}

void adafactor_update_squares_cpu(size_t n, const void *grad, enum dtype grad_dtype, float grad_scale,
                                  const struct adafactor_moment *s, double *total) {
    double sum = 0.0;
    float u[RUN];
    for (size_t k = 0, len, r, j0; k < n; k += len) {
        len = moment_run(s, n, k, &r, &j0);
        update_run(s, grad, grad_dtype, grad_scale, r, j0, k, len, u);
        for (size_t j = 0; j < len; j++) sum += (double)u[j] * u[j];
    }
    *total += sum;
}

void adafactor_apply_cpu(const struct adafactor_hparams *h, size_t n, float *w, float *m, const void *grad,
                         enum dtype grad_dtype, const struct adafactor_moment *s, float clip_scale,
                         const struct param_writeback *out, struct exec_ctx *fc) {
    const float decay = adafactor_decay_factor(h), b1 = h->beta1, lr = h->lr;
    float u[RUN];
    for (size_t k = 0, len, r, j0; k < n; k += len) {
        len = moment_run(s, n, k, &r, &j0);
        update_run(s, grad, grad_dtype, h->grad_scale, r, j0, k, len, u);
        for (size_t j = 0; j < len; j++) {
            float step = u[j] * clip_scale;
            if (m) step = m[k + j] = b1 * m[k + j] + (1.0f - b1) * step;
            w[k + j] = w[k + j] * decay - lr * step;
        }
        if (out->params)
            for (size_t j = 0; j < len; j++)
                out->params[k + j] = out->rounding == ROUND_NEAREST
                                         ? f32_to_bf16(w[k + j])
                                         : f32_to_bf16_stochastic(w[k + j], rng_u32(out->seed, RNG_STREAM_ROUNDING,
                                                                                    out->noise_index + k + j));
    }
    fc->other += adafactor_flops(n, m != NULL);
}
