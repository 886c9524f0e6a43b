/* LayerNorm (Ba et al. 2016) over the channel dimension, eps = 1e-5 as in
 * GPT-2. Mean, then variance about the mean: two passes, all in fp32.
 * Each kernel is written once over its activations' element types
 * (act_io.h) and instantiated for fp32 and for the bf16 saved tensors:
 * the bf16 forms do the fp32 forms' operations in the same order on the
 * widened values, so they equal "widen, fp32 kernel, narrow" bit for bit
 * (include/layers.h states their rounding points). */
#include <math.h>

#include "act_io.h"
#include "layers_cpu.h"

#define LAYERNORM_FORWARD(name, OUT_T, IN_T)                                                                     \
    void name(OUT_T *out, float *mean, float *rstd, const IN_T *inp, const float *weight, const float *bias,     \
              int64_t N, int64_t C, struct exec_ctx *fc) {                                                   \
        const float eps = 1e-5f;                                                                                 \
        _Pragma("omp parallel for") for (int64_t i = 0; i < N; i++) {                                            \
            const IN_T *x = inp + i * C;                                                                         \
            float m = 0.0f;                                                                                      \
            for (int64_t c = 0; c < C; c++) m += ACT_LD(x, c);                                                   \
            m /= (float)C;                                                                                       \
            float v = 0.0f;                                                                                      \
            for (int64_t c = 0; c < C; c++) v += (ACT_LD(x, c) - m) * (ACT_LD(x, c) - m);                        \
            v /= (float)C;                                                                                       \
            float s = 1.0f / sqrtf(v + eps);                                                                     \
            OUT_T *o = out + i * C;                                                                              \
            for (int64_t c = 0; c < C; c++) ACT_ST(o, c, (ACT_LD(x, c) - m) * s * weight[c] + bias[c]);          \
            mean[i] = m;                                                                                         \
            rstd[i] = s;                                                                                         \
        }                                                                                                        \
        fc->other += (double)LN_FLOPS_FWD_PER_ELEM * N * C;                                                      \
    }

LAYERNORM_FORWARD(layernorm_forward_cpu, float, float)
LAYERNORM_FORWARD(layernorm_forward_bf16_cpu, bf16, bf16)

/* dx = rstd * (w*dy - mean(w*dy) - xhat * mean(w*dy*xhat)). The weight and
 * bias gradients sum over rows, parallel over channels so no two threads
 * write the same element. */
#define LAYERNORM_BACKWARD(name, DIN_T, IN_T)                                                                    \
    void name(DIN_T *dinp, float *dweight, float *dbias, const float *dout, const IN_T *inp, const float *weight, \
              const float *mean, const float *rstd, int64_t N, int64_t C, struct exec_ctx *fc) {             \
        _Pragma("omp parallel for") for (int64_t i = 0; i < N; i++) {                                            \
            const IN_T *x = inp + i * C;                                                                         \
            const float *dy = dout + i * C;                                                                      \
            float m = mean[i], s = rstd[i];                                                                      \
            float dnorm_mean = 0.0f, dnorm_xhat_mean = 0.0f;                                                     \
            for (int64_t c = 0; c < C; c++) {                                                                    \
                float xhat = (ACT_LD(x, c) - m) * s;                                                             \
                float dnorm = weight[c] * dy[c];                                                                 \
                dnorm_mean += dnorm;                                                                             \
                dnorm_xhat_mean += dnorm * xhat;                                                                 \
            }                                                                                                    \
            dnorm_mean /= (float)C;                                                                              \
            dnorm_xhat_mean /= (float)C;                                                                         \
            DIN_T *dx = dinp + i * C;                                                                            \
            for (int64_t c = 0; c < C; c++) {                                                                    \
                float xhat = (ACT_LD(x, c) - m) * s;                                                             \
                float dnorm = weight[c] * dy[c];                                                                 \
                ACT_ST(dx, c, ACT_LD(dx, c) + s * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean));                \
            }                                                                                                    \
        }                                                                                                        \
        _Pragma("omp parallel for") for (int64_t c = 0; c < C; c++) {                                            \
            float dw = 0.0f, db = 0.0f;                                                                          \
            for (int64_t i = 0; i < N; i++) {                                                                    \
                float dy = dout[i * C + c];                                                                      \
                dw += (ACT_LD(inp, i * C + c) - mean[i]) * rstd[i] * dy;                                         \
                db += dy;                                                                                        \
            }                                                                                                    \
            dweight[c] += dw;                                                                                    \
            dbias[c] += db;                                                                                      \
        }                                                                                                        \
        fc->other += (double)LN_FLOPS_BWD_PER_ELEM * N * C;                                                      \
    }

LAYERNORM_BACKWARD(layernorm_backward_cpu, float, float)
static LAYERNORM_BACKWARD(layernorm_backward_bf16_f32, float, bf16)
static LAYERNORM_BACKWARD(layernorm_backward_bf16_bf16, bf16, bf16)

void layernorm_backward_bf16_cpu(struct act_out dinp, float *dweight, float *dbias, const float *dout, const bf16 *inp,
                                 const float *weight, const float *mean, const float *rstd, int64_t N, int64_t C,
                                 struct exec_ctx *fc) {
    const char *op = "layernorm_backward_bf16";
    if (act_out_is_bf16(dinp))
        layernorm_backward_bf16_bf16(act_out_as_bf16(dinp, op), dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                                     fc);
    else layernorm_backward_bf16_f32(act_out_as_f32(dinp, op), dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                                     fc);
}
