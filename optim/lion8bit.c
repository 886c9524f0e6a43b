/* 8-bit Lion (include/optim.h): lion.c's rule with m stored block-wise in
 * 8 bits (optim/blockwise8.c); within a step m is fp32. */
#include <math.h>

#include "blockwise8.h"
#include "lion_rule.h"

/* lion.c's count plus the codec's: dequantize (mul), absmax (max), the
 * divide by it and the rounding midpoint (add, halve). */
enum { LION8BIT_FLOPS_PER_PARAM = LION_FLOPS_PER_PARAM + 5 };

struct lion8_consts {
    float lr, b1, b2, decay;
};

/* A NaN/Inf gradient zeroes the element's m and leaves its weight. */
static void lion8_block(const void *consts, size_t len, float *w, float *m, const float *g) {
    const struct lion8_consts *k = consts;
    for (size_t i = 0; i < len; i++) {
        float wi = w[i], mi = m[i];
        lion_element(g[i], &wi, &mi, k->b1, k->b2, k->decay, k->lr);
        const bool ok = isfinite(g[i]);
        m[i] = ok ? mi : 0.0f;
        w[i] = ok ? wi : w[i];
    }
}

void lion8bit_update_cpu(const struct lion_hparams *h, size_t n, float *w, uint8_t *q, float *absmax,
                         const float *map_signed, const struct qmap_index *ix_signed, const void *grad,
                         enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    const struct lion8_consts k = {.lr = h->lr, .b1 = h->beta1, .b2 = h->beta2, .decay = lion_decay(h)};
    blockwise8_update_one_state(n, w, q, absmax, map_signed, ix_signed, grad, grad_dtype, h->grad_scale, out,
                                lion8_block, &k);
    fc->other += (double)LION8BIT_FLOPS_PER_PARAM * (double)n;
}
