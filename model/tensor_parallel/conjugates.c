/* The conjugate operators (tp.h): Megatron's f and g (Shoeybi et al.
 * 2019), sequence parallelism's g and g-bar (Korthikanti et al. 2022), and
 * the choice between the two pairs for model/gpt.c. */
#include "tp.h"

#include "bufops.h"

static void tp_all_reduce(struct collectives *tp, void *buf, size_t n, enum dtype dt) {
    if (tp && tp->size > 1) tp->all_reduce_sum(tp, buf, n, dt);
}

/* ---- Megatron's f and g ---- */

void tp_f_forward(struct collectives *tp, void *x, size_t n, enum dtype dt) {
    (void)tp, (void)x, (void)n, (void)dt; /* identity: every rank already holds x whole */
}

void tp_f_backward(struct collectives *tp, void *dx, size_t n, enum dtype dt) { tp_all_reduce(tp, dx, n, dt); }

void tp_g_forward(struct collectives *tp, void *x, size_t n, enum dtype dt) { tp_all_reduce(tp, x, n, dt); }

void tp_g_backward(struct collectives *tp, void *dx, size_t n, enum dtype dt) {
    (void)tp, (void)dx, (void)n, (void)dt; /* identity: the sum's gradient reaches each part unchanged */
}

/* ---- sequence parallelism's g and g-bar ----
 * A rank's slice is (B, T/tp, C): positions [tp_rank T/tp, (tp_rank+1)
 * T/tp) of each of the B sequences, stored contiguously; the whole (B,T,C)
 * buffer holds it at chunk tp_rank of every sequence, where the group's
 * all-gather expects it, and a reduce-scatter leaves the sums in each
 * sequence's first chunk. */

struct seq_split {
    struct collectives *tp; /* the group (size > 1) */
    int64_t B, T, C;        /* the whole tensor; T divisible by tp->size */
    enum mem_space space;   /* where the tensors live (bufops.h) */
};

static size_t seq_numel(const struct seq_split *s) { return (size_t)(s->T * s->C); }
static size_t chunk_numel(const struct seq_split *s) { return seq_numel(s) / (size_t)s->tp->size; }

/* The per-sequence collectives on a whole (B,T,C) buffer, one call per
 * sequence (each sequence's T x C values are tp chunks of T/tp tokens).
 * all-gather: chunk tp_rank of every sequence is this rank's on entry; on
 * return every chunk holds its owner's. reduce-scatter: on return the
 * first chunk of every sequence holds the sum over ranks of chunk tp_rank. */
static void seq_all_gather(const struct seq_split *s, float *full) {
    if (s->tp->size < 2) return;
    for (int64_t b = 0; b < s->B; b++)
        s->tp->all_gather(s->tp, full + (size_t)b * seq_numel(s), chunk_numel(s), DTYPE_FP32);
}

static void seq_reduce_scatter(const struct seq_split *s, float *full) {
    if (s->tp->size < 2) return;
    for (int64_t b = 0; b < s->B; b++)
        s->tp->reduce_scatter_sum(s->tp, full + (size_t)b * seq_numel(s), chunk_numel(s), DTYPE_FP32);
}

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

/* g forward, before a column-parallel GEMM: full (B,T,C) = every rank's
 * slice, all-gathered. slice must not overlap full. */
static void sp_g_forward(const struct seq_split *s, float *full, const float *slice) {
    place(s, full, slice);
    seq_all_gather(s, full);
}

/* g backward: dslice = this rank's rows of dfull summed over the ranks
 * (reduce-scatter); dfull is scratch afterwards. dslice may be dfull
 * itself (compacted in place) or a buffer outside it. */
static void sp_g_backward(const struct seq_split *s, float *dfull, float *dslice) {
    seq_reduce_scatter(s, dfull);
    take(s, dfull, dslice);
}

/* g-bar forward, after a row-parallel GEMM: slice = this rank's rows of
 * the partial sums in full, summed (reduce-scatter); as g backward. */
static void sp_gbar_forward(const struct seq_split *s, float *full, float *slice) {
    seq_reduce_scatter(s, full);
    take(s, full, slice);
}

/* g-bar backward: dfull = every rank's dslice, all-gathered; as g forward. */
static void sp_gbar_backward(const struct seq_split *s, float *dfull, const float *dslice) {
    place(s, dfull, dslice);
    seq_all_gather(s, dfull);
}

/* ---- the choice: f and g, or with sp g and g-bar ---- */

static size_t btc(const struct gpt *m) { return (size_t)m->B * m->shape.T * m->shape.C; }

static struct seq_split seq_split(const struct gpt *m) {
    return (struct seq_split){.tp = m->tp, .B = m->B, .T = m->shape.T, .C = m->shape.C, .space = m->space};
}

const float *conj_column_input(struct gpt *m, float *ln) {
    if (!m->sp) {
        tp_f_forward(m->tp, ln, btc(m), DTYPE_FP32);
        return ln;
    }
    struct seq_split q = seq_split(m);
    sp_g_forward(&q, m->gathered, ln);
    return m->gathered;
}

void conj_column_grad(struct gpt *m, float *d) {
    if (!m->sp) {
        tp_f_backward(m->tp, d, btc(m), DTYPE_FP32);
        return;
    }
    struct seq_split q = seq_split(m);
    sp_g_backward(&q, d, d);
}

void conj_row_output(struct gpt *m, float *full, float *out) {
    if (!m->sp) {
        tp_g_forward(m->tp, out, btc(m), DTYPE_FP32);
        return;
    }
    struct seq_split q = seq_split(m);
    sp_gbar_forward(&q, full, out);
}

const float *conj_row_output_grad(struct gpt *m) {
    if (!m->sp) {
        tp_g_backward(m->tp, m->dresid, btc(m), DTYPE_FP32);
        return m->dresid;
    }
    struct seq_split q = seq_split(m);
    sp_gbar_backward(&q, m->gathered, m->dresid);
    return m->gathered;
}

void conj_ln_grads_begin(struct gpt *m) {
    if (m->sp) buf_zero(m->space, m->ln_grads, 4 * (size_t)m->shape.C * sizeof(float));
}

float *conj_ln_grad(struct gpt *m, float *dw_tensor, int k) {
    return m->sp ? m->ln_grads + (size_t)k * m->shape.C : dw_tensor;
}

void conj_ln_grads_done(struct gpt *m, float *const *dw_tensors, int n) {
    if (!m->sp) return;
    size_t C = (size_t)m->shape.C;
    tp_all_reduce(m->tp, m->ln_grads, (size_t)n * C, DTYPE_FP32);
    for (int k = 0; k < n; k++) buf_add(m->space, dw_tensors[k], m->ln_grads + (size_t)k * C, DTYPE_FP32, C);
}

/* The room's table (model/parallel_points.h): what model/gpt.c calls at tp > 1. */
const struct tp_points TENSOR_PARALLEL_POINTS = {conj_column_input, conj_column_grad, conj_row_output,
                                                 conj_row_output_grad, conj_ln_grads_begin, conj_ln_grad,
                                                 conj_ln_grads_done, tp_crossentropy};
