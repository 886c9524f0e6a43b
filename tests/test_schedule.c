/* Pipeline schedules' order and memory (include/schedule.h), and the
 * stage split's parser (include/pipeline.h), without running a model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "pipeline.h"
#include "schedule.h"

enum { MAX_M = 12, MAX_P = 6 };

/* Every micro-batch runs forward once, then backward once; the order
 * never holds more than `slots` in flight, and micro-batches in flight
 * never share slot k mod slots. Returns the forwards before the first
 * backward. */
static int check_order(enum schedule_kind k, int p, int s, int m) {
    struct pipe_op ops[2 * MAX_M];
    assert_int_equal(schedule_order(k, p, s, m, ops), 2 * m);
    int slots = schedule_slots(k, p, s, m), next_f = 0, next_b = 0, warmup = -1;
    bool live[MAX_M] = {false};
    for (int i = 0; i < 2 * m; i++) {
        int mb = ops[i].micro_batch;
        if (ops[i].kind == PIPE_FORWARD) {
            assert_int_equal(mb, next_f++); /* forwards in order */
            for (int j = 0; j < m; j++) assert_false(live[j] && j != mb && j % slots == mb % slots);
            live[mb] = true;
        } else {
            if (warmup < 0) warmup = next_f;
            assert_int_equal(mb, next_b++); /* backwards in order, each after its forward */
            assert_true(live[mb]);
            live[mb] = false;
        }
        int in_flight = 0;
        for (int j = 0; j < m; j++) in_flight += live[j];
        assert_true(in_flight <= slots);
    }
    assert_int_equal(next_b, m);
    return warmup;
}

static void test_gpipe_holds_every_micro_batch(void **state) {
    (void)state;
    for (int p = 1; p <= MAX_P; p++)
        for (int s = 0; s < p; s++)
            for (int m = 1; m <= MAX_M; m++) {
                assert_int_equal(schedule_slots(SCHEDULE_GPIPE, p, s, m), m);
                assert_int_equal(check_order(SCHEDULE_GPIPE, p, s, m), m); /* all forwards first */
            }
}

/* 1F1B: stage s warms up with min(p - s - 1, m) forwards, so the first
 * backward follows forward min(p - s, m), and holds min(p - s, m). */
static void test_1f1b_warmup_and_slots(void **state) {
    (void)state;
    for (int p = 1; p <= MAX_P; p++)
        for (int s = 0; s < p; s++)
            for (int m = 1; m <= MAX_M; m++) {
                int expect = p - s < m ? p - s : m;
                assert_int_equal(schedule_slots(SCHEDULE_1F1B, p, s, m), expect);
                assert_int_equal(check_order(SCHEDULE_1F1B, p, s, m), expect);
            }
    /* one stage: forward then backward of each micro-batch, in turn */
    struct pipe_op ops[6];
    schedule_order(SCHEDULE_1F1B, 1, 0, 3, ops);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(ops[i].kind, i % 2 ? PIPE_BACKWARD : PIPE_FORWARD);
        assert_int_equal(ops[i].micro_batch, i / 2);
    }
}

static void test_parse_layers(void **state) {
    (void)state;
    int counts[4];
    char err[256];
    assert_int_equal(pipeline_parse_layers("3,3,2", 3, 8, counts, err, sizeof err), 0);
    assert_int_equal(counts[0], 3);
    assert_int_equal(counts[2], 2);
    assert_int_equal(pipeline_parse_layers("8,0,0", 3, 8, counts, err, sizeof err), 0); /* stages of embedding, head */
    const char *bad[] = {"3,3", "3,3,3", "4,5,-1", "3,x,2", "3;3;2", "", "3,3,2,0", "9,0,-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(pipeline_parse_layers(bad[i], 3, 8, counts, err, sizeof err), -1);
        assert_non_null(strstr(err, "pp_layers"));
    }
    /* the split it gives is the one the stages take */
    int l0, l1;
    assert_int_equal(pipeline_parse_layers("1,3", 2, 4, counts, err, sizeof err), 0);
    assert_int_equal(pipeline_stage_layers(4, 2, 1, counts, &l0, &l1), 0);
    assert_int_equal(l0, 1);
    assert_int_equal(l1, 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpipe_holds_every_micro_batch),
        cmocka_unit_test(test_1f1b_warmup_and_slots),
        cmocka_unit_test(test_parse_layers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
