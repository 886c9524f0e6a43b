/* The plain attentions' causal softmax over a materialised (T, T) score
 * matrix, forward and backward (model/cpu/attention.c, GPT-2's heads, and
 * model/cpu/attention_gqa.c, LLaMA's grouped-query heads): one definition,
 * so the two give the same bits. Private to model/cpu/. */
#ifndef SHARDLAB_MODEL_CPU_CAUSAL_SOFTMAX_H
#define SHARDLAB_MODEL_CPU_CAUSAL_SOFTMAX_H

#include <math.h>
#include <stdint.h>

/* softmax: max, subtract and exp, sum, scale; its backward: the row's dot
 * product (2), then P (dP - dot) (2) */
enum { SOFTMAX_FORWARD_FLOPS = 5, SOFTMAX_BACKWARD_FLOPS = 4 };

/* Row t of p (T x T, scores in) keeps columns 0..t as softmax
 * probabilities; the masked columns t+1.. become exact zeros. */
static inline void causal_softmax_forward(float *p, int64_t T) {
    for (int64_t t = 0; t < T; t++) {
        float *row = p + t * T, maxv = -INFINITY, sum = 0.0f;
        for (int64_t t2 = 0; t2 <= t; t2++) maxv = row[t2] > maxv ? row[t2] : maxv;
        for (int64_t t2 = 0; t2 <= t; t2++) {
            row[t2] = expf(row[t2] - maxv);
            sum += row[t2];
        }
        float inv = 1.0f / sum;
        for (int64_t t2 = 0; t2 <= t; t2++) row[t2] *= inv;
        for (int64_t t2 = t + 1; t2 < T; t2++) row[t2] = 0.0f;
    }
}

/* d (T x T) holds dL/dP on entry and dL/dS on exit, dS = P (dP - sum_j
 * P_j dP_j) row by row; masked entries become exact zeros (the unmasked
 * formula would give P = 0 times dP there, which is NaN for an infinite dP). */
static inline void causal_softmax_backward(float *d, const float *p, int64_t T) {
    for (int64_t t = 0; t < T; t++) {
        float *row = d + t * T, dot = 0.0f;
        const float *pr = p + t * T;
        for (int64_t t2 = 0; t2 <= t; t2++) dot += pr[t2] * row[t2];
        for (int64_t t2 = 0; t2 <= t; t2++) row[t2] = pr[t2] * (row[t2] - dot);
        for (int64_t t2 = t + 1; t2 < T; t2++) row[t2] = 0.0f;
    }
}

#endif
