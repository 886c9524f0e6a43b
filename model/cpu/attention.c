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

void attention_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       struct flop_counter *fc) {
    const int64_t hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(3)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t t = 0; t < T; t++) {
                const float *q = qkv + (b * T + t) * C3 + h * hs;
                float *a = att + ((b * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int64_t t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + (b * T + t2) * C3 + C + h * hs;
                    float s = 0.0f;
                    for (int64_t i = 0; i < hs; i++) s += q[i] * k[i];
                    s *= scale;
                    a[t2] = s;
                    if (s > maxv) maxv = s;
                }
                float sum = 0.0f;
                for (int64_t t2 = 0; t2 <= t; t2++) {
                    a[t2] = expf(a[t2] - maxv);
                    sum += a[t2];
                }
                float inv = 1.0f / sum;
                for (int64_t t2 = 0; t2 <= t; t2++) a[t2] *= inv;
                for (int64_t t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f;
                float *o = out + (b * T + t) * C + h * hs;
                for (int64_t i = 0; i < hs; i++) o[i] = 0.0f;
                for (int64_t t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + (b * T + t2) * C3 + 2 * C + h * hs;
                    for (int64_t i = 0; i < hs; i++) o[i] += a[t2] * v[i];
                }
            }
    double kept = (double)B * NH * T * (T + 1) / 2; /* causal (query, key) pairs */
    fc->attention += 4.0 * kept * hs;                /* QK^T and AV, 2 FLOPs per MAC */
    fc->other += SOFTMAX_FLOPS_PER_ELEM * kept;
}

void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                        int64_t B, int64_t T, int64_t C, int64_t NH, struct flop_counter *fc) {
    const int64_t hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++) {
            float *datt = scratch + (int64_t)omp_get_thread_num() * T;
            for (int64_t t = 0; t < T; t++) /* this (b, h) owns these slices of dq, dk, dv */
                for (int64_t part = 0; part < 3; part++)
                    memset(dqkv + (b * T + t) * C3 + part * C + h * hs, 0, (size_t)hs * sizeof(float));
            for (int64_t t = 0; t < T; t++) {
                const float *a = att + ((b * NH + h) * T + t) * T;
                const float *dy = dout + (b * T + t) * C + h * hs;
                const float *q = qkv + (b * T + t) * C3 + h * hs;
                float *dq = dqkv + (b * T + t) * C3 + h * hs;
                float dot = 0.0f; /* sum_t2 a[t2] * datt[t2], the softmax backward's shift */
                for (int64_t t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + (b * T + t2) * C3 + 2 * C + h * hs;
                    float *dv = dqkv + (b * T + t2) * C3 + 2 * C + h * hs;
                    float s = 0.0f;
                    for (int64_t i = 0; i < hs; i++) {
                        s += dy[i] * v[i];
                        dv[i] += a[t2] * dy[i];
                    }
                    datt[t2] = s;
                    dot += a[t2] * s;
                }
                for (int64_t t2 = 0; t2 <= t; t2++) {
                    float dpre = a[t2] * (datt[t2] - dot) * scale;
                    const float *k = qkv + (b * T + t2) * C3 + C + h * hs;
                    float *dk = dqkv + (b * T + t2) * C3 + C + h * hs;
                    for (int64_t i = 0; i < hs; i++) {
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
