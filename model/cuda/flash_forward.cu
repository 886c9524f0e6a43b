// Flash attention's forward kernel, FlashAttention-2 (Dao 2023) at the
// register level (flash_attention.h; the fragment layouts in
// flash_attention_mma.h).
//
// Tiling. A thread block of 4 warps takes one (batch, head) and one tile of
// 64 queries; each warp owns 16 of them, and a thread of the warp the two
// rows g = lane / 4 and g + 8 of them. Q, K and V go to shared memory as
// bf16 (64 x hs each, converted once per tile); everything else lives in
// registers: the 16 x 64 score tile S as C fragments, the softmax state (m,
// l) per row, the probabilities P as A fragments, and the 16 x hs output O
// as C fragments. Per key tile 0..i (causal):
//   S = Q K^T / sqrt(hs)              masked j > i on the diagonal tile
//   m_new = max(m, rowmax S)          the running row maximum
//   P = bf16(exp(S - m_new))          unnormalised probabilities, rounded
//   l = exp(m - m_new) l + rowsum P   the running row sum (of the rounded P)
//   O = exp(m - m_new) O + P V        the unnormalised output
// and at the end out = O / l, lse = m + log l. This is the online softmax
// (Milakov & Gimelshein 2018) as FlashAttention-2 orders it: O rescaled by
// the correction factor each step, divided by l once, at the end. The
// scores are kept in log2 units (scaled by log2(e) / sqrt(hs)) so that each
// exponential is one exp2f; m is in those units too, lse is converted back.
// A thread's l holds only its own columns' share of the row sum (every
// lane of a quad applies the same correction, since m is reduced over the
// quad each step); the quad's four shares are added once, at the end.
#include <cuda_bf16.h>
#include <math.h>

#include "cuda_check.h"
#include "flash_attention_kernels.h"
#include "flash_attention_mma.h"

namespace flash {
namespace {

// Shared memory: Q, K, V, one padded 64 x hs bf16 tile each.
template <int HS>
constexpr size_t fwd_smem_bytes() {
    return 3 * tile_bytes(Ld<HS>::op);
}

// grid (B NH, nt); block y takes query tile nt-1-y, so the longest rows of
// key tiles start first. scale_log2 = log2(e) / sqrt(hs).
template <int HS>
__global__ void __launch_bounds__(kThreads) flash_forward(float *out, float *lse, const float *qkv, int T, int NH,
                                                          float scale_log2, bool vec) {
    constexpr int ld = Ld<HS>::op;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *Ks = Qs + kTile * ld, *Vs = Ks + kTile * ld;

    const int C = NH * HS, bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int64_t C3 = 3 * (int64_t)C;
    const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * kTile;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const float *q_src = qkv + (int64_t)b * T * C3 + (int64_t)h * HS, *k_src = q_src + C, *v_src = q_src + 2 * C;

    load_tile<HS>(Qs, q_src, C3, q0, T, vec);  // the first __syncthreads below publishes it
    const bf16 *Q_w = Qs + warp * kRowsPerWarp * ld;  // this warp's 16 query rows
    const int i0 = q0 + warp * kRowsPerWarp + g;      // query of this thread's row 0; row 1 is i0 + 8

    float o[HS / 8][4];  // O, C fragments: o[n][2r + e] = O[row r][8n + 2t + e]
#pragma unroll
    for (int n = 0; n < HS / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // per row r; l: this thread's share

    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * kTile;
        __syncthreads();  // every warp is done with the last K, V
        load_tile<HS>(Ks, k_src, C3, k0, T, vec);
        load_tile<HS>(Vs, v_src, C3, k0, T, vec);
        __syncthreads();

        float s[kTile / 8][4];  // S, C fragments: s[n][2r + e] = S[row r][key column 8n + 2t + e]
        product_abt<HS, kTile>(s, Q_w, Ks);

        // Scale to log2 units; on the diagonal tile mask the keys j > i.
        // (Keys past T only occur in the last tile, which is the diagonal
        // tile of the last query tile, and j <= i < T masks them for every
        // row that is stored; the rows past T are never stored.)
        const bool diagonal = kt == qt;
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int n = 0; n < kTile / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e / 2, i = i0 + 8 * r, j = k0 + 8 * n + 2 * t + e % 2;
                s[n][e] = !diagonal || j <= i ? s[n][e] * scale_log2 : -INFINITY;
                mx[r] = fmaxf(mx[r], s[n][e]);
            }
        float correction[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            // Key 0 is in every row's tile 0, so m is finite from the first
            // tile on; the guard keeps a row without any key at P = 0
            // instead of exp(-inf + inf) = NaN.
            float m_new = quad_max(mx[r]);
            if (m_new == -INFINITY) m_new = 0.0f;
            correction[r] = exp2f(m[r] - m_new);  // 0 on the first tile (m = -inf)
            m[r] = m_new;
        }

        // P = bf16(exp2(s - m)), straight into A fragments; l sums the
        // rounded probabilities, the ones P V uses.
        uint32_t p[kTile / 16][4];
        float sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int n = 0; n < kTile / 8; n++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float p0, p1;
                // block n's row r is a[n / 2][2 (n % 2) + r] (flash_attention_mma.h)
                p[n / 2][2 * (n % 2) + r] =
                    pack_bf16(exp2f(s[n][2 * r] - m[r]), exp2f(s[n][2 * r + 1] - m[r]), &p0, &p1);
                sum[r] += p0 + p1;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) l[r] = correction[r] * l[r] + sum[r];
#pragma unroll
        for (int n = 0; n < HS / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[n][e] *= correction[e / 2];

        product_ab_acc<HS, kTile>(o, p, Vs);  // O += P V
    }

    // out = O / l, lse = m + log l (natural units), for the rows that exist.
    const float ln2 = kLn2;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float row_l = quad_sum(l[r]);  // every lane, outside the branch: the shuffle needs the whole warp
        const int i = i0 + 8 * r;
        if (i >= T) continue;
        store_row<HS>(out + ((int64_t)b * T + i) * C + (int64_t)h * HS, o, r, 1.0f / row_l, vec);
        if (t == 0) lse[(int64_t)bh * T + i] = (m[r] + log2f(row_l)) * ln2;
    }
}

}  // namespace

template <int HS>
void launch_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, bool vec) {
    const size_t bytes = fwd_smem_bytes<HS>();
    cuda_check(cudaFuncSetAttribute(flash_forward<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
               "flash_attention_forward (shared memory size)");
    dim3 grid((unsigned)(B * NH), (unsigned)((T + kTile - 1) / kTile));
    flash_forward<HS><<<grid, kThreads, bytes>>>(out, lse, qkv, T, NH, kLog2e / sqrtf((float)HS), vec);
}

template void launch_forward<32>(float *, float *, const float *, int, int, int, bool);
template void launch_forward<64>(float *, float *, const float *, int, int, int, bool);
template void launch_forward<128>(float *, float *, const float *, int, int, int, bool);

}  // namespace flash
