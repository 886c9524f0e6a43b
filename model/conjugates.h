/* Where model/gpt.c meets its tensor-parallel group: the conjugate
 * operators around the split GEMMs, Megatron's f and g (Shoeybi et al.
 * 2019) or, with sequence parallelism (m->sp), g and g-bar (Korthikanti et
 * al. 2022), chosen here so the layers read the same either way. Without
 * sp every one is what gpt.c called before sp existed, on the same
 * buffers, so tp without sp (and tp = 1) is bitwise unchanged. Private to
 * model/. */
#ifndef SHARDLAB_MODEL_CONJUGATES_H
#define SHARDLAB_MODEL_CONJUGATES_H

#include "gpt.h"

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

#endif
