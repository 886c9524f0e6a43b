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

/* A row's sum over its C channels (the forward's sum of squares, the
 * backward's mean term) as RMSNORM_LANES running sums, channel c in lane
 * c % RMSNORM_LANES, added in lane order at the end: one running sum makes
 * each add wait on the last, 768 adds in a chain per row; sixteen fp32
 * lanes are one 512-bit register and let the compiler vectorise. With the
 * weight gradient's blocks below, the RMSNorm rows of a LLaMA 124M step
 * (B 4, T 256, 2 cores) fell from about 35 to 9 ms. The sums differ from
 * the one chain's in the last bits (fp32 rounding, within the tests'). The
 * order is fixed by C alone (any thread count, every instance alike: the
 * bf16 forms still equal widen, fp32, narrow). TERM is an expression in
 * the channel index c. */
enum { RMSNORM_LANES = 16 };

#define RMSNORM_ROW_SUM(out, C, TERM)                                                                            \
    do {                                                                                                         \
        float lane_[RMSNORM_LANES] = {0};                                                                        \
        int64_t c0_ = 0;                                                                                         \
        for (; c0_ + RMSNORM_LANES <= (C); c0_ += RMSNORM_LANES)                                                 \
            for (int64_t k_ = 0; k_ < RMSNORM_LANES; k_++) {                                                     \
                const int64_t c = c0_ + k_;                                                                      \
                lane_[k_] += (TERM);                                                                             \
            }                                                                                                    \
        for (int64_t c = c0_; c < (C); c++) lane_[c - c0_] += (TERM);                                            \
        (out) = 0.0f;                                                                                            \
        for (int64_t k_ = 0; k_ < RMSNORM_LANES; k_++) (out) += lane_[k_];                                       \
    } while (0)

#define RMSNORM_FORWARD(name, OUT_T, IN_T)                                                                       \
    void name(OUT_T *out, float *rstd, const IN_T *inp, const float *weight, float eps, int64_t N, int64_t C,    \
              struct exec_ctx *fc) {                                                                         \
        _Pragma("omp parallel for") for (int64_t i = 0; i < N; i++) {                                            \
            const IN_T *x = inp + i * C;                                                                         \
            float ms;                                                                                            \
            RMSNORM_ROW_SUM(ms, C, ACT_LD(x, c) * ACT_LD(x, c));                                                 \
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

/* The weight gradient's threads each own a block of RMSNORM_DW_COLS
 * channels and walk the rows in order, the block's sums side by side: each
 * channel's sum is the same sequence of adds as a loop over its column (the
 * same bits), but a row's block is contiguous, so the adds run as vectors
 * instead of one strided column at a time. 32 fp32 sums: two 512-bit
 * registers; C 768 gives 24 blocks to share among the threads. */
enum { RMSNORM_DW_COLS = 32 };

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
            float s = rstd[i], g_xhat_mean;                                                                      \
            RMSNORM_ROW_SUM(g_xhat_mean, C, weight[c] * dy[c] * (ACT_LD(x, c) * s));                             \
            g_xhat_mean /= (float)C;                                                                             \
            DIN_T *dx = dinp + i * C;                                                                            \
            for (int64_t c = 0; c < C; c++) {                                                                    \
                float xhat = ACT_LD(x, c) * s;                                                                   \
                ACT_ST(dx, c, ACT_LD(dx, c) + s * (weight[c] * dy[c] - xhat * g_xhat_mean));                     \
            }                                                                                                    \
        }                                                                                                        \
        _Pragma("omp parallel for") for (int64_t c0 = 0; c0 < C; c0 += RMSNORM_DW_COLS) {                        \
            const int64_t w = C - c0 < RMSNORM_DW_COLS ? C - c0 : RMSNORM_DW_COLS;                               \
            float dw[RMSNORM_DW_COLS] = {0};                                                                     \
            for (int64_t i = 0; i < N; i++) {                                                                    \
                const IN_T *x = inp + i * C + c0;                                                                \
                const float *dy = dout + i * C + c0;                                                             \
                for (int64_t c = 0; c < w; c++) dw[c] += ACT_LD(x, c) * rstd[i] * dy[c];                         \
            }                                                                                                    \
            for (int64_t c = 0; c < w; c++) dweight[c0 + c] += dw[c];                                            \
        }                                                                                                        \
        fc->other += (double)RMSNORM_FLOPS_BWD_PER_ELEM * N * C;                                                 \
    }

RMSNORM_BACKWARD(rmsnorm_backward_cpu, float, float)
static RMSNORM_BACKWARD(rmsnorm_backward_bf16_f32, float, bf16)
static RMSNORM_BACKWARD(rmsnorm_backward_bf16_bf16, bf16, bf16)

void rmsnorm_backward_bf16_cpu(struct act_out dinp, float *dweight, const float *dout, const bf16 *inp,
                               const float *weight, const float *rstd, int64_t N, int64_t C, struct exec_ctx *fc) {
    const char *op = "rmsnorm_backward_bf16";
    if (act_out_is_bf16(dinp))
        rmsnorm_backward_bf16_bf16(act_out_as_bf16(dinp, op), dweight, dout, inp, weight, rstd, N, C, fc);
    else rmsnorm_backward_bf16_f32(act_out_as_f32(dinp, op), dweight, dout, inp, weight, rstd, N, C, fc);
}
