/* SGD with momentum, as PyTorch's torch.optim.SGD with dampening 0
 * (https://pytorch.org/docs/stable/generated/torch.optim.SGD.html):
 * weight decay is the coupled L2 form PyTorch uses (added to the gradient, so
 * momentum carries it), not AdamW's decoupled form. On the first step the
 * buffer is the gradient itself (PyTorch clones d_p); first_step does that
 * without reading buf, so it need not be zeroed. */
#include "optim.h"
#include "elementwise_loops.h"
#include "sgd_rule.h"

/* Specialised on grad dtype and writeback like adamw.c, so the loops carry
 * no per-element dispatch (first/nesterov are loop-invariant selects). */
#define SGD_LOOP(GRAD_EXPR, WRITEBACK)                                                                   \
    _Pragma("omp parallel for schedule(static)") for (size_t i = 0; i < n; i++) {                        \
        float wi = sgd_element((GRAD_EXPR) * gs, &w[i], &buf[i], mom, wd, lr, first, nesterov);          \
        WRITEBACK;                                                                                       \
    }

void sgd_update_cpu(const struct sgd_hparams *h, size_t n, float *w, float *buf, const void *grad,
                    enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    const float lr = h->lr, mom = h->momentum, wd = h->weight_decay, gs = h->grad_scale;
    const bool first = h->first_step, nesterov = h->nesterov;
    OPTIM_SPECIALISED_LOOPS(SGD_LOOP, grad, grad_dtype, out);
    fc->other += (double)SGD_FLOPS_PER_PARAM * (double)n;
}
