// The residual add fused with the next LayerNorm's forward, bf16 in and
// out (residual_layernorm.h: the math, its rounding points and its bound
// against the CPU kernels). --gpu_path v2 only; compiled, not run on a GPU.
#include "../cuda_check.h"
#include "residual_layernorm.h"
#include "warp_sum.h"

// A warp a row, V2_ROW_WARPS rows a block, grid-stride over the rows. A
// lane reads back only the x it stored itself, so no barrier is needed.
__global__ void __launch_bounds__(V2_ROW_WARPS *V2_WARP)
    residual_layernorm_fwd_v2(bf16 *x, bf16 *out, float *mean, float *rstd, const bf16 *a, const float *bf,
                              const bf16 *bh, const float *w, const float *bias, int64_t N, int64_t C) {
    const int lane = threadIdx.x % V2_WARP;
    for (int64_t i = blockIdx.x * (int64_t)V2_ROW_WARPS + threadIdx.x / V2_WARP; i < N;
         i += (int64_t)gridDim.x * V2_ROW_WARPS) {
        bf16 *xi = x + i * C;
        const float *bfi = bf ? bf + i * C : NULL;
        const bf16 *bhi = bf ? NULL : bh + i * C;
        float m = v2_warp_sum(resln_lane_add(xi, a + i * C, bfi, bhi, C, lane)) / (float)C;
        float s = ln_rstd(v2_warp_sum(ln_lane_var(xi, m, C, lane)), C);
        ln_lane_out(out + i * C, xi, m, s, w, bias, C, lane);
        if (lane == 0) {
            mean[i] = m;
            rstd[i] = s;
        }
    }
}

void residual_layernorm_forward_v2(bf16 *x, bf16 *out, float *mean, float *rstd, const bf16 *a, const float *bf,
                                   const bf16 *bh, const float *weight, const float *bias, int64_t N, int64_t C) {
    if (N <= 0) return;
    residual_layernorm_fwd_v2<<<cuda_blocks(N, V2_ROW_WARPS), V2_ROW_WARPS * V2_WARP>>>(x, out, mean, rstd, a, bf, bh,
                                                                                        weight, bias, N, C);
    cuda_done("residual_layernorm_forward_v2");
}

// The LayerNorm alone: the fused kernel's rows on an x already stored.
__global__ void __launch_bounds__(V2_ROW_WARPS *V2_WARP)
    layernorm_fwd_v2(bf16 *out, float *mean, float *rstd, const bf16 *x, const float *w, const float *bias, int64_t N,
                     int64_t C) {
    const int lane = threadIdx.x % V2_WARP;
    for (int64_t i = blockIdx.x * (int64_t)V2_ROW_WARPS + threadIdx.x / V2_WARP; i < N;
         i += (int64_t)gridDim.x * V2_ROW_WARPS) {
        const bf16 *xi = x + i * C;
        float m = v2_warp_sum(ln_lane_sum(xi, C, lane)) / (float)C;
        float s = ln_rstd(v2_warp_sum(ln_lane_var(xi, m, C, lane)), C);
        ln_lane_out(out + i * C, xi, m, s, w, bias, C, lane);
        if (lane == 0) {
            mean[i] = m;
            rstd[i] = s;
        }
    }
}

// The residual add alone, an element a thread (memory bound: one bf16 and
// one float in, one bf16 out).
__global__ void residual_fwd_v2(bf16 *out, const bf16 *a, const float *b, int64_t n) {
    CUDA_GRID_STRIDE(i, n) out[i] = residual_elem(a[i], b[i]);
}

void layernorm_forward_v2(bf16 *out, float *mean, float *rstd, const bf16 *x, const float *weight, const float *bias,
                          int64_t N, int64_t C) {
    if (N <= 0 || C <= 0) return;
    layernorm_fwd_v2<<<cuda_blocks(N, V2_ROW_WARPS), V2_ROW_WARPS * V2_WARP>>>(out, mean, rstd, x, weight, bias, N, C);
    cuda_done("layernorm_forward_v2");
}

void residual_forward_v2(bf16 *out, const bf16 *a, const float *b, int64_t n) {
    if (n <= 0) return;
    const unsigned threads = V2_ROW_WARPS * V2_WARP;
    residual_fwd_v2<<<cuda_blocks(n, threads), threads>>>(out, a, b, n);
    cuda_done("residual_forward_v2");
}
