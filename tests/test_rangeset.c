/* Range sets: merging of overlapping and touching ranges, and gaps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "rangeset.h"

static void expect_ranges(const struct range_set *s, const uint64_t *want, size_t n) {
    assert_int_equal(s->n, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(s->r[i].lo, want[2 * i]);
        assert_int_equal(s->r[i].hi, want[2 * i + 1]);
    }
}

static void test_merge(void **state) {
    (void)state;
    struct range_set s;
    range_set_init(&s);
    assert_int_equal(range_set_add(&s, 10, 20), 0);
    assert_int_equal(range_set_add(&s, 30, 40), 0);
    assert_int_equal(range_set_add(&s, 0, 5), 0);
    assert_int_equal(range_set_add(&s, 7, 7), 0); /* empty: no range */
    expect_ranges(&s, (const uint64_t[]){0, 5, 10, 20, 30, 40}, 3);
    assert_int_equal(range_set_add(&s, 20, 25), 0); /* touches [10, 20) */
    expect_ranges(&s, (const uint64_t[]){0, 5, 10, 25, 30, 40}, 3);
    assert_int_equal(range_set_add(&s, 12, 14), 0); /* inside */
    expect_ranges(&s, (const uint64_t[]){0, 5, 10, 25, 30, 40}, 3);
    assert_int_equal(range_set_add(&s, 3, 33), 0); /* spans three */
    expect_ranges(&s, (const uint64_t[]){0, 40}, 1);
    /* Many disjoint pieces force the array to grow, then fill in. */
    for (uint64_t k = 0; k < 100; k++) assert_int_equal(range_set_add(&s, 100 + 2 * k, 101 + 2 * k), 0);
    assert_int_equal(s.n, 101);
    for (uint64_t k = 0; k < 100; k++) assert_int_equal(range_set_add(&s, 101 + 2 * k, 102 + 2 * k), 0);
    expect_ranges(&s, (const uint64_t[]){0, 40, 100, 300}, 2);
    range_set_free(&s);
    assert_int_equal(s.n, 0);
}

static void test_gaps(void **state) {
    (void)state;
    struct range_set s;
    range_set_init(&s);
    struct range g;
    assert_true(range_set_first_gap(&s, 0, 10, &g));
    assert_int_equal(g.lo, 0), assert_int_equal(g.hi, 10);
    range_set_add(&s, 0, 5);
    range_set_add(&s, 8, 12);
    assert_true(range_set_first_gap(&s, 0, 10, &g));
    assert_int_equal(g.lo, 5), assert_int_equal(g.hi, 8);
    assert_true(range_set_first_gap(&s, 5, 10, &g)); /* a range ending at lo covers nothing of it */
    assert_int_equal(g.lo, 5), assert_int_equal(g.hi, 8);
    assert_false(range_set_first_gap(&s, 1, 5, &g));
    assert_false(range_set_first_gap(&s, 9, 12, &g));
    assert_true(range_set_first_gap(&s, 9, 20, &g));
    assert_int_equal(g.lo, 12), assert_int_equal(g.hi, 20);
    range_set_add(&s, 5, 8);
    assert_false(range_set_first_gap(&s, 0, 12, &g));
    range_set_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_gaps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
