/* Update rules on a contiguous range of a flat buffer (a whole model, or the
 * shard a rank owns), plus the LR schedule and global-norm clipping. The
 * caller walks the layout's tensor table so each call sees one tensor (or the
 * part of it inside a shard) and knows whether it decays. */
#ifndef SHARDLAB_OPTIM_H
#define SHARDLAB_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "counters.h"
#include "dtype.h"

struct adamw_hparams {
    float lr, beta1, beta2, eps;
    float weight_decay;  /* 0 for tensors that do not decay */
    float grad_scale;    /* multiplies every gradient (clipping) */
    int64_t t;           /* 1-based step, for bias correction */
};

/* Where the updated fp32 weights go besides w itself: nowhere (fp32 params
 * are w), or rounded into bf16 params (nearest-even, or stochastic with
 * noise drawn from (seed, step, element index)). */
struct param_writeback {
    bf16 *params;             /* NULL: w are the params */
    enum rounding_mode rounding;
    uint64_t seed;
    uint64_t noise_index;     /* global element index of element 0 of this range */
};

/* AdamW (Loshchilov & Hutter 2019) as PyTorch does it: decoupled decay
 * w -= lr*wd*w first, then the bias-corrected Adam step. grad is in
 * grad_dtype; m, v and w are fp32. */
void adamw_update(const struct adamw_hparams *h, size_t n, float *w, float *m, float *v, const void *grad,
                  enum dtype grad_dtype, const struct param_writeback *out, struct flop_counter *fc);

/* Learning rate for 0-based step: linear warmup to lr, then constant or
 * cosine decay to lr * min_lr_frac at the last step. */
float lr_at(const struct config *c, int step);

/* Sum of squares of a gradient range, accumulated in double. */
double grad_sum_squares(const void *grad, enum dtype grad_dtype, size_t n);

/* Factor that brings the global norm down to max_norm (1 when max_norm is 0
 * or the norm is already within it). */
float clip_scale(double global_norm, float max_norm);

#endif
