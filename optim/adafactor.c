/* Adafactor's per-piece kernels (include/optim.h; Shazeer & Stern 2018,
 * Algorithms 4 and 5): the factored second moment's sums and moving
 * averages, the update's squares for the clipping RMS, and the step. Host
 * memory; parallel/zero/factored.c runs them tensor by tensor. */
#include <math.h>

#include "optim.h"
#include "rng.h"

/* Per element of the step: grad scale, the moment (2 mul, div: R C / sum
 * C), sqrt, divide, clip (mul), decay (mul), step (mul, sub); the sums and
 * EMAs (square, add, 2 adds) and the squares pass (square, add) besides;
 * beta1's moment 3 more when on. */
enum { ADAFACTOR_FLOPS_PER_PARAM = 16, ADAFACTOR_MOMENT_FLOPS = 3 };

float adafactor_beta2t(float decay, int64_t t) { return 1.0f - powf((float)t, -decay); }

static inline float grad_at(const void *grad, enum dtype dt, size_t k, float gs) {
    return (dt == DTYPE_FP32 ? ((const float *)grad)[k] : bf16_to_f32(((const bf16 *)grad)[k])) * gs;
}

void adafactor_square_sums(size_t n, const void *grad, enum dtype grad_dtype, float grad_scale, float eps1,
                           size_t c0, int ncols, float *rows, float *cols) {
    const size_t m = (size_t)ncols;
    for (size_t k = 0; k < n; k++) {
        const float g = grad_at(grad, grad_dtype, k, grad_scale), sq = g * g + eps1;
        rows[(c0 + k) / m] += sq;
        cols[(c0 + k) % m] += sq;
    }
}

void adafactor_ema(size_t n, float *stat, const float *sums, float beta2t) {
    for (size_t i = 0; i < n; i++) stat[i] = beta2t * stat[i] + (1.0f - beta2t) * sums[i];
}

void adafactor_vector_ema(size_t n, float *v, const void *grad, enum dtype grad_dtype, float grad_scale, float eps1,
                          float beta2t) {
    for (size_t k = 0; k < n; k++) {
        const float g = grad_at(grad, grad_dtype, k, grad_scale);
        v[k] = beta2t * v[k] + (1.0f - beta2t) * (g * g + eps1);
    }
}

/* V-hat of element k of the piece. */
static inline float moment_at(const struct adafactor_moment *s, size_t k) {
    if (s->v) return s->v[k];
    const size_t m = (size_t)s->ncols, p = s->c0 + k;
    return s->rows[p / m] * s->cols[p % m] / s->col_total;
}

double adafactor_update_squares(size_t n, const void *grad, enum dtype grad_dtype, float grad_scale,
                                const struct adafactor_moment *s) {
    double sum = 0.0;
    for (size_t k = 0; k < n; k++) {
        const float u = grad_at(grad, grad_dtype, k, grad_scale) / sqrtf(moment_at(s, k));
        sum += (double)u * u;
    }
    return sum;
}

void adafactor_apply(const struct adafactor_hparams *h, size_t n, float *w, float *m, const void *grad,
                     enum dtype grad_dtype, const struct adafactor_moment *s, float clip_scale,
                     const struct param_writeback *out, struct flop_counter *fc) {
    const float decay = 1.0f - h->lr * h->weight_decay, b1 = h->beta1;
    for (size_t k = 0; k < n; k++) {
        const float u = grad_at(grad, grad_dtype, k, h->grad_scale) / sqrtf(moment_at(s, k)) * clip_scale;
        float step = u;
        if (m) step = m[k] = b1 * m[k] + (1.0f - b1) * u;
        const float wi = w[k] * decay - h->lr * step;
        w[k] = wi;
        if (out->params)
            out->params[k] = out->rounding == ROUND_NEAREST
                                 ? f32_to_bf16(wi)
                                 : f32_to_bf16_stochastic(wi, rng_u32(out->seed, RNG_STREAM_ROUNDING,
                                                                      out->noise_index + k));
    }
    fc->other += (double)(ADAFACTOR_FLOPS_PER_PARAM + (m ? ADAFACTOR_MOMENT_FLOPS : 0)) * (double)n;
}
