/* The host side of v2's FlashAttention-2 kernels (flash2.h): the shape and
 * alignment check, the scratch size, the FLOPs issued, and layers.h's
 * attention_lse_forward_bf16_cuda / attention_lse_backward_bf16_cuda (the
 * bf16 data path's flash attention on device memory; --gpu_path v2 only,
 * compiled, not run on a GPU). A shape the kernels do not take exits
 * non-zero with flash2_check's message, as v1's attention_lse_*_cuda do. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "flash2.h"
#include "flash2_schedule.h"
#include "layers.h"

enum { GRID_Y_MAX = 65535, ALIGN_BYTES = 16 };
/* fc->other, as the CPU forms count it (layers.h), over the issued scores:
 * forward per score 5, per row hs + 3; backward per score 5, per row 4 hs. */
enum { PER_SCORE = 5, FWD_PER_ROW = 3, BWD_PER_ROW_HS = 4 };

int flash2_check(const char *who, int64_t B, int64_t T, int64_t C, int64_t NH, const void *const *ptrs, int nptrs) {
    if (B < 0 || T < 0 || C <= 0 || NH <= 0 || C % NH != 0) {
        fprintf(stderr, "%s: bad shape B %lld, T %lld, C %lld, NH %lld (need B, T >= 0 and NH dividing C > 0)\n", who,
                (long long)B, (long long)T, (long long)C, (long long)NH);
        return 1;
    }
    const int64_t hs = C / NH;
    if (hs != 64 && hs != 128) {
        fprintf(stderr, "%s: head size %lld (C %lld / NH %lld) unsupported: the v2 flash kernels take 64 or 128\n",
                who, (long long)hs, (long long)C, (long long)NH);
        return 1;
    }
    /* grid.y = B NH, the int row indices of the kernels */
    if (B * NH > GRID_Y_MAX || B * T * 3 * C > INT32_MAX) {
        fprintf(stderr, "%s: B %lld x NH %lld heads (at most %d) or B T 3C %lld (at most %d) too large\n", who,
                (long long)B, (long long)NH, GRID_Y_MAX, (long long)(B * T * 3 * C), INT32_MAX);
        return 1;
    }
    for (int i = 0; i < nptrs; i++)
        if (ptrs[i] && (uintptr_t)ptrs[i] % ALIGN_BYTES != 0) {
            fprintf(stderr, "%s: pointer %d (%p) not on %d bytes: the kernels copy 16-byte chunks (cp.async)\n", who,
                    i, ptrs[i], ALIGN_BYTES);
            return 1;
        }
    return 0;
}

size_t flash2_backward_scratch(int64_t B, int64_t T, int64_t C, int64_t NH) {
    return flash2_scratch_layout(B, T, C, NH).total;
}

static int quiet_ok(int64_t B, int64_t T, int64_t C, int64_t NH) {
    return B >= 0 && T >= 0 && C > 0 && NH > 0 && C % NH == 0 && (C / NH == 64 || C / NH == 128);
}

double flash2_forward_flops(int64_t B, int64_t T, int64_t C, int64_t NH) {
    return quiet_ok(B, T, C, NH) ? (double)B * NH * flash2_fwd_mma_flops(T, C / NH) : 0.0;
}

double flash2_backward_flops(int64_t B, int64_t T, int64_t C, int64_t NH) {
    return quiet_ok(B, T, C, NH) ? (double)B * NH * flash2_bwd_mma_flops(T, C / NH) : 0.0;
}

size_t attention_lse_bf16_cuda_scratch(int64_t B, int64_t T, int64_t C, int64_t NH) {
    return flash2_backward_scratch(B, T, C, NH);
}

static void flash2_or_exit(const char *op, int rc) {
    if (rc == 0) return;
    fprintf(stderr, "error: %s: the v2 flash attention refused the shape (above)\n", op);
    exit(EXIT_FAILURE);
}

void attention_lse_forward_bf16_cuda(bf16 *out, float *lse, const bf16 *qkv, int64_t B, int64_t T, int64_t C,
                                     int64_t NH, struct flop_counter *fc) {
    flash2_or_exit("attention_lse_forward_bf16", flash2_forward(out, lse, qkv, B, T, C, NH));
    const int64_t hs = C / NH;
    const double scores = (double)B * NH * flash2_fwd_warp_tiles(T) * FLASH2_WARP_ROWS * FLASH2_FWD_KEYS;
    fc->attention += flash2_forward_flops(B, T, C, NH);
    fc->other += scores * PER_SCORE + (double)B * NH * T * (double)(hs + FWD_PER_ROW);
}

void attention_lse_backward_bf16_cuda(bf16 *dqkv, float *scratch, const float *dout, const bf16 *qkv,
                                      const bf16 *out, const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                                      struct flop_counter *fc) {
    flash2_or_exit("attention_lse_backward_bf16",
                   flash2_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH));
    const int64_t hs = C / NH;
    const double scores = (double)B * NH * flash2_bwd_warp_tiles(T) * FLASH2_WARP_ROWS * FLASH2_BWD_QUERIES;
    fc->attention += flash2_backward_flops(B, T, C, NH);
    fc->other += scores * PER_SCORE + (double)B * NH * T * (double)(BWD_PER_ROW_HS * hs);
}
