/* Lion's per-element rule (include/optim.h; Chen et al. 2023, Program 1),
 * one source for lion.c and lion8bit.c. Private to optim/. */
#ifndef SHARDLAB_LION_RULE_H
#define SHARDLAB_LION_RULE_H

/* grad scale, interpolation (2 mul, add), sign, decay (mul), step (mul,
 * sub), momentum (2 mul, add) */
enum { LION_FLOPS_PER_PARAM = 11 };

/* torch.sign: -1, 0 or 1, and NaN stays NaN (c itself at 0 and NaN). */
static inline float lion_sign(float c) { return c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : c; }

/* decay = 1 - lr weight_decay, computed once per call. */
static inline float lion_element(float g, float *w, float *m, float b1, float b2, float decay, float lr) {
    const float c = b1 * *m + (1.0f - b1) * g;
    const float wi = *w * decay - lr * lion_sign(c);
    *m = b2 * *m + (1.0f - b2) * g;
    *w = wi;
    return wi;
}

#endif
