/* Precision as data: the two storage types the trainer knows, and the bf16
 * conversions every module shares. All arithmetic happens in fp32; bf16 is a
 * storage format (the top 16 bits of an IEEE-754 binary32). */
#ifndef SHARDLAB_DTYPE_H
#define SHARDLAB_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* DTYPE_U8 is raw bytes for resume sections (8-bit optimizer codes):
 * no kernel, buffer operation or collective takes it. */
enum dtype { DTYPE_FP32, DTYPE_BF16, DTYPE_U8 };
/* How fp32 values become bf16 params: nearest-even, or stochastic. */
enum rounding_mode { ROUND_NEAREST, ROUND_STOCHASTIC };

typedef uint16_t bf16;

static inline size_t dtype_size(enum dtype dt) { return dt == DTYPE_FP32 ? 4 : dt == DTYPE_BF16 ? 2 : 1; }
static inline const char *dtype_name(enum dtype dt) { return dt == DTYPE_FP32 ? "fp32" : dt == DTYPE_BF16 ? "bf16" : "u8"; }

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float bf16_to_f32(bf16 h) { return f32_from_bits((uint32_t)h << 16); }

/* Round-to-nearest-even on the bit pattern. Denormals need no special case:
 * the bias trick rounds their mantissa like any other. Inf passes through
 * (its low bits are zero); NaN is kept quiet so it cannot round to Inf. */
static inline bf16 f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x0040u);
    uint32_t lsb = (u >> 16) & 1u;
    return (bf16)((u + 0x7fffu + lsb) >> 16);
}

/* Stochastic rounding: add 16 random bits below the kept mantissa, then
 * truncate, so E[result] == f. `noise` supplies those bits. */
static inline bf16 f32_to_bf16_stochastic(float f, uint32_t noise) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) >= 0x7f800000u) return f32_to_bf16(f); /* Inf/NaN */
    uint32_t r = u + (noise & 0xffffu);
    if ((r & 0x7f800000u) == 0x7f800000u) return (bf16)(u >> 16); /* never round a finite value up to Inf */
    return (bf16)(r >> 16);
}

/* The fp32 value closest to f that bf16 can hold (RNE). */
static inline float round_to_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

/* Index of the first NaN or Inf among n values of dtype dt at x (all
 * exponent bits set, in either format); n when every value is finite. */
static inline size_t dtype_first_nonfinite(const void *x, enum dtype dt, size_t n) {
    if (dt == DTYPE_U8) return n; /* bytes (8-bit codes) are never non-finite */
    if (dt == DTYPE_BF16) {
        const bf16 *h = (const bf16 *)x;
        for (size_t i = 0; i < n; i++)
            if ((h[i] & 0x7f80u) == 0x7f80u) return i;
        return n;
    }
    const unsigned char *b = (const unsigned char *)x;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, b + 4 * i, sizeof u);
        if ((u & 0x7f800000u) == 0x7f800000u) return i;
    }
    return n;
}

/* "nan", "+inf" or "-inf" for the non-finite value i of x. */
static inline const char *dtype_nonfinite_name(const void *x, enum dtype dt, size_t i) {
    uint32_t u;
    if (dt == DTYPE_BF16) u = (uint32_t)((const bf16 *)x)[i] << 16;
    else memcpy(&u, (const unsigned char *)x + 4 * i, sizeof u);
    if (u & 0x007fffffu) return "nan";
    return (u >> 31) ? "-inf" : "+inf";
}

#endif
