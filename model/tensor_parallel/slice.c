/* A tensor-parallel rank's slices (include/tensor_parallel.h): its heads
 * and FC features (Shoeybi et al. 2019, section 3: the column-parallel
 * GEMMs split their outputs, the row-parallel ones their inputs), its
 * vocabulary rows (the vocabulary-parallel embedding and head), its
 * sequence positions (Korthikanti et al. 2022, section 4.2.2), from a
 * layout that tp cuts (tp_divides, model/layout.c). */
#include "tensor_parallel.h"

#include <stdio.h>

struct vocab_slice tp_vocab_slice(const struct model_layout *lay) {
    int64_t Vl = lay->shape.Vp / lay->rank.tp;
    return (struct vocab_slice){.V = lay->shape.V, .Vl = Vl, .v0 = (int64_t)lay->rank.tp_rank * Vl};
}

int64_t vocab_slice_real_rows(struct vocab_slice s) {
    int64_t real = s.V - s.v0;
    return real < 0 ? 0 : real > s.Vl ? s.Vl : real;
}

struct tp_slice tp_rank_slice(const struct model_layout *lay, bool sequence_parallel) {
    const struct model_shape *s = &lay->shape;
    int tp = lay->rank.tp, r = lay->rank.tp_rank;
    int heads = s->NH / tp, fc = mlp_width(s) / tp, positions = sequence_parallel ? s->T / tp : s->T;
    return (struct tp_slice){.head0 = r * heads, .heads = heads, .features = s->C / tp, .fc0 = r * fc, .fc = fc,
                             .position0 = sequence_parallel ? r * positions : 0, .positions = positions,
                             .vocab = tp_vocab_slice(lay)};
}
