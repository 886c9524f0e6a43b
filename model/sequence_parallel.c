/* g and g-bar of sequence parallelism (include/sequence_parallel.h): the
 * per-sequence collectives of include/tensor_parallel.h, and the copies
 * that put a rank's slice where they expect it and take it back. */
#include "sequence_parallel.h"

#include "bufops.h"
#include "tensor_parallel.h"

static size_t seq_numel(const struct seq_split *s) { return (size_t)(s->T * s->C); }
static size_t chunk_numel(const struct seq_split *s) { return seq_numel(s) / (size_t)s->tp->size; }

/* The slice into chunk tp_rank of every sequence of full. */
static void place(const struct seq_split *s, float *full, const float *slice) {
    size_t tc = seq_numel(s), chunk = chunk_numel(s);
    for (int64_t b = 0; b < s->B; b++)
        buf_copy(s->space, full + (size_t)b * tc + (size_t)s->tp->rank * chunk, slice + (size_t)b * chunk,
                 chunk * sizeof *full);
}

/* The first chunk of every sequence of full (where a reduce-scatter leaves
 * this rank's sums) into the slice. In place (slice == full) source and
 * destination never overlap: b = 0 is already where it belongs, and for
 * b >= 1 the source b tc starts at least a chunk past the destination
 * b chunk (tc >= 2 chunk when tp >= 2). */
static void take(const struct seq_split *s, float *full, float *slice) {
    size_t tc = seq_numel(s), chunk = chunk_numel(s);
    for (int64_t b = 0; b < s->B; b++)
        if (slice + (size_t)b * chunk != full + (size_t)b * tc)
            buf_copy(s->space, slice + (size_t)b * chunk, full + (size_t)b * tc, chunk * sizeof *full);
}

void sp_g_forward(const struct seq_split *s, float *full, const float *slice) {
    place(s, full, slice);
    tp_sp_g_forward(s->tp, full, (size_t)s->B, seq_numel(s));
}

void sp_g_backward(const struct seq_split *s, float *dfull, float *dslice) {
    tp_sp_g_backward(s->tp, dfull, (size_t)s->B, seq_numel(s));
    take(s, dfull, dslice);
}

void sp_gbar_forward(const struct seq_split *s, float *full, float *slice) {
    tp_sp_gbar_forward(s->tp, full, (size_t)s->B, seq_numel(s));
    take(s, full, slice);
}

void sp_gbar_backward(const struct seq_split *s, float *dfull, const float *dslice) {
    place(s, dfull, dslice);
    tp_sp_gbar_backward(s->tp, dfull, (size_t)s->B, seq_numel(s));
}
