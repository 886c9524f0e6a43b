#include <math.h>

#include "optim.h"

float lr_at(const struct lr_options *c, int step) {
    if (step < c->warmup_steps) return c->lr * (float)(step + 1) / (float)c->warmup_steps;
    if (c->schedule == LR_CONSTANT) return c->lr;
    int decay_steps = c->steps - c->warmup_steps;
    if (decay_steps <= 1) return c->lr;
    double progress = (double)(step - c->warmup_steps) / (double)(decay_steps - 1);
    if (progress > 1.0) progress = 1.0;
    double min_lr = (double)c->lr * c->min_lr_frac;
    return (float)(min_lr + 0.5 * (1.0 + cos(M_PI * progress)) * ((double)c->lr - min_lr));
}
