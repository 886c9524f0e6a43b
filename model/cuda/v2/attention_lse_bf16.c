/* layers.h's attention_lse_forward_bf16_cuda / attention_lse_backward_bf16_cuda:
 * the bf16 data path's flash attention on device memory (--gpu_path v2
 * only; flash2.h's kernels, compiled, not run on a GPU), counted as the
 * kernels issue. A shape the kernels do not take exits non-zero with
 * flash2_check's message, as v1's attention_lse_*_cuda do. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "flash2.h"
#include "flash2_schedule.h"
#include "../layers_cuda.h"

/* fc->other, as the CPU forms count it (layers.h), over the issued scores:
 * forward per score 5, per row hs + 3; backward per score 5, per row 4 hs. */
enum { PER_SCORE = 5, FWD_PER_ROW = 3, BWD_PER_ROW_HS = 4 };

static void flash2_or_exit(const char *op, int rc) {
    if (rc == 0) return;
    fprintf(stderr, "error: %s: the v2 flash attention refused the shape (above)\n", op);
    exit(EXIT_FAILURE);
}

void attention_lse_forward_bf16_cuda(bf16 *out, float *lse, const bf16 *qkv, float *scratch, int64_t B, int64_t T,
                                     int64_t C, int64_t NH, struct exec_ctx *fc) {
    (void)scratch; /* the forward takes none on the device */
    flash2_or_exit("attention_lse_forward_bf16", flash2_forward(out, lse, qkv, B, T, C, NH));
    const int64_t hs = C / NH;
    const double scores = (double)B * NH * flash2_fwd_warp_tiles(T) * FLASH2_WARP_ROWS * FLASH2_FWD_KEYS;
    fc->attention += flash2_forward_flops(B, T, C, NH);
    fc->other += scores * PER_SCORE + (double)B * NH * T * (double)(hs + FWD_PER_ROW);
}

void attention_lse_backward_bf16_cuda(bf16 *dqkv, float *scratch, const float *dout, const bf16 *qkv,
                                      const bf16 *out, const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                                      struct exec_ctx *fc) {
    flash2_or_exit("attention_lse_backward_bf16",
                   flash2_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH));
    const int64_t hs = C / NH;
    const double scores = (double)B * NH * flash2_bwd_warp_tiles(T) * FLASH2_WARP_ROWS * FLASH2_BWD_QUERIES;
    fc->attention += flash2_backward_flops(B, T, C, NH);
    fc->other += scores * PER_SCORE + (double)B * NH * T * (double)(BWD_PER_ROW_HS * hs);
}
