/* The vocabulary-parallel cross-entropy (tp.h; Shoeybi et al. 2019,
 * section 3): the local passes are kernels (layers.h); between them the
 * group agrees on each row's max, then on its sum of exponentials and its
 * target logit. */
#include "tp.h"

#include "layers.h"

double vocab_parallel_crossentropy(struct collectives *tp, struct vocab_slice s, float *logits, float *losses,
                                   const int32_t *targets, int64_t N, float dloss, float *scratch,
                                   struct exec_ctx *fc) {
    if (!tp || tp->size <= 1) /* one slice, the whole vocabulary: the fused form gives the three passes' bits in one */
        return crossentropy_forward_backward(logits, losses, targets, N, s.V, s.Vl, dloss, fc);
    int64_t valid = vocab_slice_real_rows(s); /* this slice's real tokens */
    float *maxv = losses; /* the row maxima live where the losses will: finish reads each before writing it */
    float *sum = scratch, *target = scratch + N;
    crossentropy_row_max(logits, maxv, N, s.Vl, valid, fc);
    tp->all_reduce_max(tp, maxv, (size_t)N, DTYPE_FP32);
    crossentropy_exp_sum(logits, maxv, sum, target, targets, N, s.Vl, s.v0, valid, dloss != 0.0f, fc);
    tp->all_reduce_sum(tp, scratch, 2 * (size_t)N, DTYPE_FP32); /* sums and target logits at once */
    return crossentropy_finish(logits, losses, maxv, sum, target, targets, N, s.Vl, s.v0, valid, dloss, fc);
}

/* The point model/gpt.c calls (model/parallel_points.h): this rank's slice, over its group. */
double tp_crossentropy(struct gpt *m, float *logits, float *losses, const int32_t *targets, int64_t N, float dloss,
                       float *scratch) {
    return vocab_parallel_crossentropy(m->tp, m->vocab, logits, losses, targets, N, dloss, scratch, m->flops);
}
