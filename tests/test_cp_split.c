/* The load-balanced causal split of context parallelism
 * (include/context_parallel.h, model/context_parallel/split.c): which
 * global positions a cp rank holds, their runs, the keys a query sees of
 * another rank's block, the batch kept in place, and the balance: every
 * rank the same causal query-key pairs, (2 cp - 1) c^2 + c (c + 1) per
 * head and sequence, where a contiguous split of T/cp per rank would give
 * rank r (2 r + 1) (T/cp)^2 / 2 + T/(2 cp). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "context_parallel.h"

static void test_positions_of_each_rank(void **state) {
    (void)state;
    /* T 16, cp 2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2 */
    struct cp_split r0 = {.T = 16, .cp = 2, .rank = 0}, r1 = {.T = 16, .cp = 2, .rank = 1};
    const int want0[8] = {0, 1, 2, 3, 12, 13, 14, 15}, want1[8] = {4, 5, 6, 7, 8, 9, 10, 11};
    assert_int_equal(cp_chunk_len(r0), 4);
    assert_int_equal(cp_local_len(r0), 8);
    for (int t = 0; t < 8; t++) {
        assert_int_equal(cp_global_position(r0, t), want0[t]);
        assert_int_equal(cp_global_position(r1, t), want1[t]);
    }
    struct cp_run runs[CP_MAX_RUNS];
    assert_int_equal(cp_position_runs(r0, 0, 8, runs), 2);
    assert_int_equal(runs[0].global0, 0), assert_int_equal(runs[0].n, 4);
    assert_int_equal(runs[1].local0, 4), assert_int_equal(runs[1].global0, 12), assert_int_equal(runs[1].n, 4);
    assert_int_equal(cp_position_runs(r1, 0, 8, runs), 1); /* chunks 1 and 2 are neighbours: one run */
    assert_int_equal(runs[0].global0, 4), assert_int_equal(runs[0].n, 8);
    assert_int_equal(cp_position_runs(r0, 2, 4, runs), 2); /* a slice across the two chunks (sp) */
    assert_int_equal(runs[0].global0, 2), assert_int_equal(runs[0].n, 2);
    assert_int_equal(runs[1].global0, 12), assert_int_equal(runs[1].n, 2);
    struct cp_split one = {.T = 16, .cp = 1, .rank = 0}; /* cp 1: nothing moves */
    assert_int_equal(cp_position_runs(one, 0, 16, runs), 1);
    assert_int_equal(runs[0].n, 16);
    for (int t = 0; t < 16; t++) assert_int_equal(cp_global_position(one, t), t);
}

static void test_visible_keys_are_a_prefix(void **state) {
    (void)state;
    struct cp_split r0 = {.T = 16, .cp = 2, .rank = 0}, r1 = {.T = 16, .cp = 2, .rank = 1};
    assert_int_equal(cp_visible_keys(r1, 2), 0);   /* rank 1's keys start at 4: fully masked */
    assert_int_equal(cp_visible_keys(r1, 5), 2);   /* 4, 5 */
    assert_int_equal(cp_visible_keys(r1, 13), 8);  /* every one */
    assert_int_equal(cp_visible_keys(r0, 7), 4);   /* chunk 0 whole, chunk 3 masked */
    assert_int_equal(cp_visible_keys(r0, 13), 6);  /* 0-3 and 12, 13 */
}

/* Query-key pairs rank s.rank computes over every rank's block. */
static long pairs(struct cp_split s) {
    long n = 0;
    for (int t = 0; t < cp_local_len(s); t++)
        for (int src = 0; src < s.cp; src++) {
            struct cp_split them = s;
            them.rank = src;
            n += cp_visible_keys(them, cp_global_position(s, t));
        }
    return n;
}

static void test_every_rank_the_same_work(void **state) {
    (void)state;
    for (int cp = 1; cp <= 8; cp++) {
        int c = 3, T = 2 * cp * c;
        long total = 0;
        for (int r = 0; r < cp; r++) {
            long n = pairs((struct cp_split){.T = T, .cp = cp, .rank = r});
            assert_int_equal(n, (long)(2 * cp - 1) * c * c + (long)c * (c + 1));
            total += n;
        }
        assert_int_equal(total, (long)T * (T + 1) / 2); /* the causal pairs, each once */
    }
}

static void test_batch_kept_in_place(void **state) {
    (void)state;
    enum { B = 3, T = 24 };
    for (int cp = 1; cp <= 4; cp++)
        for (int r = 0; r < cp; r++) {
            struct cp_split s = {.T = T, .cp = cp, .rank = r};
            int32_t buf[B * T];
            for (int i = 0; i < B * T; i++) buf[i] = i / T * 1000 + i % T;
            cp_keep_positions(s, buf, B);
            int Tl = cp_local_len(s);
            for (int b = 0; b < B; b++)
                for (int t = 0; t < Tl; t++) assert_int_equal(buf[b * Tl + t], b * 1000 + cp_global_position(s, t));
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_positions_of_each_rank),
        cmocka_unit_test(test_visible_keys_are_a_prefix),
        cmocka_unit_test(test_every_rank_the_same_work),
        cmocka_unit_test(test_batch_kept_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
