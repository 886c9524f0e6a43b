/* SGD with momentum, as PyTorch's torch.optim.SGD with dampening 0
 * (https://pytorch.org/docs/stable/generated/torch.optim.SGD.html):
 * weight decay is the coupled L2 form PyTorch uses (added to the gradient, so
 * momentum carries it), not AdamW's decoupled form. On the first step the
 * buffer is the gradient itself (PyTorch clones d_p); first_step does that
 * without reading buf, so it need not be zeroed. */
#include "optim.h"
#include "rng.h"

/* grad scale, L2 term (mul, add), buffer (mul, add), nesterov (mul, add), step (mul, sub) */
enum { SGD_FLOPS_PER_PARAM = 9 };

static inline float sgd_element(float g, float *w, float *buf, float mom, float wd, float lr, bool first,
                                bool nesterov) {
    const float gi = g + wd * *w;
    const float b = first ? gi : mom * *buf + gi;
    *buf = b;
    const float upd = nesterov ? gi + mom * b : b;
    const float wi = *w - lr * upd;
    *w = wi;
    return wi;
}

/* Specialised on grad dtype and writeback like adamw.c, so the loops carry
 * no per-element dispatch (first/nesterov are loop-invariant selects). */
#define SGD_LOOP(GRAD_EXPR, WRITEBACK)                                                                   \
    _Pragma("omp parallel for schedule(static)") for (size_t i = 0; i < n; i++) {                        \
        float wi = sgd_element((GRAD_EXPR) * gs, &w[i], &buf[i], mom, wd, lr, first, nesterov);          \
        WRITEBACK;                                                                                       \
    }

void sgd_update_cpu(const struct sgd_hparams *h, size_t n, float *w, float *buf, const void *grad,
                    enum dtype grad_dtype, const struct param_writeback *out, struct flop_counter *fc) {
    const float lr = h->lr, mom = h->momentum, wd = h->weight_decay, gs = h->grad_scale;
    const bool first = h->first_step, nesterov = h->nesterov;
    const float *g32 = grad;
    const bf16 *g16 = grad;
    bf16 *p = out->params;
    const uint64_t seed = out->seed, base = out->noise_index;
    if (!p) {
        if (grad_dtype == DTYPE_FP32) SGD_LOOP(g32[i], (void)wi)
        else SGD_LOOP(bf16_to_f32(g16[i]), (void)wi)
    } else if (out->rounding == ROUND_NEAREST) {
        if (grad_dtype == DTYPE_FP32) SGD_LOOP(g32[i], p[i] = f32_to_bf16(wi))
        else SGD_LOOP(bf16_to_f32(g16[i]), p[i] = f32_to_bf16(wi))
    } else {
        if (grad_dtype == DTYPE_FP32)
            SGD_LOOP(g32[i], p[i] = f32_to_bf16_stochastic(wi, rng_u32(seed, RNG_STREAM_ROUNDING, base + i)))
        else
            SGD_LOOP(bf16_to_f32(g16[i]),
                     p[i] = f32_to_bf16_stochastic(wi, rng_u32(seed, RNG_STREAM_ROUNDING, base + i)))
    }
    fc->other += (double)SGD_FLOPS_PER_PARAM * (double)n;
}
