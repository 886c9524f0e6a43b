/* The optimizer's view of a rank's work: every (tensor ∩ update range) in
 * unit order. The update range of a unit is the whole unit at ZeRO-0 and
 * this rank's slice otherwise, so a segment never crosses a tensor (weight
 * decay and 8-bit eligibility are per tensor), a section of one (QKV's q, k,
 * v) nor a shard boundary (8-bit blocks start at a segment's first element). The engine walks these to
 * update; the accounting walks the same list to predict the bytes. */
#ifndef SHARDLAB_SEGMENTS_H
#define SHARDLAB_SEGMENTS_H

#include <stdbool.h>
#include <stddef.h>

#include "layout.h"
#include "optim.h"
#include "shard.h"
#include "zero_stages.h"

enum { OPT8_BLOCK = 256 }; /* elements per 8-bit block (bitsandbytes >= 0.44) */

struct opt_segment {
    int unit;
    int tensor;           /* its tensor in the layout's table (layout_tensor) */
    size_t lo, hi;        /* unit-local element range */
    size_t global;        /* reference index of element lo (stochastic-rounding noise; tp = 1: contiguous) */
    size_t state_at;      /* element lo in the master weights and fp32 optimizer states (full or shard) */
    bool decay;           /* weight decay applies (matrices, unless decay_targets = all) */
    bool quantized;       /* an 8-bit rule, tensor of >= min_8bit_size elements */
    bool tp_replicated;   /* every rank of the tensor-parallel group holds the same tensor (norms, biases of
                           * row-parallel layers, wpe): the gradient norm counts it once */
    size_t q_offset;      /* quantized: first code in the uint8 state arrays */
    size_t block_offset;  /* quantized: first absmax */
    size_t f32_offset;    /* not quantized (an 8-bit rule): first element of the fp32 states */
};

struct opt_segments {
    struct opt_segment *seg;
    int n;
    size_t n_q, n_blocks, n_f32; /* 8-bit rules' state sizes (per state) */
};

/* Segments at most: one per tensor section (QKV's q, k and v are cut
 * apart, so an 8-bit block never mixes them: their gradients differ by
 * orders of magnitude, and at tp > 1 a rank's q, k and v slices need not
 * be multiples of a block). */
size_t opt_segments_capacity(const struct model_layout *lay);
/* Fills s over `table`, which has room for opt_segments_capacity(lay)
 * segments; the caller owns it. */
void opt_segments_build(struct opt_segments *s, struct opt_segment *table, const struct model_layout *lay,
                        const struct shard_layout *sh, const struct zero_stage *row, const struct optim_options *o);

#endif
