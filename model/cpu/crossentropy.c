/* Softmax cross-entropy fused with its backward, as llm.c does: the logits
 * buffer (fp32, N x Vp) becomes dlogits in place, so no probability tensor
 * is ever stored. Padding columns V..Vp-1 are excluded from the softmax.
 * The bf16 logits' form has no host kernel (below). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fastmath.h"
#include "layers_cpu.h"

/* The rows' losses summed in row order, after the parallel loop: a
 * reduction clause adds the threads' partial sums, whose grouping follows
 * the team's size (docs/THREADS.md: a run's numbers do not). */
static double rows_total(const float *losses, int64_t N) {
    double total = 0.0;
    for (int64_t i = 0; i < N; i++) total += losses[i];
    return total;
}

/* The bf16 logits' form on the host: none. The CPU's head keeps fp32
 * logits (model/gpt_acts.c: acts_logits_bf16), so a call here is a caller
 * bug, stopped by name (the device's order is replayed in the tests:
 * tests/device_replays.h). */
double crossentropy_forward_backward_bf16_cpu(bf16 *logits, float *losses, const int32_t *targets, int64_t N,
                                              int64_t V, int64_t Vp, float dloss, struct exec_ctx *fc) {
    (void)logits, (void)losses, (void)targets, (void)N, (void)V, (void)Vp, (void)dloss, (void)fc;
    fprintf(stderr, "error: crossentropy_forward_backward_bf16: bf16 logits on the host, whose head keeps fp32 "
                    "logits\n");
    exit(EXIT_FAILURE);
}

double crossentropy_forward_backward_cpu(float *logits, float *losses, const int32_t *targets, int64_t N,
                                         int64_t V, int64_t Vp, float dloss, struct exec_ctx *fc) {
#pragma omp parallel for
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
    }
    fc->other += (double)CE_FLOPS_PER_LOGIT * N * V;
    return rows_total(losses, N);
}

/* ---- the vocabulary-parallel passes (layers.h); the same arithmetic as
 * above, in the same order, cut where the collectives go */

void crossentropy_row_max_cpu(const float *logits, float *maxv, int64_t N, int64_t Vl, int64_t valid,
                              struct exec_ctx *fc) {
    (void)fc; /* crossentropy_finish counts the whole softmax's FLOPs */
#pragma omp parallel for
    for (int64_t i = 0; i < N; i++) {
        const float *l = logits + i * Vl;
        float m = -INFINITY;
        for (int64_t v = 0; v < valid; v++) m = l[v] > m ? l[v] : m;
        maxv[i] = m;
    }
}

void crossentropy_exp_sum_cpu(float *logits, const float *maxv, float *sum, float *target, const int32_t *targets,
                              int64_t N, int64_t Vl, int64_t v0, int64_t valid, bool in_place, struct exec_ctx *fc) {
    (void)fc; /* crossentropy_finish counts the whole softmax's FLOPs */
#pragma omp parallel for
    for (int64_t i = 0; i < N; i++) {
        float *l = logits + i * Vl, s = 0.0f, m = maxv[i];
        int64_t t = (int64_t)targets[i] - v0;
        target[i] = t >= 0 && t < valid ? l[t] : 0.0f; /* only the slice that holds it adds it */
        if (in_place) {
            for (int64_t v = 0; v < valid; v++) {
                l[v] = fast_expf(l[v] - m);
                s += l[v];
            }
        } else {
            for (int64_t v = 0; v < valid; v++) s += fast_expf(l[v] - m);
        }
        sum[i] = s;
    }
}

double crossentropy_finish_cpu(float *logits, float *losses, const float *maxv, const float *sum, const float *target,
                               const int32_t *targets, int64_t N, int64_t Vl, int64_t v0, int64_t valid, float dloss,
                               struct exec_ctx *fc) {
#pragma omp parallel for
    for (int64_t i = 0; i < N; i++) {
        float *l = logits + i * Vl;
        if (dloss != 0.0f) {
            float k = dloss / sum[i];
            for (int64_t v = 0; v < valid; v++) l[v] *= k;
            int64_t t = (int64_t)targets[i] - v0;
            if (t >= 0 && t < valid) l[t] -= dloss;
            for (int64_t v = valid; v < Vl; v++) l[v] = 0.0f;
        }
        losses[i] = logf(sum[i]) + maxv[i] - target[i];
    }
    fc->other += (double)CE_FLOPS_PER_LOGIT * N * valid;
    return rows_total(losses, N);
}
