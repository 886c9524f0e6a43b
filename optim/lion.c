/* Lion (include/optim.h; Chen et al. 2023, arXiv:2302.06675, Program 1):
 * one fp32 momentum, an update of the same size lr on every element (the
 * sign of an interpolation of m and g), decoupled weight decay. */
#include "lion_rule.h"
#include "optim.h"
#include "elementwise_loops.h"

float lion_decay(const struct lion_hparams *h) { return 1.0f - h->lr * h->weight_decay; }

/* Specialised on grad dtype and writeback like adamw.c. */
#define LION_LOOP(GRAD_EXPR, WRITEBACK)                                                     \
    _Pragma("omp parallel for schedule(static)") for (size_t i = 0; i < n; i++) {           \
        float wi = lion_element((GRAD_EXPR) * gs, &w[i], &m[i], b1, b2, decay, lr);         \
        WRITEBACK;                                                                          \
    }

void lion_update_cpu(const struct lion_hparams *h, size_t n, float *w, float *m, const void *grad,
                     enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    const float lr = h->lr, b1 = h->beta1, b2 = h->beta2, gs = h->grad_scale, decay = lion_decay(h);
    OPTIM_SPECIALISED_LOOPS(LION_LOOP, grad, grad_dtype, out);
    fc->other += (double)LION_FLOPS_PER_PARAM * (double)n;
}
