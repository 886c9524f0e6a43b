/* include/layers.h's attention_lse_* on device memory: flash attention
 * (flash_attention.h), its FLOPs flash_attention_flops' issued numbers. A
 * shape it does not take (a head size other than 32, 64, 128) exits
 * non-zero with its message (the trainer refuses such a run at start-up:
 * device_check_flash_attention). */
#include <stdio.h>
#include <stdlib.h>

#include "flash_attention.h"
#include "layers_cuda.h"

/* flash_attention.h's kernels return non-zero for a shape they do not
 * take, after their message; layers.h's functions return nothing. */
static void flash_or_exit(const char *op, int rc) {
    if (rc == 0) return;
    fprintf(stderr, "error: %s: flash attention refused the shape (above)\n", op);
    exit(EXIT_FAILURE);
}

void attention_lse_forward_cuda(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                                struct exec_ctx *fc) {
    flash_or_exit("attention_lse_forward", flash_attention_forward(out, lse, qkv, B, T, C, NH));
    struct flash_attention_flops f = flash_attention_flops(B, T, C, NH);
    fc->attention += f.forward_mma;
    fc->other += f.forward_other;
}

void attention_lse_backward_cuda(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                                 const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                                 struct exec_ctx *fc) {
    flash_or_exit("attention_lse_backward", flash_attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH));
    struct flash_attention_flops f = flash_attention_flops(B, T, C, NH);
    fc->attention += f.backward_mma;
    fc->other += f.backward_other;
}
