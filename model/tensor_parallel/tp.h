/* Tensor parallelism for model/ (the room model/tensor_parallel/; what
 * other folders need of it, a rank's slices and the check that tp can
 * split a model, is include/tensor_parallel.h, slice.c). Private to
 * model/: model/gpt.c meets its tensor-parallel group only here, through
 * the group's collectives (include/collectives.h: function pointers, never
 * MPI, never parallel/). With one rank in the group (or no group: tp NULL)
 * every operator is the identity and moves no bytes.
 *
 * conjugates.c: Megatron-LM's conjugate operators (Shoeybi et al. 2019,
 * section 3, eq. 3 and Figure 3):
 *   f  forward: identity;     backward: all-reduce (sum) of the gradient.
 *      It sits before a column-parallel layer, whose input every rank
 *      holds whole and whose input gradient each rank holds a part of.
 *   g  forward: all-reduce;   backward: identity.
 *      It sits after a row-parallel layer, whose partial outputs sum.
 * and sequence parallelism's (Korthikanti et al. 2022, section 4.2.2 and
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
 * the two collectives run once per sequence on a whole (B,T,C) buffer
 * (Megatron's [s,b,h] layout makes the slice one block; the bytes are the
 * same). conj_* below choose between the two pairs (m->sp), so the layers
 * read the same either way. Without sp every one is what gpt.c called
 * before sp existed, on the same buffers, so tp without sp (and tp = 1) is
 * bitwise unchanged.
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
 * all-gather in backward is the 2 (tp-1)/tp M above).
 *
 * vocab_parallel.c: the vocabulary-parallel cross-entropy with the tied LM
 * head (Shoeybi et al. 2019, section 3: "we fuse the output of the
 * parallel GEMM with the cross entropy loss"). Each rank holds the logits
 * of its vocabulary slice, (N, Vp/tp); no rank ever holds a whole row.
 * Three collectives over the tp group, each N values:
 *   all-reduce MAX of the rows' maxima,
 *   all-reduce SUM of the rows' sums of exponentials and of the target's
 *   logit (only the slice holding the target adds it; one call of 2N),
 * so every rank gets the same loss, and its dlogits stay local. Columns of
 * global index >= V (the vocabulary padding, and the extra padding that
 * makes Vp a multiple of 128 tp) are outside the softmax and get dlogits 0,
 * exactly as crossentropy_forward_backward treats V..Vp. With tp = 1 (or
 * no group) it equals crossentropy_forward_backward bit for bit. */
#ifndef SHARDLAB_MODEL_TP_H
#define SHARDLAB_MODEL_TP_H

#include <stddef.h>
#include <stdint.h>

#include "collectives.h"
#include "counters.h"
#include "dtype.h"
#include "gpt.h"
#include "tensor_parallel.h"
#include "../parallel_points.h"

/* Megatron's f and g on n values of type dt (x whole on every rank). */
void tp_f_forward(struct collectives *tp, void *x, size_t n, enum dtype dt);
void tp_f_backward(struct collectives *tp, void *dx, size_t n, enum dtype dt);
void tp_g_forward(struct collectives *tp, void *x, size_t n, enum dtype dt);
void tp_g_backward(struct collectives *tp, void *dx, size_t n, enum dtype dt);

/* The choice, for model/gpt.c: f and g, or with sp (m->sp) g and g-bar. */
/* Before a column-parallel GEMM: its whole (B,T,C) input from the
 * LayerNorm output ln this rank holds: ln itself (f: identity), or with sp
 * g's all-gather into m->gathered. */
const float *conj_column_input(struct gpt *m, float *ln);
/* After a column-parallel GEMM's backward: d, whole and this rank's
 * features' part, summed over the group: f's all-reduce, or with sp g's
 * reduce-scatter, leaving this rank's slice at the start of d. */
void conj_column_grad(struct gpt *m, float *d);
/* After a row-parallel GEMM: out = the sum over the group of the partial
 * outputs in full (B,T,C): g's all-reduce in place (out must be full), or
 * with sp g-bar's reduce-scatter to this rank's slice (out may be full). */
void conj_row_output(struct gpt *m, float *full, float *out);
/* Before a row-parallel GEMM's backward: the whole gradient of its output
 * from m->dresid (this rank's part of the stream): dresid itself (g's
 * backward: identity), or with sp g-bar's all-gather into m->gathered. */
const float *conj_row_output_grad(struct gpt *m);

/* LayerNorm weight and bias gradients with sp are this slice's partial
 * sums: begin zeroes m->ln_grads, ln_grad says where gradient k (< 4) of a
 * micro-batch goes (dw_tensor itself without sp), and done all-reduces the
 * n of them over the group (one call) and adds them to dw_tensors[k].
 * The sum is the same on every rank, so replicated tensors stay equal. */
void conj_ln_grads_begin(struct gpt *m);
float *conj_ln_grad(struct gpt *m, float *dw_tensor, int k);
void conj_ln_grads_done(struct gpt *m, float *const *dw_tensors, int n);

/* The vocabulary-parallel cross-entropy: logits (N, Vl) become dlogits
 * when dloss != 0; losses (N) get the per-row losses; scratch: 2N floats.
 * Returns the sum of the N losses (identical on every rank of the group).
 * tp may be NULL (one rank). */
double vocab_parallel_crossentropy(struct collectives *tp, struct vocab_slice s, float *logits, float *losses,
                                   const int32_t *targets, int64_t N, float dloss, float *scratch,
                                   struct exec_ctx *fc);
/* The same over m's group and slice (the point of model/parallel_points.h). */
double tp_crossentropy(struct gpt *m, float *logits, float *losses, const int32_t *targets, int64_t N, float dloss,
                       float *scratch);

#endif
