/* Tensor parallelism across folders: what one rank of a tensor-parallel
 * group holds (whether tp ranks can split a model at all is the layout's
 * rule: tp_divides, include/layout.h). The room is
 * model/tensor_parallel/ (docs/TP.md): slice.c implements this header;
 * Megatron's f and g, sequence parallelism's g and g-bar and the
 * vocabulary-parallel cross-entropy, which only model/ calls, are in
 * model/tensor_parallel/tp.h. The split rule of every tensor (column, row,
 * vocab, replicated) is the layout table's (include/layout.h); the slices
 * here are what those rules give one tp rank:
 *   heads      NH/tp heads, [tp_rank NH/tp, (tp_rank+1) NH/tp): its
 *              q, k and v rows of the column-parallel QKV, its C/tp
 *              input features of the row-parallel attention projection;
 *   FC         4C/tp features, [tp_rank 4C/tp, ...): rows of the column-
 *              parallel FC, input features of the row-parallel projection;
 *   vocabulary Vp/tp rows of wte and columns of the logits, from
 *              tp_rank Vp/tp (Vp: V padded to a multiple of 128 tp by the
 *              layout); rows at or past V are padding;
 *   positions  with sequence parallelism (Korthikanti et al. 2022) T/tp
 *              positions of every sequence, [tp_rank T/tp, ...); without,
 *              all T. */
#ifndef SHARDLAB_TENSOR_PARALLEL_H
#define SHARDLAB_TENSOR_PARALLEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"

/* The vocabulary rows of wte (and logit columns) of one tp rank. */
struct vocab_slice {
    int64_t V;    /* the real vocabulary */
    int64_t Vl;   /* columns per rank (the padded vocabulary / tp) */
    int64_t v0;   /* this rank's first column: tp_rank x Vl */
};

/* What one tp rank holds of every layer and of the sequence. */
struct tp_slice {
    int head0, heads;         /* heads [head0, head0 + heads) */
    int features;             /* attention width C/tp: its heads' features */
    int fc0, fc;              /* FC features [fc0, fc0 + fc) of 4C */
    int position0, positions; /* positions [position0, position0 + positions) of each sequence */
    struct vocab_slice vocab;
};

/* The slices of lay's tp rank (lay->rank.tp_rank of lay->rank.tp, over
 * lay->shape, whose Vp the layout padded for tp); positions as sequence
 * parallelism cuts them when sequence_parallel. */
struct tp_slice tp_rank_slice(const struct model_layout *lay, bool sequence_parallel);
/* Its vocabulary rows alone. */
struct vocab_slice tp_vocab_slice(const struct model_layout *lay);
/* How many of the slice's rows lie inside the real vocabulary (< V): the
 * rest are padding, out of the softmax, zero and never trained. Only the
 * last tp ranks hold padding; at tp = 4 a rank can hold nothing else. */
int64_t vocab_slice_real_rows(struct vocab_slice s);

#endif
