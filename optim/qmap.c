/* The 8-bit "dynamic" (tree) quantization map of Dettmers et al. 2021 and the
 * nearest-code search over it. See THEORY.md (shared notes) 2.2 and 2.3; this follows
 * bitsandbytes' create_dynamic_map(signed, max_exponent_bits=7, total_bits=8)
 * step by step, in float32 throughout, so the 256 values match it bit for bit
 * (as far as torch's float32 linspace and scalar multiply round the same way). */
#include <math.h>
#include <stdlib.h>

#include "optim.h"

enum { QMAP_EXP_BITS = 7, QMAP_TOTAL_BITS = 8, QMAP_NON_SIGN_BITS = QMAP_TOTAL_BITS - 1 };

/* With E = 7 = non_sign_bits the reference's "additional_items" tail is empty
 * (2^(7-7) - 1 = 0), so it is left out here. */
_Static_assert(QMAP_NON_SIGN_BITS == QMAP_EXP_BITS, "additional_items would be nonzero");

/* torch.linspace on CPU in float32: step computed in float, the first half
 * counted up from start and the second half down from end (symmetric). */
static float linspace_f32(float start, float end, int steps, int idx) {
    const float step = (end - start) / (float)(steps - 1);
    if (idx < steps / 2) return start + step * (float)idx;
    return end - step * (float)(steps - idx - 1);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* 10^k for k = -6..0 as Python's 10 ** k (a double), then cast to float32 as
 * torch does when it multiplies a float32 tensor by a Python scalar. */
static float pow10_f32(int k) {
    static const double p[7] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1e0};
    return (float)p[k + 6];
}

void qmap_dynamic(float map[QMAP_SIZE], bool is_signed) {
    int len = 0;
    for (int i = 0; i < QMAP_EXP_BITS; i++) {
        /* decade i: n_i boundaries in [0.1, 1], n_i - 1 midpoints, scaled
         * into (10^(i-7), 10^(i-6)); unsigned reuses the sign bit as one
         * more fraction bit, so it has twice the values per decade */
        const int shift = i + QMAP_NON_SIGN_BITS - QMAP_EXP_BITS + (is_signed ? 0 : 1);
        const int n_i = (1 << shift) + 1;
        const float scale = pow10_f32(-(QMAP_EXP_BITS - 1) + i);
        for (int j = 0; j + 1 < n_i; j++) {
            const float mean = (linspace_f32(0.1f, 1.0f, n_i, j) + linspace_f32(0.1f, 1.0f, n_i, j + 1)) / 2.0f;
            map[len++] = scale * mean;
            if (is_signed) map[len++] = -scale * mean;
        }
    }
    map[len++] = 0.0f;
    map[len++] = 1.0f;
    while (len < QMAP_SIZE) map[len++] = 0.0f; /* never taken with the defaults */
    qsort(map, QMAP_SIZE, sizeof map[0], cmp_float);
}


/* The vector kernels' table (include/optim.h). The nearest code is the
 * number of midpoints mid[j] = fl((map[j-1] + map[j]) * 0.5) below x, a tie
 * going to the even code, which is qmap_round's answer when every midpoint
 * lies strictly between its two codes. False when the map breaks that or a
 * bucket holds two midpoints. */
static bool qmap_step_table(uint32_t step[1 << 16], const float map[QMAP_SIZE]) {
    uint32_t key[QMAP_SIZE]; /* key[j] of mid[j], j >= 1 */
    for (int j = 1; j < QMAP_SIZE; j++) {
        float mid = (map[j - 1] + map[j]) * 0.5f;
        if (!(map[j - 1] < mid && mid < map[j])) return false;
        key[j] = qmap_order_key(mid);
    }
    int j = 1; /* the first midpoint not below the current bucket */
    for (uint32_t b = 0; b < (1u << 16); b++) {
        while (j < QMAP_SIZE && key[j] >> 16 < b) j++;
        uint32_t first = (uint32_t)(j - 1), thr = 0x10000u;
        if (j < QMAP_SIZE && key[j] >> 16 == b) {
            if (j + 1 < QMAP_SIZE && key[j + 1] >> 16 == b) return false;
            thr = key[j] & 0xffffu;
        }
        step[b] = first << 24 | thr;
    }
    return true;
}

void qmap_index_build(struct qmap_index *ix, const float map[QMAP_SIZE]) {
    unsigned k = 0; /* codes below the current bucket's first key */
    for (uint32_t b = 0; b < (1u << 16); b++) {
        uint32_t first = b << 16;
        while (k < QMAP_SIZE && qmap_order_key(map[k]) < first) k++;
        ix->below[b] = (uint16_t)k;
    }
    bool steps_ok = qmap_step_table(ix->step, map);
    /* The vector kernels tell a code's sign by its index: the sign bits must
     * form a prefix (a sorted map without a -0 after +0). */
    unsigned neg = 0;
    while (neg < QMAP_SIZE && signbit(map[neg])) neg++;
    bool prefix = true;
    for (unsigned i = neg; i < QMAP_SIZE; i++) prefix = prefix && !signbit(map[i]);
    ix->n_negative = (uint16_t)neg;
    for (int c = 0; c < QMAP_SIZE; c++)
        for (int b = 0; b < 4; b++) ix->planes[b][c] = (uint8_t)(f32_bits(map[c]) >> (8 * b));
    ix->isa = prefix && steps_ok ? qmap_isa_best() : QMAP_ISA_SCALAR;
}
