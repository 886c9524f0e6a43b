// GELU (GPT-2's tanh form) and the residual add on the device (layers.h;
// model/cpu/gelu.c). Elementwise, with fastmath_device.h's tanh and this
// file compiled with --fmad=false: each output is the CPU's bits.
#include "cuda_check.h"
#include "fastmath_device.h"
#include "layers_cuda.h"

namespace {

constexpr unsigned kBlock = 256;
#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f
enum { GELU_FLOPS_FWD = 8, GELU_FLOPS_BWD = 16 };  // as model/cpu/gelu.c counts

__global__ void gelu_fwd(float *out, const float *inp, int64_t n) {
    CUDA_GRID_STRIDE(i, n) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + dev_fast_tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x)));
    }
}

// dinp may alias dout: each element reads its dout before writing.
__global__ void gelu_bwd(float *dinp, const float *inp, const float *dout, int64_t n) {
    CUDA_GRID_STRIDE(i, n) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        float th = dev_fast_tanhf(u);
        float sech2 = 1.0f - th * th;
        float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
        dinp[i] = (0.5f * (1.0f + th) + 0.5f * x * sech2 * du) * dout[i];
    }
}

__global__ void residual_fwd(float *out, const float *a, const float *b, int64_t n) {
    CUDA_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

}  // namespace

extern "C" {

void cuda_gelu_forward(float *out, const float *inp, int64_t n, struct flop_counter *fc) {
    if (n > 0) {
        gelu_fwd<<<cuda_blocks(n, kBlock), kBlock>>>(out, inp, n);
        cuda_done("gelu_forward");
    }
    fc->other += (double)GELU_FLOPS_FWD * n;
}

void cuda_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n, struct flop_counter *fc) {
    if (n > 0) {
        gelu_bwd<<<cuda_blocks(n, kBlock), kBlock>>>(dinp, inp, dout, n);
        cuda_done("gelu_backward");
    }
    fc->other += (double)GELU_FLOPS_BWD * n;
}

void cuda_residual_forward(float *out, const float *a, const float *b, int64_t n, struct flop_counter *fc) {
    if (n > 0) {
        residual_fwd<<<cuda_blocks(n, kBlock), kBlock>>>(out, a, b, n);
        cuda_done("residual_forward");
    }
    fc->other += (double)n;
}

}  // extern "C"
