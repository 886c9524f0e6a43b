/* LayerNorm (Ba et al. 2016) over the channel dimension, eps = 1e-5 as in
 * GPT-2. Mean, then variance about the mean: two passes, all in fp32. */
#include <math.h>

#include "layers.h"

enum { LN_FLOPS_FWD_PER_ELEM = 7, LN_FLOPS_BWD_PER_ELEM = 12 };

void layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                           const float *bias, int64_t N, int64_t C, struct flop_counter *fc) {
    const float eps = 1e-5f;
#pragma omp parallel for
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C;
        float m = 0.0f;
        for (int64_t c = 0; c < C; c++) m += x[c];
        m /= (float)C;
        float v = 0.0f;
        for (int64_t c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= (float)C;
        float s = 1.0f / sqrtf(v + eps);
        float *o = out + i * C;
        for (int64_t c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[i] = m;
        rstd[i] = s;
    }
    fc->other += (double)LN_FLOPS_FWD_PER_ELEM * N * C;
}

void layernorm_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, const float *mean, const float *rstd, int64_t N, int64_t C,
                            struct flop_counter *fc) {
    /* dx = rstd * (w*dy - mean(w*dy) - xhat * mean(w*dy*xhat)) */
#pragma omp parallel for
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C, *dy = dout + i * C;
        float m = mean[i], s = rstd[i];
        float dnorm_mean = 0.0f, dnorm_xhat_mean = 0.0f;
        for (int64_t c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float dnorm = weight[c] * dy[c];
            dnorm_mean += dnorm;
            dnorm_xhat_mean += dnorm * xhat;
        }
        dnorm_mean /= (float)C;
        dnorm_xhat_mean /= (float)C;
        float *dx = dinp + i * C;
        for (int64_t c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float dnorm = weight[c] * dy[c];
            dx[c] += s * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean);
        }
    }
    /* Weight and bias gradients sum over rows; parallel over channels so no
     * two threads write the same element. */
#pragma omp parallel for
    for (int64_t c = 0; c < C; c++) {
        float dw = 0.0f, db = 0.0f;
        for (int64_t i = 0; i < N; i++) {
            float dy = dout[i * C + c];
            dw += (inp[i * C + c] - mean[i]) * rstd[i] * dy;
            db += dy;
        }
        dweight[c] += dw;
        dbias[c] += db;
    }
    fc->other += (double)LN_FLOPS_BWD_PER_ELEM * N * C;
}
