/* GELU with bf16 in and out, forward and backward (issue 24, Deliver 2;
 * --gpu_path v2, gelu_bf16.cu; compiled, not run on a GPU): the bf16 data
 * path hands GELU the FC GEMM's output already rounded to bf16, and takes
 * its input gradient as bf16. Elementwise, the CPU's arithmetic
 * (model/cpu/gelu.c, GPT-2's tanh form with fastmath.h's tanh), so each
 * output is the CPU kernels' bits:
 *   forward:  out = bf16(gelu(pre)), pre widened exactly: gelu_forward_bf16
 *             on the widened pre (its pre_store then holds pre's own bits);
 *   backward: dinp = bf16(gelu'(inp) dout), inp and dout widened exactly:
 *             gelu_backward_bf16 on the widened dout, narrowed (dinp may
 *             alias dout). */
#ifndef SHARDLAB_V2_GELU_BF16_H
#define SHARDLAB_V2_GELU_BF16_H

#include "bf16_lanes.h"

#define V2_GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define V2_GELU_CUBIC 0.044715f

V2_HD float v2_gelu(float x) {
    return 0.5f * x * (1.0f + v2_tanhf(V2_GELU_SCALE * (x + V2_GELU_CUBIC * x * x * x)));
}

/* d gelu(x) / dx, model/cpu/gelu.c's gelu_grad_of */
V2_HD float v2_gelu_grad(float x) {
    float u = V2_GELU_SCALE * (x + V2_GELU_CUBIC * x * x * x);
    float th = v2_tanhf(u);
    float sech2 = 1.0f - th * th;
    float du = V2_GELU_SCALE * (1.0f + 3.0f * V2_GELU_CUBIC * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
}

V2_HD bf16 gelu_fwd_elem(bf16 pre) { return v2_round(v2_gelu(v2_widen(pre))); }
V2_HD bf16 gelu_bwd_elem(bf16 inp, bf16 dout) { return v2_round(v2_gelu_grad(v2_widen(inp)) * v2_widen(dout)); }

#ifdef __cplusplus
extern "C" {
#endif

/* n elements on the device, queued on the default stream. */
void gelu_forward_v2(bf16 *out, const bf16 *pre, int64_t n);
void gelu_backward_v2(bf16 *dinp, const bf16 *inp, const bf16 *dout, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
