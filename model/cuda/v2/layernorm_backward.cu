// LayerNorm's backward in one launch and a fixed-order finish
// (layernorm_backward.h: the math, the order and the bounds). --gpu_path
// v2 only; compiled, not run on a GPU.
#include "../cuda_check.h"
#include "layernorm_backward.h"
#include "warp_sum.h"

// Block b: its V2_LNB_ROWS rows, a warp a row for dinp, then a thread a
// channel for the block's dweight and dbias partials (the same rows, in
// row order). The two halves share no data, so no barrier between them.
__global__ void __launch_bounds__(V2_ROW_WARPS *V2_WARP)
    layernorm_bwd_v2(float *dxf, bf16 *dxh, float *part, const float *dyf, const bf16 *dyh, const bf16 *inp,
                     const float *w, const float *mean, const float *rstd, int64_t N, int64_t C, int64_t nblk) {
    const int lane = threadIdx.x % V2_WARP;
    const int64_t r0 = blockIdx.x * (int64_t)V2_LNB_ROWS;
    const int64_t r1 = r0 + V2_LNB_ROWS < N ? r0 + V2_LNB_ROWS : N;
    for (int64_t i = r0 + threadIdx.x / V2_WARP; i < r1; i += V2_ROW_WARPS) {
        const float *dyfi = dyf ? dyf + i * C : NULL;
        const bf16 *dyhi = dyf ? NULL : dyh + i * C;
        float pa, pb;
        lnb_lane_sums(&pa, &pb, inp + i * C, dyfi, dyhi, w, mean[i], rstd[i], C, lane);
        float dm = v2_warp_sum(pa) / (float)C, dx = v2_warp_sum(pb) / (float)C;
        lnb_lane_dinp(dxf ? dxf + i * C : NULL, dxf ? NULL : dxh + i * C, inp + i * C, dyfi, dyhi, w, mean[i], rstd[i],
                      dm, dx, C, lane);
    }
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        lnb_channel_partial(&part[blockIdx.x * C + c], &part[(nblk + blockIdx.x) * C + c], inp, dyf, dyh, mean, rstd,
                            r0, r1, C, c);
}

__global__ void layernorm_bwd_finish_v2(float *dweight, float *dbias, const float *part, int64_t nblk, int64_t C) {
    CUDA_GRID_STRIDE(c, C) lnb_channel_finish(dweight, dbias, part, nblk, C, c);
}

void layernorm_backward_v2(float *dxf, bf16 *dxh, float *dweight, float *dbias, float *scratch, const float *dyf,
                           const bf16 *dyh, const bf16 *inp, const float *weight, const float *mean, const float *rstd,
                           int64_t N, int64_t C) {
    if (N <= 0 || C <= 0) return;
    const unsigned threads = V2_ROW_WARPS * V2_WARP;
    const int64_t nblk = lnb_blocks(N);
    layernorm_bwd_v2<<<(unsigned)nblk, threads>>>(dxf, dxh, scratch, dyf, dyh, inp, weight, mean, rstd, N, C, nblk);
    layernorm_bwd_finish_v2<<<cuda_blocks(C, threads), threads>>>(dweight, dbias, scratch, nblk, C);
    cuda_done("layernorm_backward_v2");
}
