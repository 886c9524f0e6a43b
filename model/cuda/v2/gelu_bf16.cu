// GELU with bf16 in and out (gelu_bf16.h: the CPU's bits). --gpu_path v2
// only; compiled, not run on a GPU. Eight elements a thread (16-byte
// loads and stores) where every pointer is 16-byte aligned, one a thread
// for the rest: the same per-element function either way.
#include "../cuda_check.h"
#include "gelu_bf16.h"

namespace {

constexpr unsigned kBlock = 256;
constexpr int kVec = 8;  // bf16 in a uint4

union bf16x8 {
    uint4 v;
    bf16 h[kVec];
};

__global__ void gelu_fwd_v2_x8(uint4 *out, const uint4 *pre, int64_t n8) {
    CUDA_GRID_STRIDE(i, n8) {
        bf16x8 p, o;
        p.v = pre[i];
#pragma unroll
        for (int k = 0; k < kVec; k++) o.h[k] = gelu_fwd_elem(p.h[k]);
        out[i] = o.v;
    }
}

__global__ void gelu_fwd_v2_x1(bf16 *out, const bf16 *pre, int64_t i0, int64_t n) {
    CUDA_GRID_STRIDE(j, n - i0) out[i0 + j] = gelu_fwd_elem(pre[i0 + j]);
}

// dinp may alias dout: each thread reads its elements before writing them.
__global__ void gelu_bwd_v2_x8(uint4 *dinp, const uint4 *inp, const uint4 *dout, int64_t n8) {
    CUDA_GRID_STRIDE(i, n8) {
        bf16x8 x, d, o;
        x.v = inp[i];
        d.v = dout[i];
#pragma unroll
        for (int k = 0; k < kVec; k++) o.h[k] = gelu_bwd_elem(x.h[k], d.h[k]);
        dinp[i] = o.v;
    }
}

__global__ void gelu_bwd_v2_x1(bf16 *dinp, const bf16 *inp, const bf16 *dout, int64_t i0, int64_t n) {
    CUDA_GRID_STRIDE(j, n - i0) dinp[i0 + j] = gelu_bwd_elem(inp[i0 + j], dout[i0 + j]);
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

}  // namespace

void gelu_forward_v2(bf16 *out, const bf16 *pre, int64_t n) {
    if (n <= 0) return;
    const int64_t n8 = aligned16(out) && aligned16(pre) ? n / kVec : 0;
    if (n8 > 0) gelu_fwd_v2_x8<<<cuda_blocks(n8, kBlock), kBlock>>>((uint4 *)out, (const uint4 *)pre, n8);
    if (n8 * kVec < n) gelu_fwd_v2_x1<<<cuda_blocks(n - n8 * kVec, kBlock), kBlock>>>(out, pre, n8 * kVec, n);
    cuda_done("gelu_forward_v2");
}

void gelu_backward_v2(bf16 *dinp, const bf16 *inp, const bf16 *dout, int64_t n) {
    if (n <= 0) return;
    const int64_t n8 = aligned16(dinp) && aligned16(inp) && aligned16(dout) ? n / kVec : 0;
    if (n8 > 0)
        gelu_bwd_v2_x8<<<cuda_blocks(n8, kBlock), kBlock>>>((uint4 *)dinp, (const uint4 *)inp, (const uint4 *)dout, n8);
    if (n8 * kVec < n) gelu_bwd_v2_x1<<<cuda_blocks(n - n8 * kVec, kBlock), kBlock>>>(dinp, inp, dout, n8 * kVec, n);
    cuda_done("gelu_backward_v2");
}
