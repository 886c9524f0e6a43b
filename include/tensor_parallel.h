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
 * never into parallel/.
 *
 * Sequence parallelism (Korthikanti et al. 2022, section 4.2.2 and
 * Figure 5; --sequence_parallel 1). The LayerNorms, the residual adds, the
 * row-parallel biases and the embedding's wpe run on this rank's slice of
 * the sequence, (B, T/tp, C); the conjugates then become, in the paper's
 * names,
 *   g     forward: all-gather along the sequence; backward: reduce-scatter.
 *         It replaces f before a column-parallel GEMM (QKV, FC, the head's
 *         logits): the GEMM needs every token, its input gradient is
 *         summed over the ranks' features and left on the slice.
 *   g-bar forward: reduce-scatter along the sequence; backward: all-gather.
 *         It replaces g after a row-parallel GEMM (the two projections,
 *         the vocabulary-parallel embedding): the partial sums are summed
 *         and each rank keeps its slice.
 * (all-reduce = reduce-scatter + all-gather, so the pair moves what one
 * all-reduce did.) A (B,T,C) tensor is row-major, so a rank's slice of a
 * sequence is one block of T/tp x C values in each of the B sequences:
 * the two collectives below run once per sequence on a whole (B,T,C)
 * buffer (Megatron's [s,b,h] layout makes the slice one block; the bytes
 * are the same). The placement of the slice inside the whole buffer is
 * model/sequence_parallel.c's.
 *
 * Bytes per layer per micro-batch (the tp group's counters, a ring's
 * (tp-1)/tp per collective, M = B T C x 4 bytes: activations travel in
 * fp32), measured by tests/mpi/test_tensor_parallel.c (test_sp_bytes):
 *   tp, no sp:  4 all-reduces                      8 (tp-1)/tp M
 *   tp + sp:    2 g + 2 g-bar forward, the same     8 (tp-1)/tp M
 *               backward, + 2 all-gathers that
 *               re-gather ln1 and ln2 for the
 *               weight gradients (below)          + 2 (tp-1)/tp M
 *               + the LayerNorm weight and bias
 *               gradients' all-reduce (4C fp32)    + 2 (tp-1)/tp 16 C
 *   full recompute adds the recomputed forward: 1 all-reduce (no sp), or
 *   2 g + 1 g-bar (sp).
 * Measured (B 2, T 16, C 48: M = 6144 bytes; bytes each rank sends per
 * layer per micro-batch, equal to the formula):
 *              no sp   sp (AG + RS + LN all-reduce)   full recompute: no sp, sp
 *   tp 2       24576   18432 + 12288 +  768 = 31488   30720, 40704
 *   tp 4       36864   27648 + 18432 + 1152 = 47232   46080, 61056
 * The gathered LayerNorm output is not kept: a rank saves only its slice
 * of ln1 and ln2 and gathers them again in the backward, which is the
 * paper's Table 2 row "tensor + sequence parallel", 34 sbh / t (its extra
 * all-gather in backward is the 2 (tp-1)/tp M above). */
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

/* Sequence parallelism's two collectives on a whole (B,T,C) buffer, one
 * call per sequence (each sequence's T x C values are tp chunks of T/tp
 * tokens). all-gather: chunk tp_rank of every sequence is this rank's on
 * entry; on return every chunk holds its owner's. reduce-scatter: on
 * return the first chunk of every sequence holds the sum over ranks of
 * chunk tp_rank. Identities in a group of one. */
static inline void tp_seq_all_gather(struct collectives *tp, float *full, size_t B, size_t TC) {
    if (!tp || tp->size < 2) return;
    for (size_t b = 0; b < B; b++) tp->all_gather(tp, full + b * TC, TC / (size_t)tp->size, DTYPE_FP32);
}

static inline void tp_seq_reduce_scatter(struct collectives *tp, float *full, size_t B, size_t TC) {
    if (!tp || tp->size < 2) return;
    for (size_t b = 0; b < B; b++) tp->reduce_scatter_sum(tp, full + b * TC, TC / (size_t)tp->size, DTYPE_FP32);
}

static inline void tp_sp_g_forward(struct collectives *tp, float *full, size_t B, size_t TC) {
    tp_seq_all_gather(tp, full, B, TC);
}

static inline void tp_sp_g_backward(struct collectives *tp, float *dfull, size_t B, size_t TC) {
    tp_seq_reduce_scatter(tp, dfull, B, TC);
}

static inline void tp_sp_gbar_forward(struct collectives *tp, float *full, size_t B, size_t TC) {
    tp_seq_reduce_scatter(tp, full, B, TC);
}

static inline void tp_sp_gbar_backward(struct collectives *tp, float *dfull, size_t B, size_t TC) {
    tp_seq_all_gather(tp, dfull, B, TC);
}

#endif
