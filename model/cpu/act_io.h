/* Loads and stores of the CPU kernels that read and write either dtype of
 * an activation (a kernel defined once over its element types by a macro,
 * instantiated for fp32 and for bf16): a bf16 load widens (exact), a bf16
 * store rounds to nearest even, the one rounding a bf16-out kernel makes.
 * The fp32 instances compile to the plain loads and stores. */
#ifndef SHARDLAB_ACT_IO_H
#define SHARDLAB_ACT_IO_H

#include <stdint.h>

#include "dtype.h"

static inline float act_ld_f32(const float *p, int64_t i) { return p[i]; }
static inline float act_ld_bf16(const bf16 *p, int64_t i) { return bf16_to_f32(p[i]); }
static inline void act_st_f32(float *p, int64_t i, float v) { p[i] = v; }
static inline void act_st_bf16(bf16 *p, int64_t i, float v) { p[i] = f32_to_bf16(v); }

/* tile (n rows of w values, packed) = the bf16 rows at src, ld apart,
 * widened (exact): a kernel's per-thread fp32 operand of a GEMM or dot
 * product over a strided view of a bf16 store. */
static inline void act_widen_rows(float *tile, const bf16 *src, int64_t ld, int64_t n, int64_t w) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t d = 0; d < w; d++) tile[t * w + d] = bf16_to_f32(src[t * ld + d]);
}

/* One head's q, k and v (T rows of hs each) widened into three tiles, from
 * head: its q columns in a bf16 qkv store of rows 3C long (k C and v 2C
 * further on): the attention's bf16 forms (plain and flash) share it. */
static inline void act_widen_qkv(float *q, float *k, float *v, const bf16 *head, int64_t C, int64_t T,
                                 int64_t hs) {
    act_widen_rows(q, head, 3 * C, T, hs);
    act_widen_rows(k, head + C, 3 * C, T, hs);
    act_widen_rows(v, head + 2 * C, 3 * C, T, hs);
}

#define ACT_LD(p, i) _Generic((p), const float *: act_ld_f32, float *: act_ld_f32, \
                              const bf16 *: act_ld_bf16, bf16 *: act_ld_bf16)((p), (i))
#define ACT_ST(p, i, v) _Generic((p), float *: act_st_f32, bf16 *: act_st_bf16)((p), (i), (v))

#endif
