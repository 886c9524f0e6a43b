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
 * by the opposite angle, sign -1. Each pair's two outputs are one fused
 * multiply-add apiece, x0 c - x1 s and x1 c + x0 s with the second product
 * rounded first, written out so the bits do not hang on how the compiler
 * vectorises: GCC 12's vector path of the pair-by-pair loop these replaced
 * contracted the same way (vfmaddsub), its scalar paths not always, so a
 * few values moved by an ulp (within the tests'). The pairs go ROPE_BLOCK
 * at a time: their cosines and sines into two small arrays, then each
 * head's 2 ROPE_BLOCK contiguous values read into a local block, rotated,
 * and stored, loops the compiler vectorises (a loop over the heads
 * innermost strides hs apart; the local block keeps out == inp from
 * forcing the compiler's aliasing fallback). 16 pairs: 16 fp32 cosines
 * fill a 512-bit register. */
enum { ROPE_BLOCK = 16 };

#define ROPE_ROTATE(name, OUT_T, IN_T)                                                                           \
    static void name(OUT_T *out, const IN_T *inp, int64_t ld, const float *freqs, const int32_t *pos, int64_t N, \
                     int64_t heads, int64_t hs, float sign) {                                                    \
        _Pragma("omp parallel for") for (int64_t r = 0; r < N; r++) {                                            \
            for (int64_t i0 = 0; i0 < hs / 2; i0 += ROPE_BLOCK) {                                                \
                const int64_t n = hs / 2 - i0 < ROPE_BLOCK ? hs / 2 - i0 : ROPE_BLOCK;                           \
                float cs[ROPE_BLOCK], sn[ROPE_BLOCK];                                                            \
                for (int64_t k = 0; k < n; k++) {                                                                \
                    float angle = (float)pos[r] * freqs[i0 + k];                                                 \
                    cs[k] = cosf(angle);                                                                         \
                    sn[k] = sign * sinf(angle);                                                                  \
                }                                                                                                \
                for (int64_t h = 0; h < heads; h++) {                                                            \
                    const int64_t e0 = r * ld + h * hs + 2 * i0;                                                 \
                    float x[2 * ROPE_BLOCK], y[2 * ROPE_BLOCK];                                                  \
                    for (int64_t k = 0; k < 2 * n; k++) x[k] = ACT_LD(inp, e0 + k);                              \
                    for (int64_t k = 0; k < n; k++) {                                                            \
                        y[2 * k] = fmaf(x[2 * k], cs[k], -(x[2 * k + 1] * sn[k]));                               \
                        y[2 * k + 1] = fmaf(x[2 * k + 1], cs[k], x[2 * k] * sn[k]);                              \
                    }                                                                                            \
                    for (int64_t k = 0; k < 2 * n; k++) ACT_ST(out, e0 + k, y[k]);                               \
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
