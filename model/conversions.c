/* include/conversions.h: bufops.h's conversions, timed and their bytes
 * counted in the kernel profile. */
#include "conversions.h"

#include "bufops.h"

enum { F32 = sizeof(float), BF16 = sizeof(bf16) };

static void counted(struct exec_ctx *fc, enum kernel_kind k, double t0, size_t bytes) {
    kernel_profile_add(fc, k, t0);
    fc->profile[k].bytes += (double)bytes;
}

void conv_widen(struct exec_ctx *fc, float *dst, const bf16 *src, size_t n) {
    double t0 = kernel_clock();
    buf_widen(fc->space, dst, src, n);
    counted(fc, KERNEL_WIDEN, t0, n * (BF16 + F32));
}

void conv_narrow(struct exec_ctx *fc, bf16 *dst, const float *src, size_t n) {
    double t0 = kernel_clock();
    buf_narrow(fc->space, dst, src, n);
    counted(fc, KERNEL_NARROW, t0, conv_narrow_bytes(n));
}

void conv_round(struct exec_ctx *fc, float *x, bf16 *dst, size_t n) {
    double t0 = kernel_clock();
    if (dst) buf_round_narrow(fc->space, dst, x, n);
    else buf_round_bf16(fc->space, x, n);
    counted(fc, KERNEL_ROUND, t0, n * (2 * F32 + (dst ? BF16 : 0)));
}

void conv_accumulate(struct exec_ctx *fc, bf16 *dst, const float *src, size_t n) {
    double t0 = kernel_clock();
    buf_accumulate(fc->space, dst, DTYPE_BF16, src, n);
    counted(fc, KERNEL_ACCUMULATE, t0, n * (F32 + 2 * BF16));
}
