#include <math.h>

#include "optim.h"
#include "elementwise_loops.h"

enum { ADAMW_FLOPS_PER_PARAM = 14 };

/* One element of the update; inlined into loops specialised on the grad
 * dtype and the writeback, so each loop is branch-free and vectorises
 * (the update is memory-bound: ~28 bytes per parameter with bf16 grads). */
static inline float adamw_element(float g, float *w, float *m, float *v, float b1, float b2, float decay,
                                  float step_size, float inv_sqrt_bc2, float eps) {
    float mi = b1 * *m + (1.0f - b1) * g;
    float vi = b2 * *v + (1.0f - b2) * g * g;
    *m = mi;
    *v = vi;
    float wi = *w * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    *w = wi;
    return wi;
}

#define ADAMW_LOOP(GRAD_EXPR, WRITEBACK)                                                                     \
    _Pragma("omp parallel for schedule(static)") for (size_t i = 0; i < n; i++) {                            \
        float wi = adamw_element((GRAD_EXPR) * gs, &w[i], &m[i], &v[i], b1, b2, decay, step_size, isb, eps); \
        WRITEBACK;                                                                                           \
    }

struct adamw_step_consts adamw_step_consts(const struct adamw_hparams *h) {
    return (struct adamw_step_consts){.step_size = h->lr / (1.0f - powf(h->beta1, (float)h->t)),
                                      .isb = 1.0f / sqrtf(1.0f - powf(h->beta2, (float)h->t)),
                                      .decay = 1.0f - h->lr * h->weight_decay};
}

void adamw_update_cpu(const struct adamw_hparams *h, size_t n, float *w, float *m, float *v, const void *grad,
                      enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    const float b1 = h->beta1, b2 = h->beta2, eps = h->eps, gs = h->grad_scale;
    const struct adamw_step_consts c = adamw_step_consts(h);
    const float step_size = c.step_size, isb = c.isb, decay = c.decay;
    OPTIM_SPECIALISED_LOOPS(ADAMW_LOOP, grad, grad_dtype, out);
    fc->other += (double)ADAMW_FLOPS_PER_PARAM * (double)n;
}
