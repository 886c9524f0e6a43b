#include <math.h>

#include "optim.h"
#include "rng.h"

enum { ADAMW_FLOPS_PER_PARAM = 14 };

static inline float grad_at(const void *grad, enum dtype dt, size_t i) {
    return dt == DTYPE_FP32 ? ((const float *)grad)[i] : bf16_to_f32(((const bf16 *)grad)[i]);
}

void adamw_update(const struct adamw_hparams *h, size_t n, float *w, float *m, float *v, const void *grad,
                  enum dtype grad_dtype, const struct param_writeback *out, struct flop_counter *fc) {
    const float bc1 = 1.0f - powf(h->beta1, (float)h->t);
    const float bc2 = 1.0f - powf(h->beta2, (float)h->t);
    const float step_size = h->lr / bc1, inv_sqrt_bc2 = 1.0f / sqrtf(bc2);
    const float decay = 1.0f - h->lr * h->weight_decay;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad_at(grad, grad_dtype, i) * h->grad_scale;
        float mi = h->beta1 * m[i] + (1.0f - h->beta1) * g;
        float vi = h->beta2 * v[i] + (1.0f - h->beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float wi = w[i] * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + h->eps);
        w[i] = wi;
        if (!out->params) continue;
        if (out->rounding == ROUND_STOCHASTIC)
            out->params[i] =
                f32_to_bf16_stochastic(wi, rng_u32(out->seed, RNG_STREAM_ROUNDING, out->noise_index + i));
        else
            out->params[i] = f32_to_bf16(wi);
    }
    fc->other += (double)ADAMW_FLOPS_PER_PARAM * (double)n;
}
