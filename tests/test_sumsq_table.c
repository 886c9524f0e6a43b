/* The host logic of --gpu_path v2's one-pass gradient-norm sums
 * (model/cuda/v2/sumsq_table.h): the chunk table covers every element of
 * every segment exactly once, in order, never across a segment's end, with
 * each segment's chunks where first[] says; a short capacity and a
 * negative size are refused; and the device's two-level sum, emulated
 * (sumsq_chunk_reference, then sumsq_segment_total), meets a direct double
 * sum within fp32's bound for 64 terms a thread and an 8-level tree. The
 * kernel itself (model/cuda/v2/sumsq_segments.cu) is compiled, not run:
 * a GPU test compares its partials with sumsq_chunk_reference bit for bit. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "../model/cuda/v2/sumsq_table.h"

enum { NSEG = 7 };
static const int64_t SIZES[NSEG] = {0, 1, 16384, 16385, 40000, 0, 7};

static void test_table_covers_each_element_once(void **state) {
    (void)state;
    int64_t want = 0 + 1 + 1 + 2 + 3 + 0 + 1;
    assert_int_equal(sumsq_chunk_count(SIZES, NSEG, SUMSQ_CHUNK), want);
    struct sumsq_chunk t[16];
    int64_t first[NSEG + 1];
    assert_int_equal(sumsq_chunk_table(SIZES, NSEG, SUMSQ_CHUNK, t, 16, first), want);
    for (int s = 0; s < NSEG; s++) {
        int64_t next = 0; /* the next element of s a chunk must start at */
        for (int64_t c = first[s]; c < first[s + 1]; c++) {
            assert_int_equal(t[c].segment, s);
            assert_int_equal(t[c].begin, next);
            assert_true(t[c].end > t[c].begin && t[c].end - t[c].begin <= SUMSQ_CHUNK);
            next = t[c].end;
        }
        assert_int_equal(next, SIZES[s]);
    }
    assert_int_equal(first[NSEG], want);
    assert_int_equal(sumsq_chunk_table(SIZES, NSEG, SUMSQ_CHUNK, t, want - 1, first), -1);
    int64_t bad[2] = {5, -1};
    assert_int_equal(sumsq_chunk_table(bad, 2, SUMSQ_CHUNK, t, 16, first), -1);
    /* a chunk off the block's size: 1000-element chunks of 2500 */
    int64_t odd[1] = {2500};
    assert_int_equal(sumsq_chunk_table(odd, 1, 1000, t, 16, first), 3);
    assert_int_equal(t[2].begin, 2000);
    assert_int_equal(t[2].end, 2500);
}

static void test_two_level_sum_meets_double(void **state) {
    (void)state;
    float *x[NSEG];
    uint64_t r = 0x9e3779b97f4a7c15ULL;
    for (int s = 0; s < NSEG; s++) {
        x[s] = malloc((size_t)(SIZES[s] > 0 ? SIZES[s] : 1) * sizeof(float));
        for (int64_t i = 0; i < SIZES[s]; i++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            x[s][i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0) * (s + 1);
        }
    }
    struct sumsq_chunk t[16];
    int64_t first[NSEG + 1];
    int64_t n = sumsq_chunk_table(SIZES, NSEG, SUMSQ_CHUNK, t, 16, first);
    float partials[16];
    for (int64_t c = 0; c < n; c++) partials[c] = sumsq_chunk_reference(x[t[c].segment], t[c]);
    /* per thread at most SUMSQ_CHUNK / SUMSQ_THREADS = 64 additions, then 8
     * tree levels: relative error within (64 + 8 + 1) 2^-24 of the sum of
     * positive terms; the chunks' totals add in double */
    double bound = (double)(SUMSQ_CHUNK / SUMSQ_THREADS + 8 + 1) * ldexp(1.0, -24);
    for (int s = 0; s < NSEG; s++) {
        double direct = 0.0;
        for (int64_t i = 0; i < SIZES[s]; i++) direct += (double)x[s][i] * x[s][i];
        double got = sumsq_segment_total(partials, first, s);
        if (SIZES[s] == 0) assert_true(got == 0.0);
        else assert_true(fabs(got - direct) <= bound * direct);
        free(x[s]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_covers_each_element_once),
        cmocka_unit_test(test_two_level_sum_meets_double),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
