/* The dtype conversion passes, counted: bufops.h's widen, narrow, round
 * and accumulate on the counter's memory space (fc->space), each call's
 * time and the bytes it reads and writes added to the counter's kernel
 * profile (counters.h: KERNEL_WIDEN ... KERNEL_ACCUMULATE). Every pass
 * that exists only because a value is kept in two dtypes goes through
 * these, so the kernel table shows what mixed precision costs in memory
 * traffic, and a test can hold the default path to the passes the math
 * needs. Implemented in model/conversions.c. */
#ifndef SHARDLAB_CONVERSIONS_H
#define SHARDLAB_CONVERSIONS_H

#include <stddef.h>

#include "counters.h"
#include "dtype.h"

/* dst (fp32) = src (bf16): 2n bytes read, 4n written. */
void conv_widen(struct exec_ctx *fc, float *dst, const bf16 *src, size_t n);
/* dst (bf16) = src (fp32) rounded to nearest even: 4n read, 2n written. */
void conv_narrow(struct exec_ctx *fc, bf16 *dst, const float *src, size_t n);
/* The bytes of a narrow pass of n values. A host kernel timed as a whole
 * that narrows inside (a bf16 GEMM rounding its fp32 operands:
 * model/cpu/matmul_onednn.c) runs the host's form itself and adds these
 * under KERNEL_NARROW; the time stays the kernel's. */
static inline size_t conv_narrow_bytes(size_t n) { return n * (sizeof(float) + sizeof(bf16)); }
/* x rounded to bf16 in place (4n read, 4n written), and with dst also
 * stored there (2n more written). */
void conv_round(struct exec_ctx *fc, float *x, bf16 *dst, size_t n);
/* dst (bf16) += src (fp32), one rounding per element: 6n read, 2n written. */
void conv_accumulate(struct exec_ctx *fc, bf16 *dst, const float *src, size_t n);

#endif
