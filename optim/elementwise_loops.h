/* The six specialisations of an element-wise update rule's loop (adamw.c,
 * sgd.c, lion.c): grad fp32 or bf16, times no writeback, nearest-even bf16
 * params or stochastically rounded ones, so each loop is branch-free and
 * vectorises. Private to optim/. */
#ifndef SHARDLAB_ELEMENTWISE_LOOPS_H
#define SHARDLAB_ELEMENTWISE_LOOPS_H

#include "dtype.h"
#include "optim.h"
#include "rng.h"

/* LOOP(GRAD_EXPR, WRITEBACK) is the rule's loop over i in [0, n), with
 * the element's gradient GRAD_EXPR and, after the update of wi, WRITEBACK.
 * grad, grad_dtype and out are the rule's arguments. */
#define OPTIM_SPECIALISED_LOOPS(LOOP, grad, grad_dtype, out)                                                   \
    do {                                                                                                      \
        const float *g32 = (grad);                                                                            \
        const bf16 *g16 = (grad);                                                                             \
        bf16 *p = (out)->params;                                                                              \
        const uint64_t seed = (out)->seed, base = (out)->noise_index;                                         \
        (void)g32, (void)g16, (void)seed, (void)base;                                                         \
        if (!p) {                                                                                             \
            if ((grad_dtype) == DTYPE_FP32) LOOP(g32[i], (void)wi)                                            \
            else LOOP(bf16_to_f32(g16[i]), (void)wi)                                                          \
        } else if ((out)->rounding == ROUND_NEAREST) {                                                        \
            if ((grad_dtype) == DTYPE_FP32) LOOP(g32[i], p[i] = f32_to_bf16(wi))                              \
            else LOOP(bf16_to_f32(g16[i]), p[i] = f32_to_bf16(wi))                                            \
        } else {                                                                                              \
            if ((grad_dtype) == DTYPE_FP32)                                                                   \
                LOOP(g32[i], p[i] = f32_to_bf16_stochastic(wi, rng_u32(seed, RNG_STREAM_ROUNDING, base + i))) \
            else                                                                                              \
                LOOP(bf16_to_f32(g16[i]),                                                                     \
                     p[i] = f32_to_bf16_stochastic(wi, rng_u32(seed, RNG_STREAM_ROUNDING, base + i)))         \
        }                                                                                                     \
    } while (0)

#endif
