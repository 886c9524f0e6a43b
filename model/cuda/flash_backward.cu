// Flash attention's backward kernels, FlashAttention-2 (Dao 2023) at the
// register level (flash_attention.h; the fragment layouts in
// flash_attention_mma.h).
//
// With D_i = sum_d dout_id out_id (= sum_j P_ij dP_ij), the probabilities
// are recomputed from the saved lse, P = exp(S - lse), never stored:
//   dV = P^T dO   dP = dO V^T   dS = P (dP - D)   dQ = dS K / sqrt(hs)
//   dK = dS^T Q / sqrt(hs)
// FlashAttention-2 has one block per key tile accumulate dK and dV and add
// its share of dQ atomically. Atomic float adds land in any order, so here
// dQ has its own kernel, one block per query tile walking the key tiles in
// order and recomputing S and dP (3 tile products, against 4 for dK/dV):
// deterministic (the same bits every run) at the price of 2 products per
// tile pair. Three kernels, in order: D, dK/dV, dQ.
//
// Tiling, as in the forward: 4 warps per block, 64-row tiles, each warp
// owning 16 rows (keys in dK/dV, queries in dQ) and a thread the rows g and
// g + 8 of those. The four operand tiles are bf16 in shared memory; the
// score-like tiles (S, dP, P, dS; transposed in dK/dV: rows keys, columns
// queries) and the accumulators are register fragments. The 64 columns of
// a tile pair are taken N at a time (kNdkdv, kNdq below: fewer at larger
// hs, so that the fp32 score fragments and the 16 x hs accumulators, two of
// them in dK/dV, fit in the registers); that splits the same products into
// column blocks, no more work.
// Scores are in log2 units as in the forward: P = exp2(S log2(e) / sqrt(hs)
// - lse log2(e)).
#include <cuda_bf16.h>
#include <math.h>

#include "cuda_check.h"
#include "flash_attention_kernels.h"
#include "flash_attention_mma.h"

namespace flash {
namespace {

// Tile columns per step (above): the most that compile without spilling
// (or nearly: dK/dV at hs 128 spills a few words) at 3 blocks per SM for hs
// 64 (168 registers; `nvcc --resource-usage`, sm_90).
template <int HS>
constexpr int kNdkdv = HS == 128 ? 16 : 32;
template <int HS>
constexpr int kNdq = HS == 128 ? 32 : 64;

// Shared memory of both kernels: four padded 64 x hs bf16 tiles, then
// (dK/dV only) the 64 lse and D values of the query tile.
template <int HS>
constexpr size_t bwd_tiles_bytes() {
    return 4 * tile_bytes(Ld<HS>::op);
}

// ---- D (B,NH,T) = rowsum(dout * out): a warp per (batch, head, row); its
// index in D is the row number ----
__global__ void flash_backward_d(float *D, const float *dout, const float *out, int64_t rows, int T, int NH, int HS) {
    const int64_t row = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
    if (row >= rows) return;  // the whole warp: the shuffles below see all 32 lanes
    const int lane = threadIdx.x % 32;
    const int64_t b = row / ((int64_t)NH * T), h = row / T % NH, t = row % T;
    const int64_t at = (b * T + t) * NH * HS + h * HS;
    float sum = 0.0f;
    for (int d = lane; d < HS; d += 32) sum += dout[at + d] * out[at + d];
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);  // a fixed butterfly
    if (lane == 0) D[row] = sum;
}

// ---- dK and dV: grid (B NH, nt), block y takes key tile y and walks the
// query tiles y..nt-1; per warp S^T = K Q^T, dP^T = V dO^T (16 keys x N
// queries at a time), P^T, dS^T in registers, dV += P^T dO, dK += dS^T Q ----
template <int HS>
__global__ void __launch_bounds__(kThreads) flash_backward_dkdv(float *dqkv, const float *dout, const float *qkv,
                                                                const float *lse, const float *D, int T, int NH,
                                                                float scale, bool vec) {
    constexpr int ld = Ld<HS>::op, N = kNdkdv<HS>;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Ks = (bf16 *)smem, *Vs = Ks + kTile * ld, *Qs = Vs + kTile * ld, *dOs = Qs + kTile * ld;
    float *lse_s = (float *)(dOs + kTile * ld), *D_s = lse_s + kTile;  // 16-byte aligned: the tiles are

    const int C = NH * HS, bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int64_t C3 = 3 * (int64_t)C;
    const int kt = blockIdx.y, k0 = kt * kTile, nt = gridDim.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const float *q_src = qkv + (int64_t)b * T * C3 + (int64_t)h * HS, *k_src = q_src + C, *v_src = q_src + 2 * C;
    const float *do_src = dout + (int64_t)b * T * C + (int64_t)h * HS;
    const float scale_log2 = scale * kLog2e;

    load_tile<HS>(Ks, k_src, C3, k0, T, vec);
    load_tile<HS>(Vs, v_src, C3, k0, T, vec);
    const bf16 *K_w = Ks + warp * kRowsPerWarp * ld, *V_w = Vs + warp * kRowsPerWarp * ld;  // this warp's 16 keys
    const int j0 = k0 + warp * kRowsPerWarp + g;  // key of this thread's row 0; row 1 is j0 + 8

    float dk[HS / 8][4], dv[HS / 8][4];  // C fragments: [n][2r + e] = row r, column 8n + 2t + e
#pragma unroll
    for (int n = 0; n < HS / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;

    for (int qt = kt; qt < nt; qt++) {
        const int q0 = qt * kTile;
        __syncthreads();  // every warp is done with the last Q, dO, lse, D (first time: K, V are in place)
        load_tile<HS>(Qs, q_src, C3, q0, T, vec);
        load_tile<HS>(dOs, do_src, C, q0, T, vec);
        load_rows(lse_s, lse + (int64_t)bh * T, q0, T, kLog2e);
        load_rows(D_s, D + (int64_t)bh * T, q0, T, 1.0f);
        __syncthreads();

        // The causal mask j <= i matters on the diagonal tile only, the
        // queries past T on the last one only.
        const bool edge = qt == kt || qt == nt - 1;
#pragma unroll
        for (int c0 = 0; c0 < kTile; c0 += N) {  // queries q0 + c0 .. q0 + c0 + N - 1
            float s[N / 8][4], dp[N / 8][4];     // [n][2r + e]: key row r, query column c0 + 8n + 2t + e
            product_abt<HS, N>(s, K_w, Qs + c0 * ld);    // S^T = K Q^T, unscaled
            product_abt<HS, N>(dp, V_w, dOs + c0 * ld);  // dP^T = V dO^T
            uint32_t pa[N / 16][4], dsa[N / 16][4];      // P^T, dS^T as A fragments
#pragma unroll
            for (int n = 0; n < N / 8; n++) {
                const int col = c0 + 8 * n + 2 * t;  // this thread's two query columns: col, col + 1
                const float2 L = *(const float2 *)(lse_s + col), Dv = *(const float2 *)(D_s + col);
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int j = j0 + 8 * r;
                    float p[2], ds[2];
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int i = q0 + col + e;
                        const bool live = !edge || (j <= i && i < T);
                        p[e] = live ? exp2f(s[n][2 * r + e] * scale_log2 - (e ? L.y : L.x)) : 0.0f;
                        ds[e] = p[e] * (dp[n][2 * r + e] - (e ? Dv.y : Dv.x));
                    }
                    // block n's row r is a[n / 2][2 (n % 2) + r] (flash_attention_mma.h)
                    pa[n / 2][2 * (n % 2) + r] = pack_bf16(p[0], p[1]);
                    dsa[n / 2][2 * (n % 2) + r] = pack_bf16(ds[0], ds[1]);
                }
            }
            product_ab_acc<HS, N>(dv, pa, dOs + c0 * ld);  // dV += P^T dO
            product_ab_acc<HS, N>(dk, dsa, Qs + c0 * ld);  // dK += dS^T Q (scaled at the end)
        }
    }

    float *dqkv_b = dqkv + (int64_t)b * T * C3 + (int64_t)h * HS;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int j = j0 + 8 * r;
        if (j >= T) continue;
        store_row<HS>(dqkv_b + (int64_t)j * C3 + C, dk, r, scale, vec);
        store_row<HS>(dqkv_b + (int64_t)j * C3 + 2 * C, dv, r, 1.0f, vec);
    }
}

// ---- dQ: grid (B NH, nt), block y takes query tile nt-1-y and walks the
// key tiles 0..that tile in order; per warp S = Q K^T, dP = dO V^T (16
// queries x N keys at a time), dS in registers, dQ += dS K ----
template <int HS>
__global__ void __launch_bounds__(kThreads) flash_backward_dq(float *dqkv, const float *dout, const float *qkv,
                                                              const float *lse, const float *D, int T, int NH,
                                                              float scale, bool vec) {
    constexpr int ld = Ld<HS>::op, N = kNdq<HS>;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *dOs = Qs + kTile * ld, *Ks = dOs + kTile * ld, *Vs = Ks + kTile * ld;

    const int C = NH * HS, bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int64_t C3 = 3 * (int64_t)C;
    const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * kTile;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const float *q_src = qkv + (int64_t)b * T * C3 + (int64_t)h * HS, *k_src = q_src + C, *v_src = q_src + 2 * C;
    const float scale_log2 = scale * kLog2e;

    load_tile<HS>(Qs, q_src, C3, q0, T, vec);  // the first __syncthreads below publishes them
    load_tile<HS>(dOs, dout + (int64_t)b * T * C + (int64_t)h * HS, C, q0, T, vec);
    const bf16 *Q_w = Qs + warp * kRowsPerWarp * ld, *dO_w = dOs + warp * kRowsPerWarp * ld;  // 16 queries
    const int i0 = q0 + warp * kRowsPerWarp + g;  // query of this thread's row 0; row 1 is i0 + 8
    float lse_r[2], D_r[2];                       // per row r; 0 past T (those rows are never stored)
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = i0 + 8 * r;
        lse_r[r] = i < T ? lse[(int64_t)bh * T + i] * kLog2e : 0.0f;
        D_r[r] = i < T ? D[(int64_t)bh * T + i] : 0.0f;
    }

    float dq[HS / 8][4];  // C fragments: [n][2r + e] = row r, column 8n + 2t + e
#pragma unroll
    for (int n = 0; n < HS / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * kTile;
        __syncthreads();  // every warp is done with the last K, V (first time: Q, dO are in place)
        load_tile<HS>(Ks, k_src, C3, k0, T, vec);
        load_tile<HS>(Vs, v_src, C3, k0, T, vec);
        __syncthreads();

        // The causal mask on the diagonal tile only; it also masks the keys
        // past T for every row that is stored (j <= i < T), as the forward.
        const bool diagonal = kt == qt;
#pragma unroll
        for (int c0 = 0; c0 < kTile; c0 += N) {  // keys k0 + c0 .. k0 + c0 + N - 1
            float s[N / 8][4], dp[N / 8][4];     // [n][2r + e]: query row r, key column c0 + 8n + 2t + e
            product_abt<HS, N>(s, Q_w, Ks + c0 * ld);    // S = Q K^T, unscaled
            product_abt<HS, N>(dp, dO_w, Vs + c0 * ld);  // dP = dO V^T
            uint32_t dsa[N / 16][4];                     // dS as A fragments
#pragma unroll
            for (int n = 0; n < N / 8; n++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int i = i0 + 8 * r;
                    float ds[2];
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int j = k0 + c0 + 8 * n + 2 * t + e;
                        const float p = !diagonal || j <= i ? exp2f(s[n][2 * r + e] * scale_log2 - lse_r[r]) : 0.0f;
                        ds[e] = p * (dp[n][2 * r + e] - D_r[r]);
                    }
                    dsa[n / 2][2 * (n % 2) + r] = pack_bf16(ds[0], ds[1]);  // block n's row r (flash_attention_mma.h)
                }
            product_ab_acc<HS, N>(dq, dsa, Ks + c0 * ld);  // dQ += dS K (scaled at the end)
        }
    }

    float *dq_b = dqkv + (int64_t)b * T * C3 + (int64_t)h * HS;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = i0 + 8 * r;
        if (i < T) store_row<HS>(dq_b + (int64_t)i * C3, dq, r, scale, vec);
    }
}

}  // namespace

template <int HS>
void launch_backward(float *dqkv, float *D, const float *dout, const float *qkv, const float *out, const float *lse,
                     int B, int T, int NH, bool vec) {
    const size_t dkdv_bytes = bwd_tiles_bytes<HS>() + 2 * kTile * sizeof(float), dq_bytes = bwd_tiles_bytes<HS>();
    const float scale = 1.0f / sqrtf((float)HS);
    cuda_check(cudaFuncSetAttribute(flash_backward_dkdv<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)dkdv_bytes),
               "flash_attention_backward (shared memory size)");
    cuda_check(cudaFuncSetAttribute(flash_backward_dq<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dq_bytes),
               "flash_attention_backward (shared memory size)");
    const int64_t rows = (int64_t)B * NH * T;
    flash_backward_d<<<(unsigned)((rows + kWarps - 1) / kWarps), kThreads>>>(D, dout, out, rows, T, NH, HS);
    dim3 grid((unsigned)(B * NH), (unsigned)((T + kTile - 1) / kTile));
    flash_backward_dkdv<HS><<<grid, kThreads, dkdv_bytes>>>(dqkv, dout, qkv, lse, D, T, NH, scale, vec);
    flash_backward_dq<HS><<<grid, kThreads, dq_bytes>>>(dqkv, dout, qkv, lse, D, T, NH, scale, vec);
}

template void launch_backward<32>(float *, float *, const float *, const float *, const float *, const float *, int,
                                  int, int, bool);
template void launch_backward<64>(float *, float *, const float *, const float *, const float *, const float *, int,
                                  int, int, bool);
template void launch_backward<128>(float *, float *, const float *, const float *, const float *, const float *, int,
                                   int, int, bool);

}  // namespace flash
