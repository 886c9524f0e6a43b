/* bf16 conversions (include/dtype.h) and fast_expf (model/cpu/fastmath.h).
 * Round-to-nearest-even cases are built as exact fp32 bit patterns, so
 * "halfway" means exactly halfway. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../model/cpu/fastmath.h"
#include "bufops.h"
#include "dtype.h"
#include "rng.h"

/* f32 bit pattern -> bf16 pattern, RNE */
static bf16 rne(uint32_t bits) { return f32_to_bf16(f32_from_bits(bits)); }

#define assert_rne(in, want) assert_int_equal(rne(in), (want))

static int bf16_is_nan(bf16 h) { return (h & 0x7fffu) > 0x7f80u; }

/* Every bf16 value (all 65536 patterns) widens and narrows back to itself;
 * NaNs stay NaN (possibly quietened) and keep their sign. */
static void test_rne_exact_values(void **state) {
    (void)state;
    for (uint32_t h = 0; h <= 0xffffu; h++) {
        float f = bf16_to_f32((bf16)h);
        assert_int_equal(f32_bits(f), h << 16); /* widening is exact */
        bf16 back = f32_to_bf16(f);
        if (bf16_is_nan((bf16)h)) {
            assert_true(isnan(bf16_to_f32(back)));
            assert_int_equal(back & 0x8000u, h & 0x8000u);
        } else {
            assert_int_equal(back, h);
            assert_true(round_to_bf16(f) == f || isnan(f));
        }
    }
    assert_rne(0x3f800000u, 0x3f80); /* 1.0 */
    assert_rne(0xc0200000u, 0xc020); /* -2.5 */
}

static void test_rne_ties_to_even(void **state) {
    (void)state;
    /* 1.0 + half a bf16 ulp: kept LSB 0 (even) -> stays */
    assert_rne(0x3f808000u, 0x3f80);
    assert_rne(0xbf808000u, 0xbf80);
    /* kept LSB 1 (odd) -> rounds up to even */
    assert_rne(0x3f818000u, 0x3f82);
    assert_rne(0xbf818000u, 0xbf82);
    /* odd tie carrying into the exponent: 1.9921875 + half ulp -> 2.0 */
    assert_rne(0x3fff8000u, 0x4000);
    assert_rne(0xbfff8000u, 0xc000);
    /* an even tie in a different binade */
    assert_rne(0x47128000u, 0x4712);
    assert_rne(0x47138000u, 0x4714);
}

static void test_rne_near_halfway(void **state) {
    (void)state;
    /* one fp32 ulp below / above the exact halfway point */
    assert_rne(0x3f807fffu, 0x3f80);
    assert_rne(0x3f808001u, 0x3f81);
    assert_rne(0x3f817fffu, 0x3f81);
    assert_rne(0x3f818001u, 0x3f82);
    assert_rne(0xbf807fffu, 0xbf80);
    assert_rne(0xbf808001u, 0xbf81);
    assert_rne(0xbf817fffu, 0xbf81);
    assert_rne(0xbf818001u, 0xbf82);
    assert_rne(0x3f800001u, 0x3f80); /* tiny residues truncate */
    assert_rne(0x3f80ffffu, 0x3f81); /* large residues round up */
    /* the value closest to x: check round_to_bf16 picks the nearer neighbour */
    float x = 3.14159265f, r = round_to_bf16(x);
    float lo = bf16_to_f32((bf16)(f32_bits(x) >> 16)), hi = bf16_to_f32((bf16)((f32_bits(x) >> 16) + 1));
    assert_true(r == lo || r == hi);
    assert_true(fabsf(r - x) <= fabsf((r == lo ? hi : lo) - x));
}

static void test_rne_inf_nan_overflow(void **state) {
    (void)state;
    assert_rne(0x7f800000u, 0x7f80); /* +Inf */
    assert_rne(0xff800000u, 0xff80); /* -Inf */
    assert_true(isinf(round_to_bf16(INFINITY)) && round_to_bf16(-INFINITY) < 0);
    /* NaNs: quiet, signalling, payload only in the low 16 bits (truncation
     * would make that one Inf), all-ones (adding the rounding bias would
     * carry into the sign and give -0) */
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7f80ffffu, 0x7f808000u,
                             0x7fffffffu, 0xffffffffu, 0x7fbfffffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        bf16 h = rne(nans[i]);
        assert_true(isnan(bf16_to_f32(h)));
        assert_int_equal(h & 0x8000u, (nans[i] >> 16) & 0x8000u);
        assert_true(isnan(bf16_to_f32(f32_to_bf16_stochastic(f32_from_bits(nans[i]), 0xffffu))));
    }
    /* largest finite fp32 (0x7f7fffff) is above max bf16 (0x7f7f) + half an
     * ulp, so IEEE RNE overflows it to Inf; so does the exact tie
     * 0x7f7f8000 (0x7f7f is odd, the even neighbour is the Inf pattern) */
    assert_rne(0x7f7fffffu, 0x7f80);
    assert_rne(0xff7fffffu, 0xff80);
    assert_rne(0x7f7f8000u, 0x7f80);
    assert_rne(0x7f7f7fffu, 0x7f7f); /* just below the tie: max finite bf16 */
    assert_rne(0xff7f7fffu, 0xff7f);
}

static void test_rne_denormals_and_zero(void **state) {
    (void)state;
    /* smallest fp32 denormal (2^-149) is far below half the smallest bf16
     * denormal (2^-133 / 2), so RNE gives +0 (-0 for the negative one) */
    assert_rne(0x00000001u, 0x0000);
    assert_rne(0x80000001u, 0x8000);
    assert_rne(0x00008000u, 0x0000); /* exactly half of bf16's smallest denormal: tie to even 0 */
    assert_rne(0x00008001u, 0x0001);
    assert_rne(0x00018000u, 0x0002); /* odd tie rounds up */
    assert_rne(0x80018000u, 0x8002);
    assert_rne(0x007fffffu, 0x0080); /* largest fp32 denormal -> smallest normal bf16 */
    /* bf16 denormal patterns round-trip exactly */
    const bf16 dn[] = {0x0001, 0x0002, 0x0055, 0x007f, 0x8001, 0x807f};
    for (size_t i = 0; i < sizeof dn / sizeof dn[0]; i++) {
        float f = bf16_to_f32(dn[i]);
        assert_true(f != 0.0f && fpclassify(f) == FP_SUBNORMAL);
        assert_int_equal(f32_to_bf16(f), dn[i]);
        assert_int_equal(f32_to_bf16_stochastic(f, 0xffffu), dn[i]);
    }
    /* signed zero */
    assert_int_equal(f32_to_bf16(-0.0f), 0x8000);
    assert_true(signbit(bf16_to_f32(f32_to_bf16(-0.0f))) && bf16_to_f32(f32_to_bf16(-0.0f)) == 0.0f);
    assert_int_equal(f32_to_bf16(0.0f), 0x0000);
    assert_int_equal(f32_to_bf16_stochastic(-0.0f, 0xffffu), 0x8000);
}

/* ------------------------------------------------------ stochastic rounding */

/* Inputs spanning binades, signs, denormals and values with the kept LSB
 * both even and odd, plus random patterns. */
static uint32_t sr_input(int i) {
    static const uint32_t fixed[] = {0x3f808000u, 0x3f818000u, 0x3f800001u, 0x3f80ffffu, 0xbf8a1234u,
                                     0x3fffffffu, 0x00000001u, 0x0000c3a5u, 0x807f1234u, 0x7f7e8001u,
                                     0x01000001u, 0xc2f7abcdu};
    enum { NFIXED = sizeof fixed / sizeof fixed[0] };
    if (i < NFIXED) return fixed[i];
    uint32_t u;
    do u = rng_u32(99, 7, (uint64_t)i); while ((u & 0x7f800000u) == 0x7f800000u || (u & 0x7f000000u) == 0x7f000000u);
    return u; /* finite, and below the top binades where SR clamps (see below) */
}

static void test_sr_neighbours_and_mean(void **state) {
    (void)state;
    for (int i = 0; i < 64; i++) {
        uint32_t u = sr_input(i);
        float x = f32_from_bits(u);
        bf16 down = (bf16)(u >> 16); /* toward zero */
        bf16 up = (bf16)((u >> 16) + 1); /* next bf16 away from zero */
        double sum = 0;
        for (uint32_t noise = 0; noise <= 0xffffu; noise++) {
            bf16 h = f32_to_bf16_stochastic(x, noise);
            if (h != down) assert_int_equal(h, up); /* always a neighbour */
            assert_true(isfinite(bf16_to_f32(h)));
            /* only the low 16 noise bits matter */
            assert_int_equal(f32_to_bf16_stochastic(x, noise | 0xabcd0000u), h);
            sum += bf16_to_f32(h);
        }
        /* E[SR(x)] = x exactly: 'up' is chosen for exactly (u & 0xffff) of
         * the 2^16 noise values, and the double sum of two 8-bit-mantissa
         * values times counts < 2^17 is exact, as is dividing by 2^16. */
        double mean = sum / 65536.0;
        assert_true(fabs(mean - (double)x) <= 1e-6 * fabs((double)x));
        assert_true(mean == (double)x);
        /* RNE always returns one of the two as well */
        bf16 r = f32_to_bf16(x);
        assert_true(r == down || r == up);
    }
}

static void test_sr_special(void **state) {
    (void)state;
    /* exact bf16 values are unchanged by any noise */
    const uint32_t noises[] = {0u, 1u, 0x7fffu, 0x8000u, 0xffffu, 0xffffffffu};
    for (uint32_t h = 0; h <= 0xffffu; h++) {
        if (bf16_is_nan((bf16)h)) continue;
        for (size_t k = 0; k < sizeof noises / sizeof noises[0]; k++)
            assert_int_equal(f32_to_bf16_stochastic(bf16_to_f32((bf16)h), noises[k]), h);
    }
    /* finite values at the top of the range never become Inf */
    const uint32_t top[] = {0x7f7fffffu, 0xff7fffffu, 0x7f7f0001u, 0x7f7f8000u, 0xff7f8000u};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        for (uint32_t noise = 0; noise <= 0xffffu; noise++)
            assert_true(isfinite(bf16_to_f32(f32_to_bf16_stochastic(f32_from_bits(top[i]), noise))));
    assert_int_equal(f32_to_bf16_stochastic(INFINITY, 0xffffu), 0x7f80);
    assert_int_equal(f32_to_bf16_stochastic(-INFINITY, 0x1234u), 0xff80);
}

/* ---------------------------------------------------------------- fast_expf */

/* Measured: max relative error vs exp() in double is 2.546e-7 over EVERY
 * float in [-80, 80] (2.533e-7 on the 2^-14 grid below); libm's expf is 0.5 ulp
 * (6e-8). The bound leaves ~15% headroom over the measurement. */
#define FAST_EXPF_MAX_REL 3e-7

static void test_fast_expf(void **state) {
    (void)state;
    assert_true(fast_expf(0.0f) == 1.0f);
    assert_true(fast_expf(-0.0f) == 1.0f);
    double worst = 0, worst_x = 0;
    for (int32_t i = -80 * 16384; i <= 80 * 16384; i++) { /* step 2^-14, exact in fp32 */
        float x = (float)i / 16384.0f;
        double ref = exp((double)x);
        double rel = fabs((double)fast_expf(x) - ref) / ref;
        if (!(rel <= worst)) worst = rel, worst_x = x;
    }
    print_message("fast_expf: max relative error %.4g at x = %.6f over [-80, 80]\n", worst, worst_x);
    assert_true(worst < FAST_EXPF_MAX_REL);
    assert_true(worst > 1e-8); /* the grid really measured something */
    /* the clamp keeps far-out inputs finite and tiny / huge, never NaN */
    float lo = fast_expf(-1000.0f), hi = fast_expf(88.0f);
    assert_true(lo >= 0.0f && lo < 1e-37f);
    assert_true(isfinite(hi) && hi > 1e38f);
}

/* NaN used to shift a negative exponent left (undefined: UBSan stops the
 * SAN build); now NaN gives NaN, the infinities clamp, tanh follows. */
static void test_fast_expf_nan_inf(void **state) {
    (void)state;
    assert_true(isnan(fast_expf(NAN)));
    assert_true(isnan(fast_expf(-NAN)));
    assert_true(isnan(fast_tanhf(NAN)));
    assert_true(fast_expf(-INFINITY) >= 0.0f && fast_expf(-INFINITY) < 1e-37f);
    assert_true(fast_expf(INFINITY) == fast_expf(88.0f));
    assert_true(fast_tanhf(INFINITY) == 1.0f && fast_tanhf(-INFINITY) == -1.0f);
    float v[64];
    for (int i = 0; i < 64; i++) v[i] = i % 3 ? (float)i : NAN; /* a vectorised loop with NaN lanes */
    for (int i = 0; i < 64; i++) v[i] = fast_expf(v[i] - 40.0f);
    for (int i = 0; i < 64; i++) assert_true(i % 3 ? fabsf(v[i] - expf((float)i - 40.0f)) <= 3e-7f * expf((float)i - 40.0f) : isnan(v[i]));
}

/* buf_round_narrow is buf_round_bf16 and buf_narrow in one pass: the same
 * bits in both outputs, over random patterns with every special kind
 * (ties, NaN, Inf, denormals) forced in, at a size OpenMP splits. */
static void test_round_narrow_is_round_then_narrow(void **state) {
    (void)state;
    enum { N = 4099 };
    static float x[N], rounded[N];
    static bf16 h[N], want[N];
    const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7f800000u, 0xff800000u, 0x7fc00001u,
                                0xffa00000u, 0x00000001u, 0x80000000u, 0x7f7fffffu};
    for (int i = 0; i < N; i++) {
        uint32_t bits = i < (int)(sizeof special / sizeof special[0]) ? special[i] : rng_u32(77, 0, (uint64_t)i);
        x[i] = rounded[i] = f32_from_bits(bits);
    }
    buf_narrow(MEM_HOST, want, x, N);
    buf_round_bf16(MEM_HOST, rounded, N);
    buf_round_narrow(MEM_HOST, h, x, N);
    for (int i = 0; i < N; i++) {
        if (h[i] != want[i]) fail_msg("element %d: bf16 0x%04x, buf_narrow gives 0x%04x", i, h[i], want[i]);
        if (f32_bits(x[i]) != f32_bits(rounded[i]))
            fail_msg("element %d: rounded 0x%08x, buf_round_bf16 gives 0x%08x", i, f32_bits(x[i]),
                     f32_bits(rounded[i]));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rne_exact_values),
        cmocka_unit_test(test_rne_ties_to_even),
        cmocka_unit_test(test_rne_near_halfway),
        cmocka_unit_test(test_rne_inf_nan_overflow),
        cmocka_unit_test(test_rne_denormals_and_zero),
        cmocka_unit_test(test_sr_neighbours_and_mean),
        cmocka_unit_test(test_sr_special),
        cmocka_unit_test(test_fast_expf),
        cmocka_unit_test(test_fast_expf_nan_inf),
        cmocka_unit_test(test_round_narrow_is_round_then_narrow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
