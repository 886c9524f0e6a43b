// FlashAttention-2's backward on the bf16 data path (flash2.h; Dao 2023,
// Algorithm 2): --gpu_path v2 only; compiled, not run on a GPU. Three
// kernels, in order on the stream:
//   flash2_bwd_prep  a warp per (row, head): D = dout . out in fp32 (out
//                    widened; the CPU form's D), dout rounded to bf16 into
//                    the scratch (the products' operand, for cp.async).
//   flash2_bwd_kv    a block of 8 warps per 128 keys of one (batch, head)
//                    (the first keys, which meet the most queries, first),
//                    walking the query tiles of 64 from its first key on:
//                    K, V stay in shared memory, Q, dO, lse, D of the next
//                    tile load by cp.async while the current is multiplied.
//                    Per warp (16 keys, skipped when all follow the tile's
//                    last query): S^T = K Q^T, P^T = exp(S^T - lse), dP^T =
//                    V dO^T, dS^T = P^T (dP^T - D), dV += P^T dO, dK +=
//                    dS^T Q (registers); dS^T to shared memory; then the 8
//                    warps make the tile's dQ partial dS K (64 x hs, each
//                    16 rows x hs/2), stored fp32 in this key block's slot.
//   flash2_bwd_dq    a thread per element of dq: its partials summed in
//                    key-block order, times 1/sqrt(hs), rounded to bf16.
#include <cuda_runtime.h>
#include <math.h>

#include "../cuda_check.h"
#include "flash2.h"
#include "flash2_async.h"

namespace flash2 {

constexpr int kQ = FLASH2_BWD_QUERIES, kK = FLASH2_BWD_KEYS, kLdS = FLASH2_BWD_QUERIES + FLASH2_PAD;

template <int HS>
__global__ void __launch_bounds__(kThreads) flash2_bwd_prep(float *D, bf16 *dout16, const float *dout, const bf16 *out,
                                                            int64_t rows) {
    const int64_t r = (int64_t)blockIdx.x * FLASH2_WARPS + threadIdx.x / 32;  // row (b, t) and head h, h fastest
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const int64_t off = r * HS;  // (bt NH + h) hs = bt C + h hs: the head's columns of dout and out
    float d = 0.0f;
#pragma unroll
    for (int c = lane; c < HS; c += 32) {
        const float x = dout[off + c];
        d += x * __bfloat162float(out[off + c]);
        dout16[off + c] = __float2bfloat16_rn(x);
    }
#pragma unroll
    for (int s = 16; s > 0; s /= 2) d += __shfl_xor_sync(0xffffffffu, d, s);
    if (lane == 0) D[r] = d;  // D in (b, t, h) order; flash2_bwd_kv reads it so
}

template <int HS>
__global__ void __launch_bounds__(kThreads) flash2_bwd_kv(bf16 *dqkv, float *dq_part, const bf16 *qkv,
                                                          const bf16 *dout16, const float *lse, const float *Dv, int T,
                                                          int NH, float scale) {
    constexpr int kLd = HS + FLASH2_PAD;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *ks = (bf16 *)smem, *vs = (bf16 *)(smem + flash2_bwd_smem_v(HS)), *qs = (bf16 *)(smem + flash2_bwd_smem_q(HS));
    bf16 *dos = (bf16 *)(smem + flash2_bwd_smem_do(HS)), *dss = (bf16 *)(smem + flash2_bwd_smem_ds(HS));
    float *lses = (float *)(smem + flash2_bwd_smem_lse(HS)), *ds_ = (float *)(smem + flash2_bwd_smem_d(HS));
    const int kb = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int C = NH * HS;
    const int64_t C3 = 3 * (int64_t)C;
    const bf16 *q = qkv + (int64_t)b * T * C3 + (int64_t)h * HS, *k = q + C, *v = q + 2 * C;
    const bf16 *dy = dout16 + (int64_t)b * T * C + (int64_t)h * HS;
    const int k0 = kb * kK, first = (int)flash2_bwd_first_tile(kb), ntiles = (int)flash2_bwd_tiles(T);
    const float log2e = flash::kLog2e, scale_log2 = scale * log2e;

    // lse (log2 domain) and D of query tile qt into buffer nb; rows past T: P = 0 (lse +inf), D = 0
    auto load_rows = [&](int qt, int nb) {
        for (int i = threadIdx.x; i < kQ; i += kThreads) {
            const int row = qt * kQ + i;
            lses[nb * kQ + i] = row < T ? lse[(int64_t)bh * T + row] * log2e : INFINITY;
            ds_[nb * kQ + i] = row < T ? Dv[((int64_t)b * T + row) * NH + h] : 0.0f;
        }
    };
    load_tile_async<HS, kK>(ks, k, C3, k0, T);
    load_tile_async<HS, kK>(vs, v, C3, k0, T);
    load_tile_async<HS, kQ>(qs, q, C3, first * kQ, T);
    load_tile_async<HS, kQ>(dos, dy, C, first * kQ, T);
    cp_async_commit();
    load_rows(first, 0);

    float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
    for (int n = 0; n < HS / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    const int kw = k0 + warp * FLASH2_WARP_ROWS;  // the warp's first key
    const bf16 *kw_s = ks + warp * FLASH2_WARP_ROWS * kLd, *vw_s = vs + warp * FLASH2_WARP_ROWS * kLd;

    for (int qt = first; qt < ntiles; qt++) {
        const int buf = (qt - first) & 1;
        const bf16 *q_s = qs + buf * kQ * kLd, *do_s = dos + buf * kQ * kLd;
        if (qt + 1 < ntiles) {  // the next tile into the other buffer, freed by the last iteration's barrier
            const int nb = buf ^ 1;
            load_tile_async<HS, kQ>(qs + nb * kQ * kLd, q, C3, (qt + 1) * kQ, T);
            load_tile_async<HS, kQ>(dos + nb * kQ * kLd, dy, C, (qt + 1) * kQ, T);
            cp_async_commit();
            load_rows(qt + 1, nb);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        bf16 *ds_w = dss + warp * FLASH2_WARP_ROWS * kLdS;  // the warp's 16 rows of dS^T
        if (flash2_bwd_warp_active(kb, warp, qt, T)) {      // warp-uniform
            float s[kQ / 8][4], dp[kQ / 8][4];
            flash::product_abt<HS, kQ>(s, kw_s, q_s);   // S^T = K Q^T (16 keys x 64 queries)
            flash::product_abt<HS, kQ>(dp, vw_s, do_s); // dP^T = V dO^T
            const float *ls = lses + buf * kQ, *dd = ds_ + buf * kQ;
#pragma unroll
            for (int n = 0; n < kQ / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = kw + g + 8 * (e / 2), col = 8 * n + 2 * t + e % 2, query = qt * kQ + col;
                    // exp2(-inf) = 0 for the rows past T; the causal mask explicitly
                    const float p = query < key ? 0.0f : exp2f(s[n][e] * scale_log2 - ls[col]);
                    s[n][e] = p;
                    dp[n][e] = p * (dp[n][e] - dd[col]);
                }
            uint32_t pa[kQ / 16][4], dsa[kQ / 16][4];
            pack_a(pa, s);
            pack_a(dsa, dp);
            flash::product_ab_acc<HS, kQ>(dv, pa, do_s); // dV += P^T dO
            flash::product_ab_acc<HS, kQ>(dk, dsa, q_s); // dK += dS^T Q
#pragma unroll
            for (int n = 0; n < kQ / 8; n++) {  // C block n rows g, g + 8: A register [n/2][2(n%2) + r]
                *(uint32_t *)(ds_w + g * kLdS + 8 * n + 2 * t) = dsa[n / 2][2 * (n % 2)];
                *(uint32_t *)(ds_w + (g + 8) * kLdS + 8 * n + 2 * t) = dsa[n / 2][2 * (n % 2) + 1];
            }
        } else {
            for (int i = lane; i < FLASH2_WARP_ROWS * kQ / 2; i += 32)
                *(uint32_t *)(ds_w + i / (kQ / 2) * kLdS + 2 * (i % (kQ / 2))) = 0u;
        }
        __syncthreads();
        {  // dQ partial = dS K: warp (w % 4) takes query rows 16 (w % 4), columns hs/2 (w / 4) ..
            constexpr int kHalf = HS / 2;
            const int m0 = (warp % 4) * FLASH2_WARP_ROWS, n0 = (warp / 4) * kHalf;
            float acc[kHalf / 8][4];
#pragma unroll
            for (int n = 0; n < kHalf / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
            for (int c = 0; c < kK; c += 16) {
                uint32_t a[4];
                load_a_trans(a, dss, kLdS, c, m0);
#pragma unroll
                for (int n = 0; n < kHalf; n += 16) {
                    uint32_t fb[4];
                    flash::load_b(fb, ks, kLd, c, n0 + n);
                    flash::mma_16816(acc[n / 8], a, fb[0], fb[1]);
                    flash::mma_16816(acc[n / 8 + 1], a, fb[2], fb[3]);
                }
            }
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int query = qt * kQ + m0 + g + 8 * r;
                if (query >= T) continue;
                float *dst = dq_part + ((int64_t)bh * flash2_dq_rows(T) + flash2_dq_row(kb, query, T)) * HS + n0 + 2 * t;
#pragma unroll
                for (int n = 0; n < kHalf / 8; n++) *(float2 *)(dst + 8 * n) = make_float2(acc[n][2 * r], acc[n][2 * r + 1]);
            }
        }
        __syncthreads();  // the buffers and dS^T just read are the next iteration's targets
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = kw + g + 8 * r;
        if (key >= T) continue;
        bf16 *dst = dqkv + ((int64_t)b * T + key) * C3 + (int64_t)h * HS + 2 * t;
#pragma unroll
        for (int n = 0; n < HS / 8; n++) {
            *(__nv_bfloat162 *)(dst + C + 8 * n) = __floats2bfloat162_rn(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
            *(__nv_bfloat162 *)(dst + 2 * C + 8 * n) = __floats2bfloat162_rn(dv[n][2 * r], dv[n][2 * r + 1]);
        }
    }
}

// dq[b][t][h] = scale * sum_{kb <= t / 128} partial[kb][t], in that order.
template <int HS>
__global__ void flash2_bwd_dq(bf16 *dqkv, const float *dq_part, int B, int T, int NH, float scale) {
    const int64_t n = (int64_t)B * NH * T * HS, rows = flash2_dq_rows(T);
    CUDA_GRID_STRIDE(i, n) {
        const int d = (int)(i % HS);
        const int64_t row = i / HS, tq = row % T, bh = row / T, b = bh / NH, h = bh % NH;
        const float *p = dq_part + bh * rows * HS + d;
        float sum = 0.0f;
        for (int64_t kb = 0; kb <= tq / kK; kb++) sum += p[flash2_dq_row(kb, tq, T) * HS];
        dqkv[(b * T + tq) * 3 * NH * HS + h * HS + d] = __float2bfloat16_rn(sum * scale);
    }
}

template <int HS>
void launch_backward(bf16 *dqkv, float *scratch, const float *dout, const bf16 *qkv, const bf16 *out,
                     const float *lse, int B, int T, int NH) {
    const struct flash2_scratch lay = flash2_scratch_layout(B, T, (int64_t)NH * HS, NH);
    float *D = scratch + lay.D, *dq_part = scratch + lay.dq;
    bf16 *dout16 = (bf16 *)(scratch + lay.dout16);
    const int64_t rows = (int64_t)B * T * NH;
    flash2_bwd_prep<HS><<<(unsigned)((rows + FLASH2_WARPS - 1) / FLASH2_WARPS), kThreads>>>(D, dout16, dout, out, rows);
    const size_t smem = flash2_bwd_smem(HS);
    cuda_check(cudaFuncSetAttribute(flash2_bwd_kv<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
               "flash2_backward: shared memory");
    const float scale = 1.0f / sqrtf((float)HS);
    const dim3 grid((unsigned)flash2_bwd_blocks(T), (unsigned)(B * NH));
    flash2_bwd_kv<HS><<<grid, kThreads, smem>>>(dqkv, dq_part, qkv, dout16, lse, D, T, NH, scale);
    const int64_t n = (int64_t)B * NH * T * HS;
    flash2_bwd_dq<HS><<<cuda_blocks(n, kThreads), kThreads>>>(dqkv, dq_part, B, T, NH, scale);
}

}  // namespace flash2

extern "C" int flash2_backward(bf16 *dqkv, float *scratch, const float *dout, const bf16 *qkv, const bf16 *out,
                               const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH) {
    const void *ptrs[] = {dqkv, dout, qkv, out, scratch};
    const char *names[] = {"dqkv", "dout", "qkv", "out", "scratch"};
    if (flash2_check("flash2_backward", B, T, C, NH, ptrs, names, 5)) return 1;
    if (B == 0 || T == 0) return 0;
    flash2::bf16 *dx = (flash2::bf16 *)dqkv;
    const flash2::bf16 *x = (const flash2::bf16 *)qkv, *y = (const flash2::bf16 *)out;
    switch (C / NH) {
    case 32: flash2::launch_backward<32>(dx, scratch, dout, x, y, lse, (int)B, (int)T, (int)NH); break;
    case 64: flash2::launch_backward<64>(dx, scratch, dout, x, y, lse, (int)B, (int)T, (int)NH); break;
    default: flash2::launch_backward<128>(dx, scratch, dout, x, y, lse, (int)B, (int)T, (int)NH); break;
    }
    cuda_done("flash2_backward");
    return 0;
}
