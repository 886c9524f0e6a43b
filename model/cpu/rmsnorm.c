/* RMSNorm (Zhang & Sennrich 2019) over the channel dimension, as LLaMA 3
 * uses it (llm.c's train_llama3.py, Meta's reference): out = x rstd w with
 * rstd = 1 / sqrt(mean(x^2) + eps), eps from the model's config, no bias
 * and no mean subtracted. All in fp32. Each kernel is written once over
 * its activations' element types (act_io.h) and instantiated for fp32 and
 * for the bf16 saved tensors: the bf16 forms do the fp32 forms' operations
 * in the same order on the widened values, so they equal "widen, fp32
 * kernel, narrow" bit for bit (include/layers.h states their rounding
 * points). */
#include <math.h>

#include "act_io.h"
#include "layers_cpu.h"
#include "llama_layers.h"

#define RMSNORM_FORWARD(name, OUT_T, IN_T)                                                                       \
    void name(OUT_T *out, float *rstd, const IN_T *inp, const float *weight, float eps, int64_t N, int64_t C,    \
              struct exec_ctx *fc) {                                                                         \
        _Pragma("omp parallel for") for (int64_t i = 0; i < N; i++) {                                            \
            const IN_T *x = inp + i * C;                                                                         \
            float ms = 0.0f;                                                                                     \
            for (int64_t c = 0; c < C; c++) ms += ACT_LD(x, c) * ACT_LD(x, c);                                   \
            ms /= (float)C;                                                                                      \
            float s = 1.0f / sqrtf(ms + eps);                                                                    \
            OUT_T *o = out + i * C;                                                                              \
            for (int64_t c = 0; c < C; c++) ACT_ST(o, c, ACT_LD(x, c) * s * weight[c]);                          \
            rstd[i] = s;                                                                                         \
        }                                                                                                        \
        fc->other += (double)RMSNORM_FLOPS_FWD_PER_ELEM * N * C;                                                 \
    }

RMSNORM_FORWARD(rmsnorm_forward_cpu, float, float)
RMSNORM_FORWARD(rmsnorm_forward_bf16_cpu, bf16, bf16)

/* With xhat = x rstd and g = w dy: dx = rstd (g - xhat mean(g xhat)) (the
 * mean term is LayerNorm's without the centring), dw += sum_rows xhat dy.
 * dinp is accumulated (the residual stream's gradient passes through);
 * the weight gradient sums over rows, parallel over channels so no two
 * threads write the same element. */
#define RMSNORM_BACKWARD(name, DIN_T, IN_T)                                                                      \
    void name(DIN_T *dinp, float *dweight, const float *dout, const IN_T *inp, const float *weight,              \
              const float *rstd, int64_t N, int64_t C, struct exec_ctx *fc) {                                \
        _Pragma("omp parallel for") for (int64_t i = 0; i < N; i++) {                                            \
            const IN_T *x = inp + i * C;                                                                         \
            const float *dy = dout + i * C;                                                                      \
            float s = rstd[i], g_xhat_mean = 0.0f;                                                               \
            for (int64_t c = 0; c < C; c++) g_xhat_mean += weight[c] * dy[c] * (ACT_LD(x, c) * s);               \
            g_xhat_mean /= (float)C;                                                                             \
            DIN_T *dx = dinp + i * C;                                                                            \
            for (int64_t c = 0; c < C; c++) {                                                                    \
                float xhat = ACT_LD(x, c) * s;                                                                   \
                ACT_ST(dx, c, ACT_LD(dx, c) + s * (weight[c] * dy[c] - xhat * g_xhat_mean));                     \
            }                                                                                                    \
        }                                                                                                        \
        _Pragma("omp parallel for") for (int64_t c = 0; c < C; c++) {                                            \
            float dw = 0.0f;                                                                                     \
            for (int64_t i = 0; i < N; i++) dw += ACT_LD(inp, i * C + c) * rstd[i] * dout[i * C + c];            \
            dweight[c] += dw;                                                                                    \
        }                                                                                                        \
        fc->other += (double)RMSNORM_FLOPS_BWD_PER_ELEM * N * C;                                                 \
    }

RMSNORM_BACKWARD(rmsnorm_backward_cpu, float, float)
static RMSNORM_BACKWARD(rmsnorm_backward_bf16_f32, float, bf16)
static RMSNORM_BACKWARD(rmsnorm_backward_bf16_bf16, bf16, bf16)

void rmsnorm_backward_bf16_cpu(struct act_out dinp, float *dweight, const float *dout, const bf16 *inp,
                               const float *weight, const float *rstd, int64_t N, int64_t C, struct exec_ctx *fc) {
    if (dinp.b16) rmsnorm_backward_bf16_bf16(dinp.b16, dweight, dout, inp, weight, rstd, N, C, fc);
    else rmsnorm_backward_bf16_f32(dinp.f32, dweight, dout, inp, weight, rstd, N, C, fc);
}
