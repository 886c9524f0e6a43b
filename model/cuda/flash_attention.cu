// Fused causal attention, FlashAttention-2 (Dao 2023): the public entry
// points of flash_attention.h. They check the shape, pick the head size's
// kernels (flash_forward.cu, flash_backward.cu; their tensor-core tiles in
// flash_attention_mma.h), launch them and wait; and count the FLOPs the
// kernels issue.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda_check.h"
#include "flash_attention.h"
#include "flash_attention_kernels.h"

namespace {

constexpr int kTile = FLASH_ATTENTION_TILE;
constexpr int kWarps = 4;        // warps per block of the D kernel (grid.x = B NH T / 4)
constexpr int kMaxTiles = 65535; // grid.y

int64_t tiles(int64_t T) { return (T + kTile - 1) / kTile; }

// The kernels load float4 and store float2 when every tensor starts on 16
// bytes (the row strides C and 3C and the head offsets h hs are multiples
// of 4 floats, hs being); a pointer into the middle of a buffer may not.
bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

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
    const bool vec = aligned16(out) && aligned16(qkv);
    switch (C / NH) {
    case 32: flash::launch_forward<32>(out, lse, qkv, (int)B, (int)T, (int)NH, vec); break;
    case 64: flash::launch_forward<64>(out, lse, qkv, (int)B, (int)T, (int)NH, vec); break;
    default: flash::launch_forward<128>(out, lse, qkv, (int)B, (int)T, (int)NH, vec); break;
    }
    cuda_done("flash_attention_forward");
    return 0;
}

size_t flash_attention_backward_scratch(int64_t B, int64_t T, int64_t NH) { return (size_t)(B * NH * T); }

int flash_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                             const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH) {
    if (flash_attention_check("flash_attention_backward", B, T, C, NH)) return 1;
    if (B == 0 || T == 0) return 0;
    const bool vec = aligned16(dqkv) && aligned16(dout) && aligned16(qkv);
    const int b = (int)B, t = (int)T, nh = (int)NH;
    switch (C / NH) {
    case 32: flash::launch_backward<32>(dqkv, scratch, dout, qkv, out, lse, b, t, nh, vec); break;
    case 64: flash::launch_backward<64>(dqkv, scratch, dout, qkv, out, lse, b, t, nh, vec); break;
    default: flash::launch_backward<128>(dqkv, scratch, dout, qkv, out, lse, b, t, nh, vec); break;
    }
    cuda_done("flash_attention_backward");
    return 0;
}

struct flash_attention_flops flash_attention_flops(int64_t B, int64_t T, int64_t C, int64_t NH) {
    struct flash_attention_flops f = {0, 0, 0, 0, 0, 0};
    if (flash_attention_check("flash_attention_flops", B, T, C, NH)) return f;
    // The per-element constants below are the operations in the kernels
    // (flash_forward.cu, flash_backward.cu), one for each; flash_attention.h
    // lists them.
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
