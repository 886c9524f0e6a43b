/* Block-wise quantize / dequantize on the 8-bit dynamic map: the scalar
 * definition (qmap_nearest_indexed + bitsandbytes' sign fix; map[q] *
 * absmax) and AVX2 / AVX-512 versions of it, chosen at run time. The vector
 * kernels do the same IEEE operations in the same order per element, so
 * their codes and values equal the scalar ones bit for bit
 * (tests/test_optim8.c compares them on random and edge inputs).
 *
 * The vector search, per lane: the order key of x / absmax, one load from
 * the index's step table by the key's top 16 bits, then code = the bucket's
 * first code, plus one past the bucket's midpoint, plus the even-code rule on
 * it; NaN gives 0. A code's sign is its index < n_negative. */
#include <math.h>

#include "optim.h"

/* ---- scalar: the definition */

static uint8_t quantize_one(const float *map, const struct qmap_index *ix, float absmax, float x, bool sign_fix) {
    int c = qmap_nearest_indexed(map, ix, x / absmax);
    if (sign_fix && !signbit(map[c]) != !signbit(x)) c += x > 0.0f ? 1 : -1;
    return (uint8_t)c;
}

static void quantize_scalar(const float *map, const struct qmap_index *ix, float absmax, const float *x, size_t n,
                            bool sign_fix, uint8_t *q) {
    for (size_t i = 0; i < n; i++) q[i] = quantize_one(map, ix, absmax, x[i], sign_fix);
}

static void dequantize_scalar(const float *map, float absmax, const uint8_t *q, size_t n, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = map[q[i]] * absmax;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define QMAP_X86 1

/* ---- AVX-512 (F, BW, VL, VBMI): 16 lanes, the tail under a mask */

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))

AVX512 static __m512i search16(const struct qmap_index *ix, __m512 x) {
    const __m512i one = _mm512_set1_epi32(1), sign = _mm512_set1_epi32((int)0x80000000u);
    __m512i u = _mm512_castps_si512(x);
    /* order key: negative -> ~u, else u | sign */
    __mmask16 neg = _mm512_test_epi32_mask(u, sign);
    __m512i key = _mm512_mask_xor_epi32(_mm512_or_si512(u, sign), neg, u, _mm512_set1_epi32(-1));
    __m512i e = _mm512_i32gather_epi32(_mm512_srli_epi32(key, 16), (const void *)ix->step, 4);
    __m512i first = _mm512_srli_epi32(e, 24), thr = _mm512_and_si512(e, _mm512_set1_epi32(0x1ffff));
    __m512i low = _mm512_and_si512(key, _mm512_set1_epi32(0xffff));
    __m512i r = _mm512_mask_add_epi32(first, _mm512_cmpgt_epi32_mask(low, thr), first, one);
    r = _mm512_mask_add_epi32(r, _mm512_cmpeq_epi32_mask(low, thr), r, _mm512_and_si512(first, one)); /* a tie: even */
    return _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_setzero_si512()); /* NaN */
}

AVX512 static void quantize_avx512(const struct qmap_index *ix, float absmax, const float *x,
                                   size_t n, bool sign_fix, uint8_t *q) {
    const __m512 a = _mm512_set1_ps(absmax);
    const __m512i one = _mm512_set1_epi32(1), sign = _mm512_set1_epi32((int)0x80000000u);
    const __m512i n_neg = _mm512_set1_epi32(ix->n_negative);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 live = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 xi = _mm512_maskz_loadu_ps(live, x + i);
        __m512i r = search16(ix, _mm512_div_ps(xi, a));
        if (sign_fix) {
            __mmask16 code_neg = _mm512_cmplt_epi32_mask(r, n_neg);
            __mmask16 x_neg = _mm512_test_epi32_mask(_mm512_castps_si512(xi), sign);
            __mmask16 differ = (__mmask16)(code_neg ^ x_neg);
            __mmask16 up = _mm512_cmp_ps_mask(xi, _mm512_setzero_ps(), _CMP_GT_OQ);
            r = _mm512_mask_add_epi32(r, (__mmask16)(differ & up), r, one);
            r = _mm512_mask_sub_epi32(r, (__mmask16)(differ & ~up), r, one);
        }
        _mm512_mask_cvtepi32_storeu_epi8(q + i, live, r); /* keeps the low 8 bits, like the (uint8_t) cast */
    }
}

/* Dequantize 64 codes at a time by byte lookups (VBMI's vpermi2b: a
 * 128-entry byte table per instruction) in the four byte planes of the map,
 * then the bytes interleaved back into floats. The unpacks interleave within
 * 128-bit lanes, so the codes are first put in the order that makes the
 * floats come out in order: output register k, lane L holds the floats
 * 16k + 4L .. +3, which the unpacks take from input bytes 16L + 4k .. +3. */
AVX512 static void dequantize_avx512(const struct qmap_index *ix, float absmax, const uint8_t *q, size_t n,
                                     float *out) {
    const __m512 a = _mm512_set1_ps(absmax);
    __m512i t[4][4];
    for (int p = 0; p < 4; p++)
        for (int h = 0; h < 4; h++) t[p][h] = _mm512_loadu_si512((const void *)(ix->planes[p] + 64 * h));
    uint8_t order[64];
    for (int L = 0; L < 4; L++)
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 4; j++) order[16 * L + 4 * k + j] = (uint8_t)(16 * k + 4 * L + j);
    const __m512i perm = _mm512_loadu_si512((const void *)order);
    for (size_t i = 0; i < n; i += 64) {
        __mmask64 live = n - i >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (n - i)) - 1);
        __m512i idx = _mm512_permutexvar_epi8(perm, _mm512_maskz_loadu_epi8(live, q + i));
        __mmask64 upper = _mm512_movepi8_mask(idx); /* codes 128..255 */
        __m512i b[4];
        for (int p = 0; p < 4; p++)
            b[p] = _mm512_mask_blend_epi8(upper, _mm512_permutex2var_epi8(t[p][0], idx, t[p][1]),
                                          _mm512_permutex2var_epi8(t[p][2], idx, t[p][3]));
        __m512i lo01 = _mm512_unpacklo_epi8(b[0], b[1]), hi01 = _mm512_unpackhi_epi8(b[0], b[1]);
        __m512i lo23 = _mm512_unpacklo_epi8(b[2], b[3]), hi23 = _mm512_unpackhi_epi8(b[2], b[3]);
        __m512i f[4] = {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
                        _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
        for (int k = 0; k < 4; k++) {
            __mmask16 m = (__mmask16)(live >> (16 * k));
            _mm512_mask_storeu_ps(out + i + 16 * k, m, _mm512_mul_ps(_mm512_castsi512_ps(f[k]), a));
        }
    }
}

/* ---- AVX2: 8 lanes, the tail in scalar code */

#define AVX2 __attribute__((target("avx2")))

AVX2 static __m256i blend_i32(__m256i a, __m256i b, __m256i mask) {
    return _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), _mm256_castsi256_ps(mask)));
}

AVX2 static __m256i search8(const struct qmap_index *ix, __m256 x) {
    const __m256i one = _mm256_set1_epi32(1), sign = _mm256_set1_epi32((int)0x80000000u);
    __m256i u = _mm256_castps_si256(x);
    /* order key: u ^ (all ones if negative, else the sign bit) */
    __m256i key = _mm256_xor_si256(u, _mm256_or_si256(_mm256_srai_epi32(u, 31), sign));
    __m256i e = _mm256_i32gather_epi32((const int *)(const void *)ix->step, _mm256_srli_epi32(key, 16), 4);
    __m256i first = _mm256_srli_epi32(e, 24), thr = _mm256_and_si256(e, _mm256_set1_epi32(0x1ffff));
    __m256i low = _mm256_and_si256(key, _mm256_set1_epi32(0xffff));
    __m256i r = _mm256_sub_epi32(first, _mm256_cmpgt_epi32(low, thr)); /* compares give -1 */
    r = _mm256_add_epi32(r, _mm256_and_si256(_mm256_cmpeq_epi32(low, thr), _mm256_and_si256(first, one)));
    return blend_i32(r, _mm256_setzero_si256(), _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
}

AVX2 static void quantize_avx2(const float *map, const struct qmap_index *ix, float absmax, const float *x, size_t n,
                               bool sign_fix, uint8_t *q) {
    const __m256 a = _mm256_set1_ps(absmax);
    const __m256i n_neg = _mm256_set1_epi32(ix->n_negative), low8 = _mm256_set1_epi32(0xff);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xi = _mm256_loadu_ps(x + i);
        __m256i r = search8(ix, _mm256_div_ps(xi, a));
        if (sign_fix) {
            __m256i code_neg = _mm256_cmpgt_epi32(n_neg, r);
            __m256i x_neg = _mm256_srai_epi32(_mm256_castps_si256(xi), 31);
            __m256i differ = _mm256_xor_si256(code_neg, x_neg);
            __m256i up = _mm256_castps_si256(_mm256_cmp_ps(xi, _mm256_setzero_ps(), _CMP_GT_OQ));
            __m256i step = _mm256_or_si256(_mm256_and_si256(up, _mm256_set1_epi32(1)),
                                           _mm256_andnot_si256(up, _mm256_set1_epi32(-1)));
            r = _mm256_add_epi32(r, _mm256_and_si256(differ, step));
        }
        r = _mm256_and_si256(r, low8); /* the (uint8_t) cast, so the packs below cannot saturate */
        __m128i w16 = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storel_epi64((__m128i *)(void *)(q + i), _mm_packus_epi16(w16, w16));
    }
    quantize_scalar(map, ix, absmax, x + i, n - i, sign_fix, q + i);
}

AVX2 static void dequantize_avx2(const float *map, float absmax, const uint8_t *q, size_t n, float *out) {
    const __m256 a = _mm256_set1_ps(absmax);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(q + i)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_i32gather_ps(map, idx, 4), a));
    }
    dequantize_scalar(map, absmax, q + i, n - i, out + i);
}
#endif

bool qmap_isa_available(enum qmap_isa isa) {
    switch (isa) {
    case QMAP_ISA_SCALAR: return true;
#ifdef QMAP_X86
    case QMAP_ISA_AVX2: return __builtin_cpu_supports("avx2");
    case QMAP_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi");
#endif
    default: return false;
    }
}

enum qmap_isa qmap_isa_best(void) {
    for (int i = QMAP_NUM_ISAS - 1; i > 0; i--)
        if (qmap_isa_available((enum qmap_isa)i)) return (enum qmap_isa)i;
    return QMAP_ISA_SCALAR;
}

/* The index's isa caps the request: it was picked for this CPU and map. */
void qmap_quantize(const float map[QMAP_SIZE], const struct qmap_index *ix, enum qmap_isa isa, float absmax,
                   const float *x, size_t n, bool sign_fix, uint8_t *q) {
    if (isa > ix->isa) isa = ix->isa;
#ifdef QMAP_X86
    if (isa == QMAP_ISA_AVX512) {
        quantize_avx512(ix, absmax, x, n, sign_fix, q);
        return;
    }
    if (isa == QMAP_ISA_AVX2) {
        quantize_avx2(map, ix, absmax, x, n, sign_fix, q);
        return;
    }
#endif
    quantize_scalar(map, ix, absmax, x, n, sign_fix, q);
}

void qmap_dequantize(const float map[QMAP_SIZE], const struct qmap_index *ix, enum qmap_isa isa, float absmax,
                     const uint8_t *q, size_t n, float *out) {
    if (!ix) isa = QMAP_ISA_SCALAR;
    else if (isa > ix->isa) isa = ix->isa;
#ifdef QMAP_X86
    if (isa == QMAP_ISA_AVX512) {
        dequantize_avx512(ix, absmax, q, n, out);
        return;
    }
    if (isa == QMAP_ISA_AVX2) {
        dequantize_avx2(map, absmax, q, n, out);
        return;
    }
#endif
    dequantize_scalar(map, absmax, q, n, out);
}
