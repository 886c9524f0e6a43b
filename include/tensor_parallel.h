/* Megatron-LM's conjugate operators (Shoeybi et al. 2019, section 3, eq. 3
 * and Figure 3), over a tensor-parallel group's collectives:
 *   f  forward: identity;     backward: all-reduce (sum) of the gradient.
 *      It sits before a column-parallel layer, whose input every rank
 *      holds whole and whose input gradient each rank holds a part of.
 *   g  forward: all-reduce;   backward: identity.
 *      It sits after a row-parallel layer, whose partial outputs sum.
 * With one rank in the group (or no group: tp NULL) both are identities
 * and move no bytes. Header-only, so the model (model/gpt.c) calls them
 * through the collectives table's function pointers, never through MPI and
 * never into parallel/. */
#ifndef SHARDLAB_TENSOR_PARALLEL_H
#define SHARDLAB_TENSOR_PARALLEL_H

#include <stddef.h>

#include "collectives.h"

static inline void tp_all_reduce(struct collectives *tp, void *buf, size_t n, enum dtype dt) {
    if (tp && tp->size > 1) tp->all_reduce_sum(tp, buf, n, dt);
}

static inline void tp_f_forward(struct collectives *tp, void *x, size_t n, enum dtype dt) {
    (void)tp, (void)x, (void)n, (void)dt; /* identity: every rank already holds x whole */
}

static inline void tp_f_backward(struct collectives *tp, void *dx, size_t n, enum dtype dt) {
    tp_all_reduce(tp, dx, n, dt);
}

static inline void tp_g_forward(struct collectives *tp, void *x, size_t n, enum dtype dt) {
    tp_all_reduce(tp, x, n, dt);
}

static inline void tp_g_backward(struct collectives *tp, void *dx, size_t n, enum dtype dt) {
    (void)tp, (void)dx, (void)n, (void)dt; /* identity: the sum's gradient reaches each part unchanged */
}

#endif
