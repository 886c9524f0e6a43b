// Fused causal attention, FlashAttention-2 (Dao 2023), forward and backward
// (flash_attention.h). Readable rather than fast: wmma 16x16x16 bf16
// products with fp32 accumulators, every score tile staged in shared memory
// so that the softmax reads it by (row, column) and never depends on the
// accumulators' register layout.
//
// Tiling. A thread block of 4 warps takes one (batch, head) and one tile of
// 64 rows (queries in the forward and dQ kernels, keys in the dK/dV
// kernel); each warp owns 16 of those rows, the wmma M, and everything
// computed per row (scores, softmax state, accumulators) is that warp's
// alone. Between the steps of one warp a __syncwarp orders its lanes'
// shared-memory traffic; the tiles all warps read (K and V, or Q and dO)
// are reloaded only between two __syncthreads.
//
// Forward, per query tile Q (64 x hs), over key tiles 0..i (causal):
//   S = Q K^T / sqrt(hs)                    64 x 64, fp32, masked j > i
//   m_new = max(m, rowmax S)                the running row maximum
//   P = exp(S - m_new)                      unnormalised probabilities
//   l = exp(m - m_new) l + rowsum P         the running row sum
//   O = exp(m - m_new) O + P V              the unnormalised output
// and at the end out = O / l, lse = m + log l. This is the online softmax
// (Milakov & Gimelshein 2018) as FlashAttention-2 orders it: O is rescaled
// by the correction factor each step and divided by l once, at the end.
//
// Backward. With D_i = sum_d dout_id out_id (= sum_j P_ij dP_ij), the
// probabilities are recomputed from the saved lse, P = exp(S - lse), never
// stored:
//   dV = P^T dO   dP = dO V^T   dS = P (dP - D)   dQ = dS K / sqrt(hs)
//   dK = dS^T Q / sqrt(hs)
// FlashAttention-2 has one block per key tile accumulate dK and dV and add
// its share of dQ atomically. Atomic float adds land in any order, so
// here dQ has its own kernel, one block per query tile walking the key
// tiles in order and recomputing S and dP (3 tile products, against 4 for
// dK/dV): deterministic at the price of 2 products per tile pair.
#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>
#include <stdio.h>

#include "cuda_check.h"
#include "flash_attention.h"

namespace {

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

constexpr int kTile = FLASH_ATTENTION_TILE;  // rows and columns of a score tile
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kW = 16;                       // wmma's m = n = k; also the rows per warp
static_assert(kWarps * kW == kTile, "each warp owns 16 rows of the tile");
static_assert(kTile == 64, "the softmax loops give each lane 2 of a row's 64 columns");
constexpr int kMaxTiles = 65535;             // grid.y

// Leading dimensions, padded against shared-memory bank conflicts while
// keeping wmma's rules: a multiple of 8 bf16 / 4 floats, and every
// fragment pointer 32-byte aligned (16 rows of any of them are).
constexpr int kLdS = kTile + 4;   // fp32 score tiles
constexpr int kLdP = kTile + 8;   // bf16 probability tiles

typedef wmma::fragment<wmma::matrix_a, kW, kW, kW, bf16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, kW, kW, kW, bf16, wmma::row_major> FragB;     // B[k][n] at p[k ld + n]
typedef wmma::fragment<wmma::matrix_b, kW, kW, kW, bf16, wmma::col_major> FragBt;    // B[k][n] at p[n ld + k]
typedef wmma::fragment<wmma::accumulator, kW, kW, kW, float> FragC;

template <int HS>
struct Ld {
    static constexpr int op = HS + 8;     // bf16 operand tiles (64 x hs)
    static constexpr int out = HS + 4;    // fp32 output tiles (64 x hs)
};

// Shared memory, carved in bytes; each region's size is a multiple of 128.
constexpr size_t op_bytes(int ld) { return (size_t)kTile * ld * sizeof(bf16); }
constexpr size_t f32_bytes(int ld) { return (size_t)kTile * ld * sizeof(float); }

template <int HS>
struct FwdSmem {
    static constexpr size_t q = 0, k = q + op_bytes(Ld<HS>::op), v = k + op_bytes(Ld<HS>::op);
    static constexpr size_t s = v + op_bytes(Ld<HS>::op), p = s + f32_bytes(kLdS), o = p + op_bytes(kLdP);
    static constexpr size_t bytes = o + f32_bytes(Ld<HS>::out);
};

// The backward kernels share one layout: two operand tiles that stay (A0,
// A1: K, V or Q, dO), two that are reloaded (B0, B1), the fp32 S and dP,
// the bf16 P and dS, and the 64 lse and D values of the query tile. After
// the loop the output tile is staged where S and dP were.
template <int HS>
struct BwdSmem {
    static constexpr size_t a0 = 0, a1 = a0 + op_bytes(Ld<HS>::op), b0 = a1 + op_bytes(Ld<HS>::op),
                            b1 = b0 + op_bytes(Ld<HS>::op);
    static constexpr size_t s = b1 + op_bytes(Ld<HS>::op), dp = s + f32_bytes(kLdS);
    static constexpr size_t p = dp + f32_bytes(kLdS), ds = p + op_bytes(kLdP);
    static constexpr size_t lse = ds + op_bytes(kLdP), d = lse + kTile * sizeof(float);
    static constexpr size_t bytes = d + kTile * sizeof(float);
    static constexpr size_t stage = s;
    static_assert(f32_bytes(Ld<HS>::out) <= 2 * f32_bytes(kLdS), "the output stage fits in S and dP");
};

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {  // a fixed butterfly: the same order every time
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Rows [row0, row0 + 64) of one head's hs columns (src: row 0, column 0 of
// the head; rows `stride` floats apart) into dst as bf16 (round to nearest
// even); rows at or past T are zeros.
template <int HS>
__device__ void load_tile(bf16 *dst, const float *src, int64_t stride, int row0, int T) {
    for (int idx = threadIdx.x; idx < kTile * HS; idx += kThreads) {
        const int r = idx / HS, d = idx % HS, t = row0 + r;
        const float x = t < T ? src[(int64_t)t * stride + d] : 0.0f;
        dst[r * Ld<HS>::op + d] = __float2bfloat16(x);
    }
}

// 64 per-row values [row0, row0 + 64) of src (one head's T values); zeros past T.
__device__ void load_rows(float *dst, const float *src, int row0, int T) {
    for (int r = threadIdx.x; r < kTile; r += kThreads) dst[r] = row0 + r < T ? src[row0 + r] : 0.0f;
}

// c (16 x 64, fp32, row stride kLdS) = a (16 x hs) b^T, where b (64 x hs)
// holds one row per column of c: the score products Q K^T, K Q^T, dO V^T,
// V dO^T. Both operands row-major bf16 operand tiles (row stride Ld::op);
// b^T read as a column-major matrix_b is b itself, no transpose needed.
template <int HS>
__device__ void product_abt(float *c, const bf16 *a, const bf16 *b) {
    for (int n = 0; n < kTile / kW; n++) {
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < HS; k += kW) {
            FragA fa;
            FragBt fb;
            wmma::load_matrix_sync(fa, a + k, Ld<HS>::op);
            wmma::load_matrix_sync(fb, b + n * kW * Ld<HS>::op + k, Ld<HS>::op);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(c + n * kW, acc, kLdS, wmma::mem_row_major);
    }
}

// acc[n] (16 x 16 column block n of a 16 x hs result) += a (16 x 64, bf16,
// row stride kLdP) b (64 x hs, bf16, row-major): P V, P^T dO, dS^T Q, dS K.
template <int HS>
__device__ void product_ab_acc(FragC (&acc)[HS / kW], const bf16 *a, const bf16 *b) {
#pragma unroll
    for (int n = 0; n < HS / kW; n++)
        for (int k = 0; k < kTile; k += kW) {
            FragA fa;
            FragB fb;
            wmma::load_matrix_sync(fa, a + k, kLdP);
            wmma::load_matrix_sync(fb, b + k * Ld<HS>::op + n * kW, Ld<HS>::op);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
}

// The warp's 16 x hs accumulators, times `scale`, into rows [row0, row0 +
// 16) of dst (row stride `stride` floats), rows at or past T left alone;
// staged through the warp's 16 rows of `stage` (fp32, row stride Ld::out).
template <int HS>
__device__ void store_rows(float *dst, int64_t stride, int row0, int T, FragC (&acc)[HS / kW], float scale,
                           float *stage) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int n = 0; n < HS / kW; n++) {
        for (int e = 0; e < acc[n].num_elements; e++) acc[n].x[e] *= scale;
        wmma::store_matrix_sync(stage + n * kW, acc[n], Ld<HS>::out, wmma::mem_row_major);
    }
    __syncwarp();
    for (int r = 0; r < kW; r++)
        if (row0 + r < T)
            for (int d = lane; d < HS; d += 32) dst[(int64_t)(row0 + r) * stride + d] = stage[r * Ld<HS>::out + d];
    __syncwarp();
}

// ---- forward: grid (B NH, nt); block y takes query tile nt-1-y, so the
// longest rows of key tiles start first ----
template <int HS>
__global__ void __launch_bounds__(kThreads) flash_forward(float *out, float *lse, const float *qkv, int T, int NH,
                                                          float scale) {
    typedef FwdSmem<HS> L;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)(smem + L::q), *Ks = (bf16 *)(smem + L::k), *Vs = (bf16 *)(smem + L::v);
    float *Ss = (float *)(smem + L::s), *Os = (float *)(smem + L::o);
    bf16 *Ps = (bf16 *)(smem + L::p);

    const int C = NH * HS, bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int64_t C3 = 3 * (int64_t)C;
    const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * kTile;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float *q_src = qkv + (int64_t)b * T * C3 + (int64_t)h * HS, *k_src = q_src + C, *v_src = q_src + 2 * C;

    load_tile<HS>(Qs, q_src, C3, q0, T);
    for (int idx = threadIdx.x; idx < kTile * Ld<HS>::out; idx += kThreads) Os[idx] = 0.0f;

    // This warp's 16 rows of each per-row tile, and its rows' softmax state
    // (every lane holds the same m and l: the warp reductions broadcast).
    const bf16 *Q_w = Qs + warp * kW * Ld<HS>::op;
    float *S_w = Ss + warp * kW * kLdS, *O_w = Os + warp * kW * Ld<HS>::out;
    bf16 *P_w = Ps + warp * kW * kLdP;
    float m[kW], l[kW];
#pragma unroll
    for (int r = 0; r < kW; r++) m[r] = -INFINITY, l[r] = 0.0f;

    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * kTile;
        __syncthreads();  // every warp is done with the last K, V (first time: Q and O are in place)
        load_tile<HS>(Ks, k_src, C3, k0, T);
        load_tile<HS>(Vs, v_src, C3, k0, T);
        __syncthreads();

        product_abt<HS>(S_w, Q_w, Ks);  // S = Q K^T, unscaled
        __syncwarp();

        // The online softmax, row by row; lane owns columns lane and lane + 32.
#pragma unroll
        for (int r = 0; r < kW; r++) {
            const int i = q0 + warp * kW + r;
            float s[2], mx = -INFINITY;
            for (int u = 0; u < 2; u++) {
                const int c = lane + 32 * u, j = k0 + c;
                s[u] = j <= i && j < T ? S_w[r * kLdS + c] * scale : -INFINITY;
                mx = fmaxf(mx, s[u]);
            }
            // Key 0 of tile 0 and the diagonal of the last tile keep every
            // row's maximum finite; the guard keeps a row that had no key
            // at all at P = 0 instead of exp(-inf + inf) = NaN.
            float m_new = fmaxf(m[r], warp_max(mx));
            if (m_new == -INFINITY) m_new = 0.0f;
            const float correction = expf(m[r] - m_new);
            float sum = 0.0f;
            for (int u = 0; u < 2; u++) {
                const bf16 p = __float2bfloat16(expf(s[u] - m_new));
                P_w[r * kLdP + lane + 32 * u] = p;
                sum += __bfloat162float(p);  // l sums the probabilities P V uses, rounded
            }
            l[r] = correction * l[r] + warp_sum(sum);
            m[r] = m_new;
            for (int d = lane; d < HS; d += 32) O_w[r * Ld<HS>::out + d] *= correction;
        }
        __syncwarp();

        // O += P V, through the accumulators (loaded from and stored to O)
        FragC acc[HS / kW];
#pragma unroll
        for (int n = 0; n < HS / kW; n++) wmma::load_matrix_sync(acc[n], O_w + n * kW, Ld<HS>::out, wmma::mem_row_major);
        product_ab_acc<HS>(acc, P_w, Vs);
#pragma unroll
        for (int n = 0; n < HS / kW; n++) wmma::store_matrix_sync(O_w + n * kW, acc[n], Ld<HS>::out, wmma::mem_row_major);
        __syncwarp();
    }

    // out = O / l, lse = m + log l, for the rows that exist.
#pragma unroll
    for (int r = 0; r < kW; r++) {
        const int i = q0 + warp * kW + r;
        if (i >= T) continue;
        const float inv = 1.0f / l[r];
        for (int d = lane; d < HS; d += 32)
            out[((int64_t)b * T + i) * C + (int64_t)h * HS + d] = O_w[r * Ld<HS>::out + d] * inv;
        if (lane == 0) lse[(int64_t)bh * T + i] = m[r] + logf(l[r]);
    }
}

// ---- backward, step 1: D (B,NH,T) = rowsum(dout * out), a warp per
// (batch, head, row); its index in D is the row number ----
__global__ void flash_backward_d(float *D, const float *dout, const float *out, int64_t rows, int T, int NH, int HS) {
    const int64_t row = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
    if (row >= rows) return;  // the whole warp: the shuffles below see all 32 lanes
    const int lane = threadIdx.x % 32;
    const int64_t b = row / ((int64_t)NH * T), h = row / T % NH, t = row % T;
    const int64_t at = (b * T + t) * NH * HS + h * HS;
    float sum = 0.0f;
    for (int d = lane; d < HS; d += 32) sum += dout[at + d] * out[at + d];
    sum = warp_sum(sum);
    if (lane == 0) D[row] = sum;
}

// ---- backward, step 2: dK and dV, grid (B NH, nt), block y takes key
// tile y and walks the query tiles y..nt-1 ----
template <int HS>
__global__ void __launch_bounds__(kThreads) flash_backward_dkdv(float *dqkv, const float *dout, const float *qkv,
                                                                const float *lse, const float *D, int T, int NH,
                                                                float scale) {
    typedef BwdSmem<HS> L;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Ks = (bf16 *)(smem + L::a0), *Vs = (bf16 *)(smem + L::a1);
    bf16 *Qs = (bf16 *)(smem + L::b0), *dOs = (bf16 *)(smem + L::b1);
    float *Ss = (float *)(smem + L::s), *dPs = (float *)(smem + L::dp);
    bf16 *Pb = (bf16 *)(smem + L::p), *dSb = (bf16 *)(smem + L::ds);
    float *lse_s = (float *)(smem + L::lse), *D_s = (float *)(smem + L::d);

    const int C = NH * HS, bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int64_t C3 = 3 * (int64_t)C;
    const int kt = blockIdx.y, k0 = kt * kTile, nt = gridDim.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float *q_src = qkv + (int64_t)b * T * C3 + (int64_t)h * HS, *k_src = q_src + C, *v_src = q_src + 2 * C;
    const float *do_src = dout + (int64_t)b * T * C + (int64_t)h * HS;

    load_tile<HS>(Ks, k_src, C3, k0, T);
    load_tile<HS>(Vs, v_src, C3, k0, T);

    // This warp's 16 keys: their rows of K, V and of the transposed tiles
    // S^T, dP^T, P^T, dS^T (rows: keys, columns: the 64 queries).
    const bf16 *K_w = Ks + warp * kW * Ld<HS>::op, *V_w = Vs + warp * kW * Ld<HS>::op;
    float *S_w = Ss + warp * kW * kLdS, *dP_w = dPs + warp * kW * kLdS;
    bf16 *P_w = Pb + warp * kW * kLdP, *dS_w = dSb + warp * kW * kLdP;
    FragC dk[HS / kW], dv[HS / kW];
#pragma unroll
    for (int n = 0; n < HS / kW; n++) wmma::fill_fragment(dk[n], 0.0f), wmma::fill_fragment(dv[n], 0.0f);

    for (int qt = kt; qt < nt; qt++) {
        const int q0 = qt * kTile;
        __syncthreads();  // every warp is done with the last Q, dO, lse, D (first time: K, V are in place)
        load_tile<HS>(Qs, q_src, C3, q0, T);
        load_tile<HS>(dOs, do_src, C, q0, T);
        load_rows(lse_s, lse + (int64_t)bh * T, q0, T);
        load_rows(D_s, D + (int64_t)bh * T, q0, T);
        __syncthreads();

        product_abt<HS>(S_w, K_w, Qs);    // S^T = K Q^T
        product_abt<HS>(dP_w, V_w, dOs);  // dP^T = V dO^T
        __syncwarp();
        for (int r = 0; r < kW; r++) {
            const int j = k0 + warp * kW + r;
            for (int u = 0; u < 2; u++) {
                const int c = lane + 32 * u, i = q0 + c;
                const bool live = j <= i && i < T;
                const float p = live ? expf(S_w[r * kLdS + c] * scale - lse_s[c]) : 0.0f;
                const float ds = p * (dP_w[r * kLdS + c] - D_s[c]);
                P_w[r * kLdP + c] = __float2bfloat16(p);
                dS_w[r * kLdP + c] = __float2bfloat16(ds);
            }
        }
        __syncwarp();
        product_ab_acc<HS>(dv, P_w, dOs);  // dV += P^T dO
        product_ab_acc<HS>(dk, dS_w, Qs);  // dK += dS^T Q (scaled at the end)
    }

    __syncthreads();  // the stage overlaps every warp's S and dP
    float *stage_w = (float *)(smem + L::stage) + warp * kW * Ld<HS>::out;
    float *dqkv_b = dqkv + (int64_t)b * T * C3 + (int64_t)h * HS;
    const int row0 = k0 + warp * kW;
    store_rows<HS>(dqkv_b + C, C3, row0, T, dk, scale, stage_w);
    store_rows<HS>(dqkv_b + 2 * C, C3, row0, T, dv, 1.0f, stage_w);
}

// ---- backward, step 3: dQ, grid (B NH, nt), block y takes query tile
// nt-1-y and walks the key tiles 0..that tile in order ----
template <int HS>
__global__ void __launch_bounds__(kThreads) flash_backward_dq(float *dqkv, const float *dout, const float *qkv,
                                                              const float *lse, const float *D, int T, int NH,
                                                              float scale) {
    typedef BwdSmem<HS> L;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)(smem + L::a0), *dOs = (bf16 *)(smem + L::a1);
    bf16 *Ks = (bf16 *)(smem + L::b0), *Vs = (bf16 *)(smem + L::b1);
    float *Ss = (float *)(smem + L::s), *dPs = (float *)(smem + L::dp);
    bf16 *dSb = (bf16 *)(smem + L::ds);
    float *lse_s = (float *)(smem + L::lse), *D_s = (float *)(smem + L::d);

    const int C = NH * HS, bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int64_t C3 = 3 * (int64_t)C;
    const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * kTile;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float *q_src = qkv + (int64_t)b * T * C3 + (int64_t)h * HS, *k_src = q_src + C, *v_src = q_src + 2 * C;

    load_tile<HS>(Qs, q_src, C3, q0, T);
    load_tile<HS>(dOs, dout + (int64_t)b * T * C + (int64_t)h * HS, C, q0, T);
    load_rows(lse_s, lse + (int64_t)bh * T, q0, T);
    load_rows(D_s, D + (int64_t)bh * T, q0, T);

    // This warp's 16 queries: their rows of Q, dO, S, dP, dS.
    const bf16 *Q_w = Qs + warp * kW * Ld<HS>::op, *dO_w = dOs + warp * kW * Ld<HS>::op;
    float *S_w = Ss + warp * kW * kLdS, *dP_w = dPs + warp * kW * kLdS;
    bf16 *dS_w = dSb + warp * kW * kLdP;
    FragC dq[HS / kW];
#pragma unroll
    for (int n = 0; n < HS / kW; n++) wmma::fill_fragment(dq[n], 0.0f);

    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * kTile;
        __syncthreads();  // every warp is done with the last K, V (first time: Q, dO, lse, D are in place)
        load_tile<HS>(Ks, k_src, C3, k0, T);
        load_tile<HS>(Vs, v_src, C3, k0, T);
        __syncthreads();

        product_abt<HS>(S_w, Q_w, Ks);    // S = Q K^T
        product_abt<HS>(dP_w, dO_w, Vs);  // dP = dO V^T
        __syncwarp();
        for (int r = 0; r < kW; r++) {
            const int row = warp * kW + r, i = q0 + row;
            for (int u = 0; u < 2; u++) {
                const int c = lane + 32 * u, j = k0 + c;
                const bool live = j <= i && i < T;
                const float p = live ? expf(S_w[r * kLdS + c] * scale - lse_s[row]) : 0.0f;
                dS_w[r * kLdP + c] = __float2bfloat16(p * (dP_w[r * kLdS + c] - D_s[row]));
            }
        }
        __syncwarp();
        product_ab_acc<HS>(dq, dS_w, Ks);  // dQ += dS K (scaled at the end)
    }

    __syncthreads();  // the stage overlaps every warp's S and dP
    float *stage_w = (float *)(smem + L::stage) + warp * kW * Ld<HS>::out;
    store_rows<HS>(dqkv + (int64_t)b * T * C3 + (int64_t)h * HS, C3, q0 + warp * kW, T, dq, scale, stage_w);
}

// ---- host side ----

int64_t tiles(int64_t T) { return (T + kTile - 1) / kTile; }

template <int HS>
void forward(float *out, float *lse, const float *qkv, int B, int T, int NH) {
    const size_t bytes = FwdSmem<HS>::bytes;
    cuda_check(cudaFuncSetAttribute(flash_forward<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
               "flash_attention_forward (shared memory size)");
    dim3 grid((unsigned)(B * NH), (unsigned)tiles(T));
    flash_forward<HS><<<grid, kThreads, bytes>>>(out, lse, qkv, T, NH, 1.0f / sqrtf((float)HS));
    cuda_done("flash_attention_forward");
}

template <int HS>
void backward(float *dqkv, float *D, const float *dout, const float *qkv, const float *out, const float *lse, int B,
              int T, int NH) {
    const size_t bytes = BwdSmem<HS>::bytes;
    const float scale = 1.0f / sqrtf((float)HS);
    cuda_check(cudaFuncSetAttribute(flash_backward_dkdv<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
               "flash_attention_backward (shared memory size)");
    cuda_check(cudaFuncSetAttribute(flash_backward_dq<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
               "flash_attention_backward (shared memory size)");
    const int64_t rows = (int64_t)B * NH * T;
    flash_backward_d<<<(unsigned)((rows + kWarps - 1) / kWarps), kThreads>>>(D, dout, out, rows, T, NH, HS);
    dim3 grid((unsigned)(B * NH), (unsigned)tiles(T));
    flash_backward_dkdv<HS><<<grid, kThreads, bytes>>>(dqkv, dout, qkv, lse, D, T, NH, scale);
    flash_backward_dq<HS><<<grid, kThreads, bytes>>>(dqkv, dout, qkv, lse, D, T, NH, scale);
    cuda_done("flash_attention_backward");
}

}  // namespace

extern "C" {

int flash_attention_check(const char *who, int64_t B, int64_t T, int64_t C, int64_t NH) {
    if (B < 0 || T < 0 || C <= 0 || NH <= 0 || C % NH != 0) {
        fprintf(stderr, "%s: bad shape B %lld, T %lld, C %lld, NH %lld (need B, T >= 0 and NH dividing C > 0)\n", who,
                (long long)B, (long long)T, (long long)C, (long long)NH);
        return 1;
    }
    const int64_t hs = C / NH;
    if (hs != 32 && hs != 64 && hs != 128) {
        fprintf(stderr, "%s: head size %lld (C %lld / NH %lld) unsupported: flash attention takes 32, 64 or 128\n",
                who, (long long)hs, (long long)C, (long long)NH);
        return 1;
    }
    // grid.x = B NH blocks (and B NH T / 4 for D), grid.y = the tiles
    if (B * NH > INT32_MAX || B * NH * T / kWarps >= INT32_MAX || tiles(T) > kMaxTiles || 3 * C > INT32_MAX) {
        fprintf(stderr, "%s: B %lld x NH %lld heads or T %lld (%lld tiles of %d, at most %d) too large\n", who,
                (long long)B, (long long)NH, (long long)T, (long long)tiles(T), kTile, kMaxTiles);
        return 1;
    }
    return 0;
}

int flash_attention_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
    if (flash_attention_check("flash_attention_forward", B, T, C, NH)) return 1;
    if (B == 0 || T == 0) return 0;
    switch (C / NH) {
    case 32: forward<32>(out, lse, qkv, (int)B, (int)T, (int)NH); break;
    case 64: forward<64>(out, lse, qkv, (int)B, (int)T, (int)NH); break;
    default: forward<128>(out, lse, qkv, (int)B, (int)T, (int)NH); break;
    }
    return 0;
}

size_t flash_attention_backward_scratch(int64_t B, int64_t T, int64_t NH) { return (size_t)(B * NH * T); }

int flash_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                             const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH) {
    if (flash_attention_check("flash_attention_backward", B, T, C, NH)) return 1;
    if (B == 0 || T == 0) return 0;
    switch (C / NH) {
    case 32: backward<32>(dqkv, scratch, dout, qkv, out, lse, (int)B, (int)T, (int)NH); break;
    case 64: backward<64>(dqkv, scratch, dout, qkv, out, lse, (int)B, (int)T, (int)NH); break;
    default: backward<128>(dqkv, scratch, dout, qkv, out, lse, (int)B, (int)T, (int)NH); break;
    }
    return 0;
}

struct flash_attention_flops flash_attention_flops(int64_t B, int64_t T, int64_t C, int64_t NH) {
    struct flash_attention_flops f = {0, 0, 0, 0, 0, 0};
    if (flash_attention_check("flash_attention_flops", B, T, C, NH)) return f;
    // The per-element constants below are the operations in the kernels
    // above, one for each; flash_attention.h lists them.
    enum { FWD_PER_SCORE = 5, FWD_PER_ROW_TILE = 5, FWD_PER_ROW_END = 3, BWD_PER_SCORE = 2 * 5 };
    const double hs = (double)(C / NH), heads = (double)B * NH, nt = (double)tiles(T), tile = kTile;
    const double pairs = nt * (nt + 1) / 2, G = 2.0 * tile * tile * hs;
    f.forward_mma = heads * pairs * 2 * G;
    f.backward_mma = heads * pairs * 7 * G;
    f.forward_other = heads * (pairs * tile * tile * FWD_PER_SCORE + pairs * tile * (hs + FWD_PER_ROW_TILE) +
                               (double)T * (hs + FWD_PER_ROW_END));
    f.backward_other = heads * (pairs * tile * tile * BWD_PER_SCORE + 2 * nt * tile * hs + (double)T * 2 * hs);
    f.forward_model = 4.0 * heads * (double)T * (double)T * hs;
    f.backward_model = 8.0 * heads * (double)T * (double)T * hs;
    return f;
}

}  // extern "C"
