// GELU (GPT-2's tanh form) and the residual add on the device (layers.h;
// model/cpu/gelu.c), and GELU's forms on the saved bf16 copies (rounding
// and packing in the same pass). Elementwise, with fastmath_device.h's tanh
// and this file compiled with --fmad=false: each output is the CPU's bits.
#include <cuda_bf16.h>
#include <stdint.h>

#include "cuda_check.h"
#include "fastmath_device.h"
#include "layers_cuda.h"

namespace {

constexpr unsigned kBlock = 256;
#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f

__device__ __forceinline__ float gelu_of(float x) {
    return 0.5f * x * (1.0f + dev_fast_tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x)));
}

// d gelu(x) / dx, as model/cpu/gelu.c's gelu_grad_of
__device__ __forceinline__ float gelu_grad_of(float x) {
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    float th = dev_fast_tanhf(u);
    float sech2 = 1.0f - th * th;
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
}

__global__ void gelu_fwd(float *out, const float *inp, int64_t n) {
    CUDA_GRID_STRIDE(i, n) out[i] = gelu_of(inp[i]);
}

// dinp may alias dout: each element reads its dout before writing.
__global__ void gelu_bwd(float *dinp, const float *inp, const float *dout, int64_t n) {
    CUDA_GRID_STRIDE(i, n) dinp[i] = gelu_grad_of(inp[i]) * dout[i];
}

// The bf16-store forms (layers.h), element i of [i0, n) each...
__device__ __forceinline__ void gelu_fwd_one(__nv_bfloat16 *out, __nv_bfloat16 *pre_store, const float *pre,
                                             int64_t i) {
    __nv_bfloat16 p = __float2bfloat16_rn(pre[i]);
    pre_store[i] = p;
    out[i] = __float2bfloat16_rn(gelu_of(__bfloat162float(p)));
}

__global__ void gelu_fwd_bf16(__nv_bfloat16 *out, __nv_bfloat16 *pre_store, const float *pre, int64_t i0,
                              int64_t n) {
    CUDA_GRID_STRIDE(j, n - i0) gelu_fwd_one(out, pre_store, pre, i0 + j);
}

// ... and four a thread (one float4 of pre; the tensors are B T 4C values a layer).
__global__ void gelu_fwd_bf16x4(__nv_bfloat162 *out, __nv_bfloat162 *pre_store, const float4 *pre, int64_t n4) {
    CUDA_GRID_STRIDE(i, n4) {
        const float4 v = pre[i];
        const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
        pre_store[2 * i] = a;
        pre_store[2 * i + 1] = b;
        out[2 * i] = __floats2bfloat162_rn(gelu_of(__low2float(a)), gelu_of(__high2float(a)));
        out[2 * i + 1] = __floats2bfloat162_rn(gelu_of(__low2float(b)), gelu_of(__high2float(b)));
    }
}

__global__ void gelu_bwd_bf16(float *dinp, const __nv_bfloat16 *inp, const float *dout, int64_t i0, int64_t n) {
    CUDA_GRID_STRIDE(j, n - i0) {
        const int64_t i = i0 + j;
        dinp[i] = gelu_grad_of(__bfloat162float(inp[i])) * dout[i];
    }
}

__global__ void gelu_bwd_bf16x4(float4 *dinp, const __nv_bfloat162 *inp, const float4 *dout, int64_t n4) {
    CUDA_GRID_STRIDE(i, n4) {
        const __nv_bfloat162 a = inp[2 * i], b = inp[2 * i + 1];
        const float4 d = dout[i];
        dinp[i] = make_float4(gelu_grad_of(__low2float(a)) * d.x, gelu_grad_of(__high2float(a)) * d.y,
                              gelu_grad_of(__low2float(b)) * d.z, gelu_grad_of(__high2float(b)) * d.w);
    }
}

// How many leading elements the four-a-thread kernels take: all but a
// tail of n % 4, when every pointer allows the vector accesses (a view
// may start anywhere).
int64_t vector_part(int64_t n, const void *f32a, const void *f32b, const void *bf16a, const void *bf16b) {
    bool ok = (uintptr_t)f32a % 16 == 0 && (uintptr_t)f32b % 16 == 0 && (uintptr_t)bf16a % 8 == 0 &&
              (uintptr_t)bf16b % 8 == 0;
    return ok ? n / 4 * 4 : 0;
}

__global__ void residual_fwd(float *out, const float *a, const float *b, int64_t n) {
    CUDA_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

}  // namespace

extern "C" {

void gelu_forward_cuda(float *out, const float *inp, int64_t n, struct exec_ctx *fc) {
    if (n > 0) {
        gelu_fwd<<<cuda_blocks(n, kBlock), kBlock>>>(out, inp, n);
        cuda_done("gelu_forward");
    }
    fc->other += (double)GELU_FLOPS_FWD * n;
}

void gelu_backward_cuda(float *dinp, const float *inp, const float *dout, int64_t n, struct exec_ctx *fc) {
    if (n > 0) {
        gelu_bwd<<<cuda_blocks(n, kBlock), kBlock>>>(dinp, inp, dout, n);
        cuda_done("gelu_backward");
    }
    fc->other += (double)GELU_FLOPS_BWD * n;
}

void gelu_forward_bf16_cuda(uint16_t *out, uint16_t *pre_store, const float *pre, int64_t n,
                            struct exec_ctx *fc) {
    __nv_bfloat16 *o = (__nv_bfloat16 *)out, *ps = (__nv_bfloat16 *)pre_store;
    int64_t v = vector_part(n, pre, pre, o, ps);
    if (v > 0) gelu_fwd_bf16x4<<<cuda_blocks(v / 4, kBlock), kBlock>>>((__nv_bfloat162 *)o, (__nv_bfloat162 *)ps,
                                                                      (const float4 *)pre, v / 4);
    if (n > v) gelu_fwd_bf16<<<cuda_blocks(n - v, kBlock), kBlock>>>(o, ps, pre, v, n);
    cuda_done("gelu_forward_bf16");
    fc->other += (double)GELU_FLOPS_FWD * n;
}

void gelu_backward_bf16_cuda(float *dinp, const uint16_t *inp, const float *dout, int64_t n, struct exec_ctx *fc) {
    const __nv_bfloat16 *x = (const __nv_bfloat16 *)inp;
    int64_t v = vector_part(n, dinp, dout, x, x);
    if (v > 0) gelu_bwd_bf16x4<<<cuda_blocks(v / 4, kBlock), kBlock>>>((float4 *)dinp, (const __nv_bfloat162 *)x,
                                                                      (const float4 *)dout, v / 4);
    if (n > v) gelu_bwd_bf16<<<cuda_blocks(n - v, kBlock), kBlock>>>(dinp, x, dout, v, n);
    cuda_done("gelu_backward_bf16");
    fc->other += (double)GELU_FLOPS_BWD * n;
}

void residual_forward_cuda(float *out, const float *a, const float *b, int64_t n, struct exec_ctx *fc) {
    if (n > 0) {
        residual_fwd<<<cuda_blocks(n, kBlock), kBlock>>>(out, a, b, n);
        cuda_done("residual_forward");
    }
    fc->other += (double)n;
}

}  // extern "C"
