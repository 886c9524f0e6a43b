/* The host side of v2's FlashAttention-2 kernels (flash2.h): which shapes
 * and pointers they take, their scratch size, and the tensor-core FLOPs
 * they issue (flash2_schedule.h's counts). */
#include <stdint.h>
#include <stdio.h>

#include "../flash_attention.h"
#include "flash2.h"
#include "flash2_schedule.h"

enum { GRID_Y_MAX = 65535, ALIGN_BYTES = 16 };

int flash2_check(const char *who, int64_t B, int64_t T, int64_t C, int64_t NH, const void *const *ptrs,
                 const char *const *names, int nptrs) {
    /* the shape and head sizes v1's kernels take (32, 64, 128) are v2's too */
    if (flash_attention_check(who, B, T, C, NH)) return 1;
    /* grid.y = B NH, the int row indices of the kernels */
    if (B * NH > GRID_Y_MAX || B * T * 3 * C > INT32_MAX) {
        fprintf(stderr, "%s: B %lld x NH %lld heads (at most %d) or B T 3C %lld (at most %d) too large\n", who,
                (long long)B, (long long)NH, GRID_Y_MAX, (long long)(B * T * 3 * C), INT32_MAX);
        return 1;
    }
    for (int i = 0; i < nptrs; i++)
        if (ptrs[i] && (uintptr_t)ptrs[i] % ALIGN_BYTES != 0) {
            fprintf(stderr, "%s: %s (%p) not on %d bytes: the kernels copy 16-byte chunks (cp.async)\n", who,
                    names[i], ptrs[i], ALIGN_BYTES);
            return 1;
        }
    return 0;
}

size_t flash2_backward_scratch(int64_t B, int64_t T, int64_t C, int64_t NH) {
    return flash2_scratch_layout(B, T, C, NH).total;
}

static int quiet_ok(int64_t B, int64_t T, int64_t C, int64_t NH) {
    return B >= 0 && T >= 0 && C > 0 && NH > 0 && C % NH == 0 && (C / NH == 32 || C / NH == 64 || C / NH == 128);
}

double flash2_forward_flops(int64_t B, int64_t T, int64_t C, int64_t NH) {
    return quiet_ok(B, T, C, NH) ? (double)B * NH * flash2_fwd_mma_flops(T, C / NH) : 0.0;
}

double flash2_backward_flops(int64_t B, int64_t T, int64_t C, int64_t NH) {
    return quiet_ok(B, T, C, NH) ? (double)B * NH * flash2_bwd_mma_flops(T, C / NH) : 0.0;
}
