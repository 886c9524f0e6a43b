/* A rank's tensor as runs contiguous in the whole model's reference
 * numbering (include/layout.h), for checkpoints, which hold tensors in that
 * order. With tp = 1, or for a replicated tensor, the whole tensor is one
 * run. A tensor-parallel slice is contiguous row by row, except where a
 * row is cut into sections (the QKV bias: q, k and v each give one piece
 * per rank), and rows of tp's extra vocabulary padding map past ref_total:
 * they are in no checkpoint. */
#ifndef SHARDLAB_REF_RUNS_H
#define SHARDLAB_REF_RUNS_H

#include <stddef.h>

#include "layout.h"

/* The run that starts at this rank's element i of tensor t (i <
 * t->numel): its length (>= 1) and, in *ref, the reference index of its
 * first element (>= lay->ref_total: padding, in no file). */
size_t ref_run(const struct model_layout *lay, const struct tensor_info *t, size_t i, size_t *ref);

#endif
