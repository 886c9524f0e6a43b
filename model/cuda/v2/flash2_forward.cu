// FlashAttention-2's forward on the bf16 data path (flash2.h; Dao 2023,
// Algorithm 1): --gpu_path v2 only; compiled, not run on a GPU.
//
// One block of 8 warps per 128 query rows of one (batch, head), the
// largest blocks (most key tiles) launched first. Q's 128 rows and the
// first K, V tile go to shared memory by cp.async; then for each key tile
// the next one is requested (the other buffer) before the current one is
// multiplied, so the copy runs under the products. Each warp keeps its 16
// rows of Q as A fragments, its running max m and sum l (per row, log2
// domain) and its 16 x hs output O in registers.
#include <cuda_runtime.h>
#include <math.h>

#include "../cuda_check.h"
#include "flash2.h"
#include "flash2_async.h"

namespace flash2 {

constexpr float kNegInf = -INFINITY;

template <int HS>
__global__ void __launch_bounds__(kThreads) flash2_fwd_kernel(bf16 *out, float *lse, const bf16 *qkv, int T, int NH,
                                                              float scale_log2) {
    constexpr int kLd = HS + FLASH2_PAD, kN = FLASH2_FWD_KEYS;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *qs = (bf16 *)smem, *ks = (bf16 *)(smem + flash2_fwd_smem_k(HS)), *vs = (bf16 *)(smem + flash2_fwd_smem_v(HS));
    const int qb = (int)(gridDim.x - 1 - blockIdx.x), bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int C = NH * HS;
    const int64_t C3 = 3 * (int64_t)C;
    const bf16 *q = qkv + (int64_t)b * T * C3 + (int64_t)h * HS, *k = q + C, *v = q + 2 * C;
    const int q0 = qb * FLASH2_FWD_ROWS, ntiles = (int)flash2_fwd_key_tiles(qb, T);

    load_tile_async<HS, FLASH2_FWD_ROWS>(qs, q, C3, q0, T);
    load_tile_async<HS, kN>(ks, k, C3, 0, T);
    load_tile_async<HS, kN>(vs, v, C3, 0, T);
    cp_async_commit();

    uint32_t qa[HS / 16][4];
    float o[HS / 8][4], m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < HS / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    const int r0 = q0 + warp * FLASH2_WARP_ROWS;  // the warp's first row

    for (int kt = 0; kt < ntiles; kt++) {
        const int buf = kt & 1;
        if (kt + 1 < ntiles) {  // the next tile into the other buffer, freed by the last iteration's barrier
            const int nb = buf ^ 1;
            load_tile_async<HS, kN>(ks + nb * kN * kLd, k, C3, (kt + 1) * kN, T);
            load_tile_async<HS, kN>(vs + nb * kN * kLd, v, C3, (kt + 1) * kN, T);
            cp_async_commit();
            cp_async_wait<1>();  // all but the tile just requested
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (kt == 0) {
#pragma unroll
            for (int c = 0; c < HS / 16; c++) flash::load_a(qa[c], qs + warp * FLASH2_WARP_ROWS * kLd, kLd, 16 * c);
        }
        if (flash2_fwd_warp_active(qb, warp, kt, T)) {  // warp-uniform
            const bf16 *kt_s = ks + buf * kN * kLd, *vt_s = vs + buf * kN * kLd;
            float s[kN / 8][4];
#pragma unroll
            for (int n = 0; n < kN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
            for (int c = 0; c < HS / 16; c++)
#pragma unroll
                for (int n0 = 0; n0 < kN; n0 += 16) {
                    uint32_t fb[4];
                    flash::load_b_of_transposed(fb, kt_s, kLd, n0, 16 * c);
                    flash::mma_16816(s[n0 / 8], qa[c], fb[0], fb[1]);
                    flash::mma_16816(s[n0 / 8 + 1], qa[c], fb[2], fb[3]);
                }
            const bool mask = flash2_fwd_needs_mask(qb, warp, kt);
            float tmax[2] = {kNegInf, kNegInf};
#pragma unroll
            for (int n = 0; n < kN / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int row = r0 + g + 8 * (e / 2), key = kt * kN + 8 * n + 2 * t + e % 2;
                    float x = s[n][e] * scale_log2;
                    if (mask && key > row) x = kNegInf;
                    s[n][e] = x;
                    tmax[e / 2] = fmaxf(tmax[e / 2], x);
                }
            float corr[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                // every row has key 0 <= row in tile 0, so m is finite from there on
                const float m_new = fmaxf(m[r], flash::quad_max(tmax[r]));
                corr[r] = exp2f(m[r] - m_new);  // 0 on tile 0 (m = -inf, l and O are 0)
                m[r] = m_new;
                l[r] *= corr[r];
            }
#pragma unroll
            for (int n = 0; n < HS / 8; n++) o[n][0] *= corr[0], o[n][1] *= corr[0], o[n][2] *= corr[1], o[n][3] *= corr[1];
            uint32_t pa[kN / 16][4];
#pragma unroll
            for (int n = 0; n < kN / 8; n++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    float p0, p1;  // l sums the rounded values, the ones P V multiplies
                    pa[n / 2][2 * (n % 2) + r] =
                        flash::pack_bf16(exp2f(s[n][2 * r] - m[r]), exp2f(s[n][2 * r + 1] - m[r]), &p0, &p1);
                    l[r] += p0 + p1;
                }
            flash::product_ab_acc<HS, kN>(o, pa, vt_s);
        }
        __syncthreads();  // the buffer just multiplied is the next iteration's target
    }

    const int C_out = C;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = r0 + g + 8 * r;
        const float lr = flash::quad_sum(l[r]);
        if (row >= T) continue;
        const float inv = 1.0f / lr;
        bf16 *dst = out + ((int64_t)b * T + row) * C_out + (int64_t)h * HS + 2 * t;
#pragma unroll
        for (int n = 0; n < HS / 8; n++)
            *(__nv_bfloat162 *)(dst + 8 * n) = __floats2bfloat162_rn(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        if (t == 0) lse[(int64_t)bh * T + row] = (m[r] + log2f(lr)) * flash::kLn2;
    }
}

template <int HS>
void launch_forward(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int NH) {
    const size_t smem = flash2_fwd_smem(HS);
    cuda_check(cudaFuncSetAttribute(flash2_fwd_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
               "flash2_forward: shared memory");
    const float scale_log2 = flash::kLog2e / sqrtf((float)HS);
    const dim3 grid((unsigned)flash2_fwd_blocks(T), (unsigned)(B * NH));
    flash2_fwd_kernel<HS><<<grid, kThreads, smem>>>(out, lse, qkv, T, NH, scale_log2);
}

}  // namespace flash2

extern "C" int flash2_forward(bf16 *out, float *lse, const bf16 *qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
    const void *ptrs[] = {out, qkv};
    const char *names[] = {"out", "qkv"};
    if (flash2_check("flash2_forward", B, T, C, NH, ptrs, names, 2)) return 1;
    if (B == 0 || T == 0) return 0;
    flash2::bf16 *o = (flash2::bf16 *)out;
    const flash2::bf16 *x = (const flash2::bf16 *)qkv;
    switch (C / NH) {
    case 32: flash2::launch_forward<32>(o, lse, x, (int)B, (int)T, (int)NH); break;
    case 64: flash2::launch_forward<64>(o, lse, x, (int)B, (int)T, (int)NH); break;
    default: flash2::launch_forward<128>(o, lse, x, (int)B, (int)T, (int)NH); break;
    }
    cuda_done("flash2_forward");
    return 0;
}
