/* Softmax cross-entropy fused with its backward, as llm.c does: the logits
 * buffer (fp32, N x Vp) becomes dlogits in place, so no probability tensor
 * is ever stored. Padding columns V..Vp-1 are excluded from the softmax. */
#include <math.h>

#include "fastmath.h"
#include "layers.h"

enum { CE_FLOPS_PER_LOGIT = 6 };

double crossentropy_forward_backward(float *logits, float *losses, const int32_t *targets, int64_t N,
                                     int64_t V, int64_t Vp, float dloss, struct flop_counter *fc) {
    double total = 0.0;
#pragma omp parallel for reduction(+ : total)
    for (int64_t i = 0; i < N; i++) {
        float *l = logits + i * Vp;
        float maxv = -INFINITY;
        for (int64_t v = 0; v < V; v++) maxv = l[v] > maxv ? l[v] : maxv;
        float target_logit = l[targets[i]];
        float sum = 0.0f;
        if (dloss != 0.0f) {
            for (int64_t v = 0; v < V; v++) {
                l[v] = fast_expf(l[v] - maxv);
                sum += l[v];
            }
            float k = dloss / sum;
            for (int64_t v = 0; v < V; v++) l[v] *= k;
            l[targets[i]] -= dloss;
            for (int64_t v = V; v < Vp; v++) l[v] = 0.0f;
        } else {
            for (int64_t v = 0; v < V; v++) sum += fast_expf(l[v] - maxv);
        }
        losses[i] = logf(sum) + maxv - target_logit;
        total += losses[i];
    }
    fc->other += (double)CE_FLOPS_PER_LOGIT * N * V;
    return total;
}
