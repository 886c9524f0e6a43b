// Warp-level tensor-core tiles for flash attention (flash_forward.cu,
// flash_backward.cu): the bf16 m16n8k16 product through inline PTX, its
// fragment layouts, ldmatrix loads of those fragments from shared memory,
// and the fp32 -> bf16 tile loads from global memory. Device code only.
//
// Fragment layouts of mma.m16n8k16 .bf16 with fp32 accumulators (PTX ISA,
// "Matrix fragments for mma.m16n8k16"), lane = threadIdx.x % 32,
// g = lane / 4 (the quad), t = lane % 4 (the lane in its quad):
//   A (16 x 16, row-major operand), 4 registers of 2 bf16:
//     a[0] = A[g][2t, 2t+1]     a[1] = A[g+8][2t, 2t+1]
//     a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
//   B (16 x 8, "col": B[k][n] for k down, n across), 2 registers:
//     b[0] = B[2t, 2t+1][g]     b[1] = B[2t+8, 2t+9][g]
//   C, D (16 x 8, fp32), 4 registers:
//     c[0], c[1] = C[g][2t, 2t+1]     c[2], c[3] = C[g+8][2t, 2t+1]
// A register's lower-indexed element is in its low 16 bits. So a thread
// holds 2 rows (g, g+8) of every 8-column block of C, and the C fragments
// of two neighbouring 8-column blocks (columns 16k.. 16k+15) are, packed in
// pairs, exactly the A fragment of those 16 columns as the k range of the
// next product: a[0] = block 2k's c[0..1], a[1] = its c[2..3], a[2] =
// block 2k+1's c[0..1], a[3] = its c[2..3]: C block n's row r (c[2r],
// c[2r+1]) is A register [n / 2][2 (n % 2) + r] of chunk n / 2. That is how the
// probabilities go from S = Q K^T straight into P V without shared memory.
// Everything per row stays in one quad (lanes 4g..4g+3): a row reduction is
// the thread's own values, then __shfl_xor over lane bits 1 and 2.
#ifndef SHARDLAB_FLASH_ATTENTION_MMA_H
#define SHARDLAB_FLASH_ATTENTION_MMA_H

#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>

#include "flash_attention.h"

namespace flash {

typedef __nv_bfloat16 bf16;

constexpr int kTile = FLASH_ATTENTION_TILE;  // rows and columns of a score tile
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRowsPerWarp = 16;             // the m of m16n8k16
static_assert(kWarps * kRowsPerWarp == kTile, "each warp owns 16 rows of the tile");
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// Row stride (in bf16) of a 64 x hs operand tile in shared memory: hs + 8.
// Rows stay 16-byte aligned (ldmatrix needs that), and since 2 hs bytes is
// a multiple of 64, consecutive rows start 16 bytes further along the 128
// bytes of the banks (mod 128), so the 8 row addresses of one ldmatrix
// 8 x 8 matrix hit 8 different 16-byte bank groups: no conflicts.
template <int HS>
struct Ld {
    static constexpr int op = HS + 8;
};
constexpr size_t tile_bytes(int ld) { return (size_t)kTile * ld * sizeof(bf16); }

// ---- one product: c += a b (16 x 16 times 16 x 8) ----
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as one register of 2 bf16 (round to nearest even), lo in the
// low half; the rounded values are returned too (l sums what P V uses).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi, float *lo_r = nullptr, float *hi_r = nullptr) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    if (lo_r) *lo_r = __low2float(v);
    if (hi_r) *hi_r = __high2float(v);
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

// ---- ldmatrix: four 8 x 8 bf16 matrices, lanes 8i..8i+7 giving the row
// addresses of matrix i; without .trans lane receives, from matrix i into
// r[i], M[g][2t, 2t+1]; with .trans it receives M[2t, 2t+1][g]. ----
__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// The A fragment of the 16 x 16 block at column c0 of x's first 16 rows
// (row-major, row stride ld). Matrix i = lane / 8 covers rows 8 (i & 1),
// columns c0 + 8 (i >> 1): r[0] = x[g][c0 + 2t..], r[1] = x[g + 8][c0 +
// 2t..], r[2] = x[g][c0 + 8 + 2t..], r[3] = x[g + 8][c0 + 8 + 2t..], the
// A layout above.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16 *x, int ld, int c0) {
    const int lane = threadIdx.x % 32, i = lane / 8, r = lane % 8;
    ldmatrix_x4(a, x + (8 * (i & 1) + r) * ld + c0 + 8 * (i >> 1));
}

// B fragments for a product with x^T, x row-major with one row per output
// column (B[k][n] = x[n][k]: Q K^T, K Q^T, dO V^T, V dO^T): output columns
// n0..n0+15 (two 8-column blocks), k = columns k0..k0+15 of x. Matrix i
// covers rows n0 + 8 (i >> 1), columns k0 + 8 (i & 1); without .trans
// lane gets x[n0 + g][k0 + 2t..] = B[2t..][g] from matrix 0: b[0] of block
// n0; matrix 1 (k + 8): its b[1]; matrices 2, 3: b[0], b[1] of block n0 + 8.
__device__ __forceinline__ void load_b_of_transposed(uint32_t (&b)[4], const bf16 *x, int ld, int n0, int k0) {
    const int lane = threadIdx.x % 32, i = lane / 8, r = lane % 8;
    ldmatrix_x4(b, x + (n0 + 8 * (i >> 1) + r) * ld + k0 + 8 * (i & 1));
}

// B fragments for a product with x itself, x row-major with one row per k
// (B[k][n] = x[k][n]: P V, P^T dO, dS^T Q, dS K): k = rows k0..k0+15,
// output columns n0..n0+15. Matrix i covers rows k0 + 8 (i & 1), columns
// n0 + 8 (i >> 1); .trans gives lane x[k0 + 2t..][n0 + g] = B[2t..][g]
// from matrix 0: b[0] of block n0; matrix 1 (rows + 8): its b[1];
// matrices 2, 3: b[0], b[1] of block n0 + 8.
__device__ __forceinline__ void load_b(uint32_t (&b)[4], const bf16 *x, int ld, int k0, int n0) {
    const int lane = threadIdx.x % 32, i = lane / 8, r = lane % 8;
    ldmatrix_x4_trans(b, x + (k0 + 8 * (i & 1) + r) * ld + n0 + 8 * (i >> 1));
}

// ---- warp products ----

// s (16 x N, N / 8 C fragments) = a x^T: a the warp's 16 rows of a 64 x hs
// operand tile, x the N rows (of hs) that give s's columns. Unscaled.
template <int HS, int N>
__device__ __forceinline__ void product_abt(float (&s)[N / 8][4], const bf16 *a, const bf16 *x) {
#pragma unroll
    for (int n = 0; n < N / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int k0 = 0; k0 < HS; k0 += 16) {
        uint32_t fa[4];
        load_a(fa, a, Ld<HS>::op, k0);
#pragma unroll
        for (int n0 = 0; n0 < N; n0 += 16) {
            uint32_t fb[4];
            load_b_of_transposed(fb, x, Ld<HS>::op, n0, k0);
            mma_16816(s[n0 / 8], fa, fb[0], fb[1]);
            mma_16816(s[n0 / 8 + 1], fa, fb[2], fb[3]);
        }
    }
}

// acc (16 x hs, hs / 8 C fragments) += p x: p a 16 x N bf16 register tile
// as A fragments, x the N rows (of hs) of a row-major operand tile.
template <int HS, int N>
__device__ __forceinline__ void product_ab_acc(float (&acc)[HS / 8][4], const uint32_t (&p)[N / 16][4],
                                               const bf16 *x) {
#pragma unroll
    for (int k = 0; k < N / 16; k++)
#pragma unroll
        for (int n0 = 0; n0 < HS; n0 += 16) {
            uint32_t fb[4];
            load_b(fb, x, Ld<HS>::op, 16 * k, n0);
            mma_16816(acc[n0 / 8], p[k], fb[0], fb[1]);
            mma_16816(acc[n0 / 8 + 1], p[k], fb[2], fb[3]);
        }
}

// ---- quad reductions: the 4 lanes of a row, a fixed butterfly ----
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- global memory ----

// Rows [row0, row0 + 64) of one head's hs columns (src: row 0, column 0 of
// the head; rows `stride` floats apart) into dst (row stride Ld::op) as
// bf16, round to nearest even; rows at or past T are zeros. Four columns
// per thread and step: one float4 load when `vec` (src and stride 16-byte
// aligned, flash_attention.cu checks), else four float loads; one 8-byte
// shared store (dst's rows and 4-column groups are 8-byte aligned).
template <int HS>
__device__ __forceinline__ void load_tile(bf16 *dst, const float *src, int64_t stride, int row0, int T, bool vec) {
    constexpr int kQuads = HS / 4;  // float4s per row
    static_assert(kTile * kQuads % kThreads == 0, "every thread takes the same number of float4s");
#pragma unroll
    for (int step = 0; step < kTile * kQuads / kThreads; step++) {
        const int idx = step * kThreads + threadIdx.x, r = idx / kQuads, c = idx % kQuads * 4, row = row0 + r;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row < T) {
            const float *p = src + (int64_t)row * stride + c;
            x = vec ? *(const float4 *)p : make_float4(p[0], p[1], p[2], p[3]);
        }
        const uint2 u = make_uint2(pack_bf16(x.x, x.y), pack_bf16(x.z, x.w));
        *(uint2 *)(dst + r * Ld<HS>::op + c) = u;
    }
}

// 64 per-row values [row0, row0 + 64) of src times `scale`; zeros past T.
__device__ __forceinline__ void load_rows(float *dst, const float *src, int row0, int T, float scale) {
    for (int r = threadIdx.x; r < kTile; r += kThreads) dst[r] = row0 + r < T ? src[row0 + r] * scale : 0.0f;
}

// Row r (0: g, 1: g + 8) of a warp's 16 x hs C fragments, times `scale`,
// to dst (that row's column 0): columns 8n + 2t, 8n + 2t + 1 for each n;
// one 8-byte store when `vec` (dst 8-byte aligned), else two.
template <int HS>
__device__ __forceinline__ void store_row(float *dst, const float (&acc)[HS / 8][4], int r, float scale, bool vec) {
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < HS / 8; n++) {
        const float x0 = acc[n][2 * r] * scale, x1 = acc[n][2 * r + 1] * scale;
        float *p = dst + 8 * n + 2 * t;
        if (vec)
            *(float2 *)p = make_float2(x0, x1);
        else
            p[0] = x0, p[1] = x1;
    }
}

}  // namespace flash

#endif
