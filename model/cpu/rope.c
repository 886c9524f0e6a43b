/* Rotary position embeddings (Su et al. 2021, RoFormer) as LLaMA 3 applies
 * them (llm.c's train_llama3.py, Meta's reference): each head's interleaved
 * pairs (x[2i], x[2i+1]) are a complex number rotated by the angle
 * pos freq_i, freq_i = theta^(-2i/hs), optionally with LLaMA 3.1's
 * frequency scaling (the reference's apply_scaling). The angle is pos
 * freq_i rounded to fp32 and its cosine and sine are fp32, as the
 * reference's precompute_freqs_cis computes them (an fp32 outer product,
 * then torch.polar). Each row carries its own position, so a rank holding
 * any rows of a sequence (context parallelism) rotates them at their
 * global positions. */
#include <math.h>

#include "act_io.h"
#include "layers_cpu.h"
#include "llama_layers.h"

#define TWO_PI 6.283185307179586

/* LLaMA 3.1's piecewise rescaling of one frequency: wavelengths shorter
 * than original_context / high_freq_factor are kept, longer than
 * original_context / low_freq_factor divided by factor, and in between a
 * linear blend of the two in original_context / wavelength. Computed in
 * double, as the reference's Python floats, then rounded to fp32. */
static float scaled_freq(double freq, const struct rope_config *cfg) {
    double wavelen = TWO_PI / freq;
    double low_wavelen = cfg->original_context / cfg->low_freq_factor;
    double high_wavelen = cfg->original_context / cfg->high_freq_factor;
    if (wavelen < high_wavelen) return (float)freq;
    if (wavelen > low_wavelen) return (float)(freq / cfg->factor);
    double smooth = (cfg->original_context / wavelen - cfg->low_freq_factor) /
                    (cfg->high_freq_factor - cfg->low_freq_factor);
    return (float)((1.0 - smooth) * freq / cfg->factor + smooth * freq);
}

/* freq_i = 1 / theta^(2i / hs): the exponent and power in fp32 (the
 * reference's float tensors), the reciprocal in fp32. */
void rope_freqs(float *freqs, int64_t hs, const struct rope_config *cfg) {
    for (int64_t i = 0; i < hs / 2; i++) {
        float f = 1.0f / powf(cfg->theta, (float)(2 * i) / (float)hs);
        freqs[i] = cfg->scaled ? scaled_freq(f, cfg) : f;
    }
}

/* out = the rotation of inp by sign * pos freq, pair by pair, over `heads`
 * heads of hs at the start of each of N rows ld apart; out may be inp. A
 * pair's cosine and sine are computed once per row and serve every head.
 * Forward: sign +1; backward: the transpose of a rotation is the rotation
 * by the opposite angle, sign -1. */
#define ROPE_ROTATE(name, OUT_T, IN_T)                                                                           \
    static void name(OUT_T *out, const IN_T *inp, int64_t ld, const float *freqs, const int32_t *pos, int64_t N, \
                     int64_t heads, int64_t hs, float sign) {                                                    \
        _Pragma("omp parallel for") for (int64_t r = 0; r < N; r++) {                                            \
            for (int64_t i = 0; i < hs / 2; i++) {                                                               \
                float angle = (float)pos[r] * freqs[i];                                                          \
                float c = cosf(angle), s = sign * sinf(angle);                                                   \
                for (int64_t h = 0; h < heads; h++) {                                                            \
                    int64_t e = r * ld + h * hs + 2 * i;                                                         \
                    float x0 = ACT_LD(inp, e), x1 = ACT_LD(inp, e + 1);                                          \
                    ACT_ST(out, e, x0 * c - x1 * s);                                                             \
                    ACT_ST(out, e + 1, x0 * s + x1 * c);                                                         \
                }                                                                                                \
            }                                                                                                    \
        }                                                                                                        \
    }

ROPE_ROTATE(rope_rotate_f32, float, float)
ROPE_ROTATE(rope_rotate_bf16, bf16, bf16)

static double rope_flops(int64_t N, int64_t heads, int64_t hs) { return (double)ROPE_FLOPS_PER_ELEM * N * heads * hs; }

void rope_forward_cpu(float *out, const float *inp, int64_t ld, const float *freqs, const int32_t *pos, int64_t N,
                      int64_t heads, int64_t hs, struct exec_ctx *fc) {
    rope_rotate_f32(out, inp, ld, freqs, pos, N, heads, hs, 1.0f);
    fc->other += rope_flops(N, heads, hs);
}

void rope_backward_cpu(float *dinp, const float *dout, int64_t ld, const float *freqs, const int32_t *pos, int64_t N,
                       int64_t heads, int64_t hs, struct exec_ctx *fc) {
    rope_rotate_f32(dinp, dout, ld, freqs, pos, N, heads, hs, -1.0f);
    fc->other += rope_flops(N, heads, hs);
}

void rope_forward_bf16_cpu(bf16 *out, const bf16 *inp, int64_t ld, const float *freqs, const int32_t *pos, int64_t N,
                           int64_t heads, int64_t hs, struct exec_ctx *fc) {
    rope_rotate_bf16(out, inp, ld, freqs, pos, N, heads, hs, 1.0f);
    fc->other += rope_flops(N, heads, hs);
}

void rope_backward_bf16_cpu(bf16 *dinp, const bf16 *dout, int64_t ld, const float *freqs, const int32_t *pos,
                            int64_t N, int64_t heads, int64_t hs, struct exec_ctx *fc) {
    rope_rotate_bf16(dinp, dout, ld, freqs, pos, N, heads, hs, -1.0f);
    fc->other += rope_flops(N, heads, hs);
}
