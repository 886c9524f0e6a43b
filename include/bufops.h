/* Buffer operations: everything outside the layer kernels that touches
 * parameter, gradient, activation or optimizer memory goes through these
 * (and the update rules of include/optim.h), so a device build replaces
 * them with its own implementation of the same names. The CPU build's is
 * model/cpu/bufops.c. Counts are elements unless a name says bytes. */
#ifndef SHARDLAB_BUFOPS_H
#define SHARDLAB_BUFOPS_H

#include <stddef.h>

#include "dtype.h"

void buf_zero(void *dst, size_t bytes);
void buf_copy(void *dst, const void *src, size_t bytes);

/* dst (fp32) = src (bf16), exact. */
void buf_widen(float *dst, const bf16 *src, size_t n);
/* dst (bf16) = src (fp32) rounded to nearest even. */
void buf_narrow(bf16 *dst, const float *src, size_t n);
/* x = the fp32 value nearest x that bf16 can hold (in place). */
void buf_round_bf16(float *x, size_t n);
/* Both at once: x rounded in place as buf_round_bf16 rounds it, and dst
 * (bf16) = that value (buf_narrow's bits). A saved activation is rounded
 * for the forward and packed for the backward in one pass. */
void buf_round_narrow(bf16 *dst, float *x, size_t n);

/* dst (dt) = src (fp32): a copy, or a rounding to bf16. */
void buf_from_fp32(void *dst, enum dtype dt, const float *src, size_t n);
/* dst (fp32) = src (dt): a copy, or an exact widening. */
void buf_to_fp32(float *dst, const void *src, enum dtype dt, size_t n);

/* dst (dt) += src (fp32), one rounding per element when dt is bf16. */
void buf_accumulate(void *dst, enum dtype dt, const float *src, size_t n);
/* dst += src, both in dt (bf16: summed in fp32, rounded once). */
void buf_add(void *dst, const void *src, enum dtype dt, size_t n);

/* Sum of squares of n values of dtype dt, accumulated in double. */
double buf_sum_squares(const void *src, enum dtype dt, size_t n);

#endif
