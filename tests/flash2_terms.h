/* The size of the terms that dq and dk sum, the scale flash2.h's bound
 * holds their errors against (tests/test_flash2_replay.c on the CPU,
 * tests/cuda/test_flash2_cuda.c on a GPU).
 *
 * dS_ij = P_ij (dP_ij - D_i) with dP_ij = v_j . dout_i and D_i = dout_i .
 * out_i. The kernels round dout to bf16 before dP, which moves dP_ij by
 * about 2^-9 of its terms' root sum of squares whatever dP_ij - D_i is:
 * where the two nearly cancel (a peaked softmax at small T; at T = 1
 * exactly, since P = 1 and dP = D) dS carries that error undiminished, and
 * so do dq = scale dS K and dk = scale dS^T Q. So the errors are measured
 * against the terms, not only against the result:
 *   dq: max over (i, d) of scale sum_j P_ij A_ij |k_jd|
 *   dk: max over (j, d) of scale sum_i P_ij A_ij |q_id|
 *   A_ij = |dP_ij - D_i| + sqrt(sum_e (v_je dout_ie)^2)
 * with P from the CPU's lse and out the CPU's. Without cancellation this
 * is about max |dq| (max |dk|); with it, larger. The replay over 120 seeds
 * at the tests' shapes: errors at most 5.3e-3 of this scale (bound 1.4e-2),
 * a dQ partial from the wrong key block at least 6.1e-2. Summing |terms|
 * instead of the root of their squares made the scale about ten times
 * max |dq| and the bound toothless. */
#ifndef SHARDLAB_TESTS_FLASH2_TERMS_H
#define SHARDLAB_TESTS_FLASH2_TERMS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "dtype.h"

struct flash2_terms {
    double dq, dk;
};

/* qkv (B T, 3 C) bf16, dout (B T, C) fp32, out (B T, C) bf16, lse
 * (B, NH, T) in natural-log units: the CPU's forms. */
static inline struct flash2_terms flash2_term_sizes(const bf16 *qkv, const float *dout, const bf16 *out,
                                                    const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH) {
    const int64_t hs = C / NH;
    const double scale = 1.0 / sqrt((double)hs);
    double *tq = malloc((size_t)(T * hs) * sizeof *tq), *tk = malloc((size_t)(T * hs) * sizeof *tk);
    struct flash2_terms s = {0.0, 0.0};
    if (!tq || !tk) abort();
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++) {
            for (int64_t i = 0; i < T * hs; i++) tq[i] = tk[i] = 0.0;
            for (int64_t i = 0; i < T; i++) {
                const bf16 *q = qkv + (b * T + i) * 3 * C + h * hs, *o = out + (b * T + i) * C + h * hs;
                const float *dy = dout + (b * T + i) * C + h * hs;
                double D = 0.0;
                for (int64_t e = 0; e < hs; e++) D += (double)dy[e] * bf16_to_f32(o[e]);
                for (int64_t j = 0; j <= i; j++) {
                    const bf16 *k = qkv + (b * T + j) * 3 * C + C + h * hs, *v = k + C;
                    double qk = 0.0, dp = 0.0, dp_terms = 0.0;
                    for (int64_t e = 0; e < hs; e++) {
                        qk += (double)bf16_to_f32(q[e]) * bf16_to_f32(k[e]);
                        dp += (double)bf16_to_f32(v[e]) * dy[e];
                        dp_terms += ((double)bf16_to_f32(v[e]) * dy[e]) * ((double)bf16_to_f32(v[e]) * dy[e]);
                    }
                    const double a = fabs(dp - D) + sqrt(dp_terms);
                    const double w = exp(qk * scale - lse[(b * NH + h) * T + i]) * a * scale;
                    for (int64_t d = 0; d < hs; d++) {
                        tq[i * hs + d] += w * fabs(bf16_to_f32(k[d]));
                        tk[j * hs + d] += w * fabs(bf16_to_f32(q[d]));
                    }
                }
            }
            for (int64_t i = 0; i < T * hs; i++) s.dq = fmax(s.dq, tq[i]), s.dk = fmax(s.dk, tk[i]);
        }
    free(tq), free(tk);
    return s;
}

#endif
