/* 8-bit SGD with momentum (include/optim.h): sgd.c's rule with the
 * momentum buffer stored block-wise in 8 bits (optim/blockwise8.c); within
 * a step the buffer is fp32. */
#include <math.h>

#include "blockwise8.h"
#include "sgd_rule.h"

/* sgd.c's count plus the codec's: dequantize (mul), absmax (max), the
 * divide by it and the rounding midpoint (add, halve). */
enum { SGD8BIT_FLOPS_PER_PARAM = SGD_FLOPS_PER_PARAM + 5 };

/* A NaN/Inf gradient zeroes the element's buffer and leaves its weight;
 * on the first step the stored buffer is not read (sgd.c's first_step). */
static void sgd8_block(const void *consts, size_t len, float *w, float *buf, const float *g) {
    const struct sgd_hparams *h = consts;
    for (size_t i = 0; i < len; i++) {
        float wi = w[i], bi = buf[i];
        sgd_element(g[i], &wi, &bi, h->momentum, h->weight_decay, h->lr, h->first_step, h->nesterov);
        const bool ok = isfinite(g[i]);
        buf[i] = ok ? bi : 0.0f;
        w[i] = ok ? wi : w[i];
    }
}

void sgd8bit_update_cpu(const struct sgd_hparams *h, size_t n, float *w, uint8_t *q, float *absmax,
                        const float *map_signed, const struct qmap_index *ix_signed, const void *grad,
                        enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    blockwise8_update_one_state(n, w, q, absmax, map_signed, ix_signed, grad, grad_dtype, h->grad_scale, out,
                                sgd8_block, h);
    fc->other += (double)SGD8BIT_FLOPS_PER_PARAM * (double)n;
}
