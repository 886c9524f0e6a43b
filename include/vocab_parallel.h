/* Vocabulary-parallel cross-entropy with the tied LM head (Megatron-LM,
 * Shoeybi et al. 2019, section 3: "we fuse the output of the parallel GEMM
 * with the cross entropy loss"). Each tensor-parallel rank holds the
 * logits of its vocabulary slice, (N, Vp/tp); no rank ever holds a whole
 * row. Three collectives over the tp group, each N values:
 *   all-reduce MAX of the rows' maxima,
 *   all-reduce SUM of the rows' sums of exponentials and of the target's
 *   logit (only the slice holding the target adds it; one call of 2N),
 * so every rank gets the same loss, and its dlogits stay local. Columns of
 * global index >= V (the vocabulary padding, and the extra padding that
 * makes Vp a multiple of 128 tp) are outside the softmax and get dlogits 0,
 * exactly as crossentropy_forward_backward treats V..Vp. With tp = 1 (or
 * no group) it equals crossentropy_forward_backward bit for bit. */
#ifndef SHARDLAB_VOCAB_PARALLEL_H
#define SHARDLAB_VOCAB_PARALLEL_H

#include <stdint.h>

#include "collectives.h"
#include "counters.h"

struct vocab_slice {
    int64_t V;    /* the real vocabulary */
    int64_t Vl;   /* columns per rank (the padded vocabulary / tp) */
    int64_t v0;   /* this rank's first column: tp_rank x Vl */
};

/* logits (N, Vl) become dlogits when dloss != 0; losses (N) get the per-row
 * losses; scratch: 2N floats. Returns the sum of the N losses (identical on
 * every rank of the group). tp may be NULL (one rank). */
double vocab_parallel_crossentropy(struct collectives *tp, struct vocab_slice s, float *logits, float *losses,
                                   const int32_t *targets, int64_t N, float dloss, float *scratch,
                                   struct flop_counter *fc);

#endif
