/* Causal multi-head self-attention (Vaswani et al. 2017; GPT-2), the plain
 * way: the (T, T) probability matrix of every head is materialised and
 * saved for backward, which is the 5as^2b term of Korthikanti's formula
 * (2as^2b here: no dropout, only the probabilities are kept). Only the
 * causal half is computed, so the FLOPs counted are the causal ones. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "layers.h"

enum { SOFTMAX_FLOPS_PER_ELEM = 5 };

void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                       struct flop_counter *fc) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = (size_t)3 * C;
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    s *= scale;
                    a[t2] = s;
                    if (s > maxv) maxv = s;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    a[t2] = expf(a[t2] - maxv);
                    sum += a[t2];
                }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f;
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    for (int i = 0; i < hs; i++) o[i] += a[t2] * v[i];
                }
            }
    double kept = (double)B * NH * T * (T + 1) / 2; /* causal (query, key) pairs */
    fc->attention += 4.0 * kept * hs;                /* QK^T and AV, 2 FLOPs per MAC */
    fc->other += SOFTMAX_FLOPS_PER_ELEM * kept;
}

void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                        int B, int T, int C, int NH, struct flop_counter *fc) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = (size_t)3 * C;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            float *datt = scratch + (size_t)omp_get_thread_num() * T;
            for (int t = 0; t < T; t++) /* this (b, h) owns these slices of dq, dk, dv */
                for (int part = 0; part < 3; part++)
                    memset(dqkv + ((size_t)b * T + t) * C3 + (size_t)part * C + (size_t)h * hs, 0,
                           (size_t)hs * sizeof(float));
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float *dq = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float dot = 0.0f; /* sum_t2 a[t2] * datt[t2], the softmax backward's shift */
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float *dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) {
                        s += dy[i] * v[i];
                        dv[i] += a[t2] * dy[i];
                    }
                    datt[t2] = s;
                    dot += a[t2] * s;
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    float dpre = a[t2] * (datt[t2] - dot) * scale;
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    float *dk = dqkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += dpre * k[i];
                        dk[i] += dpre * q[i];
                    }
                }
            }
        }
    double kept = (double)B * NH * T * (T + 1) / 2;
    fc->attention += 8.0 * kept * hs; /* dS = dY V^T, dV = A^T dY, dQ = dS K, dK = dS^T Q */
    fc->other += SOFTMAX_FLOPS_PER_ELEM * kept;
}
