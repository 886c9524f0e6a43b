/* Sequence parallelism's conjugates g and g-bar (include/tensor_parallel.h;
 * Korthikanti et al. 2022, section 4.2.2) with the placement of a rank's
 * sequence slice inside a whole (B,T,C) buffer. A rank's slice is
 * (B, T/tp, C): positions [tp_rank T/tp, (tp_rank+1) T/tp) of each of the
 * B sequences, stored contiguously. Implemented in model/sequence_parallel.c
 * over the tp group's collectives. */
#ifndef SHARDLAB_SEQUENCE_PARALLEL_H
#define SHARDLAB_SEQUENCE_PARALLEL_H

#include <stdint.h>

#include "collectives.h"
#include "mem_space.h"

struct seq_split {
    struct collectives *tp; /* the group (size > 1) */
    int64_t B, T, C;        /* the whole tensor; T divisible by tp->size */
    enum mem_space space;   /* where the tensors live (bufops.h) */
};

/* g forward, before a column-parallel GEMM: full (B,T,C) = every rank's
 * slice, all-gathered. slice must not overlap full. */
void sp_g_forward(const struct seq_split *s, float *full, const float *slice);
/* g backward: dslice = this rank's rows of dfull summed over the ranks
 * (reduce-scatter); dfull is scratch afterwards. dslice may be dfull
 * itself (compacted in place) or a buffer outside it. */
void sp_g_backward(const struct seq_split *s, float *dfull, float *dslice);
/* g-bar forward, after a row-parallel GEMM: slice = this rank's rows of
 * the partial sums in full, summed (reduce-scatter); as g backward. */
void sp_gbar_forward(const struct seq_split *s, float *full, float *slice);
/* g-bar backward: dfull = every rank's dslice, all-gathered; as g forward. */
void sp_gbar_backward(const struct seq_split *s, float *dfull, const float *dslice);

#endif
