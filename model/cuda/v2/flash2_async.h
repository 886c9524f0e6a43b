// The device pieces v2's FlashAttention-2 kernels add to v1's tensor-core
// tiles (model/cuda/flash_attention_mma.h: mma m16n8k16, ldmatrix, the
// fragment layouts): cp.async copies of bf16 tiles from global to shared
// memory (LDGSTS on sm_80+), which let a block load the next tile while it
// multiplies the current one, and the A fragment of a transposed operand.
// Device code only.
#ifndef SHARDLAB_FLASH2_ASYNC_H
#define SHARDLAB_FLASH2_ASYNC_H

#include <cuda_bf16.h>
#include <stdint.h>

#include "../flash_attention_mma.h"
#include "flash2_schedule.h"

namespace flash2 {

using flash::bf16;
constexpr int kThreads = 32 * FLASH2_WARPS;
constexpr int kChunk = 8;  // bf16 per 16-byte cp.async

// 16 bytes global -> shared, without a register; `valid` false writes
// zeros instead (src-size 0: the rows past T), src then not read.
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(flash::smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most N of this thread's groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ROWS rows [row0, row0 + ROWS) of one head's HS bf16 columns (src: row 0,
// column 0 of the head; rows `stride` elements apart; 16-byte aligned,
// flash2_check) into dst (row stride HS + FLASH2_PAD) with cp.async; rows
// at or past T are zeros. The caller commits the group.
template <int HS, int ROWS>
__device__ __forceinline__ void load_tile_async(bf16 *dst, const bf16 *src, int64_t stride, int row0, int T) {
    constexpr int kPerRow = HS / kChunk, kLd = HS + FLASH2_PAD;
    static_assert(ROWS * kPerRow % kThreads == 0, "every thread copies the same number of chunks");
#pragma unroll
    for (int step = 0; step < ROWS * kPerRow / kThreads; step++) {
        const int idx = step * kThreads + (int)threadIdx.x, r = idx / kPerRow, c = idx % kPerRow * kChunk;
        const bool valid = row0 + r < T;
        const bf16 *p = src + (valid ? (int64_t)(row0 + r) * stride : 0) + c;
        cp_async16(dst + r * kLd + c, p, valid);
    }
}

// The A fragment of A = X^T's 16 x 16 block at rows m0 (of A), columns k0,
// X row-major with one row per k (row stride ld): A[m][k] = X[k][m]. With
// .trans, matrix i at X rows k0 + 8 (i >> 1), columns m0 + 8 (i & 1) gives
// lane X[k0 + 2t..][m0 + g] = A[m0 + g][k0 + 2t..]: a[0]; columns + 8 (A
// rows + 8): a[1]; rows + 8 (A columns + 8): a[2]; both: a[3].
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const bf16 *x, int ld, int k0, int m0) {
    const int lane = threadIdx.x % 32, i = lane / 8, r = lane % 8;
    flash::ldmatrix_x4_trans(a, x + (k0 + 8 * (i >> 1) + r) * ld + m0 + 8 * (i & 1));
}

// A warp's 16 x 64 score fragments (8 C blocks) packed as the A fragments
// of the next product (4 chunks of 16 columns; flash_attention_mma.h): C
// block n's row r is A register [n / 2][2 (n % 2) + r].
__device__ __forceinline__ void pack_a(uint32_t (&a)[4][4], const float (&c)[8][4]) {
#pragma unroll
    for (int n = 0; n < 8; n++) {
        a[n / 2][2 * (n % 2)] = flash::pack_bf16(c[n][0], c[n][1]);
        a[n / 2][2 * (n % 2) + 1] = flash::pack_bf16(c[n][2], c[n][3]);
    }
}

}  // namespace flash2

#endif
