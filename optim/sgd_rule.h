/* SGD with momentum's per-element rule (include/optim.h), one source for
 * sgd.c and sgd8bit.c. Private to optim/. */
#ifndef SHARDLAB_SGD_RULE_H
#define SHARDLAB_SGD_RULE_H

#include <stdbool.h>

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

#endif
