/* Megatron-LM's conjugate operators (Shoeybi et al. 2019, section 3, eq. 3
 * and Figure 3), over a tensor-parallel group's collectives:
 *   f  forward: identity;     backward: all-reduce (sum) of the gradient.
 *      It sits before a column-parallel layer, whose input every rank
 *      holds whole and whose input gradient each rank holds a part of.
 *   g  forward: all-reduce;   backward: identity.
 *      It sits after a row-parallel layer, whose partial outputs sum.
 * With one rank in the group both are identities and move no bytes. The
 * model reaches them through this header, never through MPI. */
#ifndef SHARDLAB_TENSOR_PARALLEL_H
#define SHARDLAB_TENSOR_PARALLEL_H

#include <stddef.h>

#include "collectives.h"

void tp_f_forward(struct collectives *tp, void *x, size_t n, enum dtype dt);
void tp_f_backward(struct collectives *tp, void *dx, size_t n, enum dtype dt);
void tp_g_forward(struct collectives *tp, void *x, size_t n, enum dtype dt);
void tp_g_backward(struct collectives *tp, void *dx, size_t n, enum dtype dt);

#endif
