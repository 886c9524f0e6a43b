/* GELU in GPT-2's tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
 * and the residual add. */
#include <math.h>

#include "act_io.h"
#include "dtype.h"
#include "fastmath.h"
#include "layers_cpu.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f

static inline float gelu_of(float x) {
    return 0.5f * x * (1.0f + fast_tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x)));
}

/* d gelu(x) / dx */
static inline float gelu_grad_of(float x) {
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    float th = fast_tanhf(u);
    float sech2 = 1.0f - th * th;
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
}

void gelu_forward_cpu(float *out, const float *inp, int64_t n, struct exec_ctx *fc) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) out[i] = gelu_of(inp[i]);
    fc->other += (double)GELU_FLOPS_FWD * n;
}

void gelu_backward_cpu(float *dinp, const float *inp, const float *dout, int64_t n, struct exec_ctx *fc) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) dinp[i] = gelu_grad_of(inp[i]) * dout[i];
    fc->other += (double)GELU_FLOPS_BWD * n;
}

void gelu_forward_bf16_cpu(bf16 *out, bf16 *pre_store, const float *pre, int64_t n, struct exec_ctx *fc) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) {
        bf16 p = f32_to_bf16(pre[i]);
        pre_store[i] = p;
        out[i] = f32_to_bf16(gelu_of(bf16_to_f32(p)));
    }
    fc->other += (double)GELU_FLOPS_FWD * n;
}

/* dinp = gelu'(inp) dout in fp32, inp read as IN_T, dout as D_T, dinp
 * stored as D_T (act_io.h: the bf16 gradient's one rounding). */
#define GELU_BACKWARD(name, IN_T, D_T)                                                                           \
    void name(D_T *dinp, const IN_T *inp, const D_T *dout, int64_t n, struct exec_ctx *fc) {                 \
        _Pragma("omp parallel for") for (int64_t i = 0; i < n; i++)                                              \
            ACT_ST(dinp, i, gelu_grad_of(ACT_LD(inp, i)) * ACT_LD(dout, i));                                    \
        fc->other += (double)GELU_FLOPS_BWD * n;                                                                 \
    }

GELU_BACKWARD(gelu_backward_bf16_cpu, bf16, float)
GELU_BACKWARD(gelu_backward_bf16_grads_cpu, bf16, bf16)

/* out = a + b in fp32, stored as OUT_T (act_io.h: the bf16 form's one
 * rounding), a read as A_T. */
#define RESIDUAL_FORWARD(name, OUT_T, A_T)                                                                       \
    void name(OUT_T *out, const A_T *a, const float *b, int64_t n, struct exec_ctx *fc) {                    \
        _Pragma("omp parallel for") for (int64_t i = 0; i < n; i++) ACT_ST(out, i, ACT_LD(a, i) + b[i]);         \
        fc->other += (double)n;                                                                                  \
    }

RESIDUAL_FORWARD(residual_forward_cpu, float, float)
RESIDUAL_FORWARD(residual_forward_bf16_cpu, bf16, bf16)
