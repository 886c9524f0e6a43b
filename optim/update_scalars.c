/* The two scalars an update rule takes from the step (include/optim.h):
 * the learning rate at a step (linear warmup, then constant or cosine decay
 * to min_lr_frac of lr) and the clip scale of global-norm clipping (Pascanu
 * et al. 2013: gradients scaled by max_norm / ||g|| when ||g|| > max_norm).
 * Every rank computes both alike, from the step and the all-reduced norm. */
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

float clip_scale(double global_norm, float max_norm) {
    if (max_norm <= 0.0f || !(global_norm > max_norm)) return 1.0f;
    return (float)(max_norm / global_norm);
}
