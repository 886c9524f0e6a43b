/* The pipeline's point-to-point messages and the posting-order check of
 * its links (include/pipe_messages.h): what lets a schedule run over
 * NCCL, which matches a link's k-th send with its k-th receive. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "pipe_messages.h"

/* Every schedule the trainer offers (train/config/config_grid.c: gpipe
 * and 1f1b with one chunk, interleaved with 2.. chunks and m a multiple of
 * pp) keeps both ends of every link in one order, in a step and in
 * evaluation. */
static void test_offered_schedules_pass(void **state) {
    (void)state;
    char err[512] = "";
    int checked = 0;
    for (int k = 0; k < SCHEDULE_NUM; k++)
        for (int p = 2; p <= 4; p++)
            for (int m = 1; m <= 8; m++)
                for (int v = 1; v <= 3; v++) {
                    if (!schedule_runs((enum schedule_kind)k, p, m, v)) continue;
                    if (pipe_check_order((enum schedule_kind)k, p, m, v, err, sizeof err) != 0) fail_msg("%s", err);
                    checked++;
                }
    /* gpipe and 1f1b: 3 p x 8 m each; interleaved: v 2..3 at m = 2,4,6,8 (p 2), 3,6 (p 3), 4,8 (p 4) */
    assert_int_equal(checked, 2 * 3 * 8 + 2 * (4 + 2 + 2));
    /* a shape the schedule does not run is refused, named */
    assert_int_equal(pipe_check_order(SCHEDULE_INTERLEAVED, 2, 3, 2, err, sizeof err), -1);
    assert_non_null(strstr(err, "does not run pp = 2, grad_accum = 3, virtual_stages = 2"));
}

static void assert_msg(struct pipe_msg g, int peer, int tag, bool send) {
    assert_int_equal(g.peer, peer);
    assert_int_equal(g.tag, tag);
    assert_int_equal(g.send, send);
}

/* Who talks to whom, with which tag: 3 stages of one chunk, and the
 * interleaved ring's wraparound at p = 2, v = 2. */
static void test_op_messages(void **state) {
    (void)state;
    struct pipe_msg g[PIPE_OP_MAX_MSGS];
    struct pipe_op f0 = {.chunk = 0, .kind = PIPE_FORWARD}, b0 = {.chunk = 0, .kind = PIPE_BACKWARD};
    struct pipe_op f1 = {.chunk = 1, .kind = PIPE_FORWARD}, b1 = {.chunk = 1, .kind = PIPE_BACKWARD};
    assert_int_equal(pipe_op_messages(3, 1, 0, f0, g), 1); /* the first stage: no receive going forward */
    assert_msg(g[0], 1, 1, true);
    assert_int_equal(pipe_op_messages(3, 1, 1, f0, g), 2); /* a middle stage: receive, then send */
    assert_msg(g[0], 0, 1, false);
    assert_msg(g[1], 2, 1, true);
    assert_int_equal(pipe_op_messages(3, 1, 2, b0, g), 1); /* the last: no receive going back */
    assert_msg(g[0], 1, 2, true);
    assert_int_equal(pipe_op_messages(3, 1, 0, b0, g), 1);
    assert_msg(g[0], 1, 2, false);
    assert_int_equal(pipe_op_messages(1, 1, 0, f0, g), 0); /* one stage: nothing */
    /* p = 2, v = 2: stage 1's chunk 0 feeds stage 0's chunk 1 (tag 3);
     * stage 0's chunk 1 sends its gradient back to stage 1's chunk 0 (tag 2) */
    assert_int_equal(pipe_op_messages(2, 2, 1, f0, g), 2);
    assert_msg(g[1], 0, 3, true);
    assert_int_equal(pipe_op_messages(2, 2, 0, f1, g), 2);
    assert_msg(g[0], 1, 3, false);
    assert_msg(g[1], 1, 3, true);
    assert_int_equal(pipe_op_messages(2, 2, 0, b1, g), 2);
    assert_msg(g[0], 1, 4, false);
    assert_msg(g[1], 1, 2, true);
    assert_int_equal(pipe_op_messages(2, 2, 1, f1, g), 1); /* the last virtual stage: the head */
    assert_msg(g[0], 0, 3, false);
}

/* A schedule's order with one change on one stage: ops i and j of stage
 * `stage` swapped, or (j < 0) op i turned into a forward of its chunk. */
struct edited {
    enum schedule_kind k;
    int p, m, v, stage, i, j;
};

static struct pipe_op edited_op(const void *ctx, int stage, int i) {
    const struct edited *e = ctx;
    int at = i;
    if (stage == e->stage && e->j >= 0) at = i == e->i ? e->j : i == e->j ? e->i : i;
    struct pipe_op op = schedule_op(e->k, e->p, stage, e->m, e->v, at);
    if (stage == e->stage && e->j < 0 && i == e->i) op.kind = PIPE_FORWARD;
    return op;
}

static int check_edited(const struct edited *e, char *err, size_t len) {
    struct pipe_orders o = {.p = e->p, .v = e->v, .n = 2 * e->m * e->v, .op = edited_op, .ctx = e};
    return pipe_check_links(&o, "edited", err, len);
}

/* interleaved p = 2, m = 2, v = 2: stage 0 runs F0.0 F1.0 F0.1 F1.1 ...,
 * so the link 0 -> 1 carries tags 1 1 3 3 2 2 at both ends. Stage 0 with
 * F1.0 and F0.1 swapped sends 1 3 1 ...: message 1 differs. */
static void test_reordered_ops_fail(void **state) {
    (void)state;
    char err[512] = "";
    struct edited same = {SCHEDULE_INTERLEAVED, 2, 2, 2, 0, 1, 1}; /* swapping an op with itself: unchanged */
    assert_int_equal(check_edited(&same, err, sizeof err), 0);
    struct edited swapped = {SCHEDULE_INTERLEAVED, 2, 2, 2, 0, 1, 2};
    assert_int_equal(check_edited(&swapped, err, sizeof err), -1);
    assert_non_null(strstr(err, "edited: the link stage 0 -> stage 1"));
    assert_non_null(strstr(err, "message 1 is sent as tag 3 (the activation of chunk 1) but received as tag 1 "
                                "(the activation of chunk 0)"));
}

/* 1f1b, p = 3, m = 4: the last stage's last op (the backward of
 * micro-batch 3) made a forward receives a fifth activation from stage 1,
 * which sends four (the first link checked that differs: 1 -> 2). */
static void test_extra_message_fails(void **state) {
    (void)state;
    char err[512] = "";
    struct edited extra = {SCHEDULE_1F1B, 3, 4, 1, 2, 7, -1};
    assert_int_equal(check_edited(&extra, err, sizeof err), -1);
    assert_non_null(strstr(err, "the link stage 1 -> stage 2"));
    assert_non_null(strstr(err, "message 4 is sent as nothing (no more messages) but received as tag 1 "
                                "(the activation of chunk 0)"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offered_schedules_pass),
        cmocka_unit_test(test_op_messages),
        cmocka_unit_test(test_reordered_ops_fail),
        cmocka_unit_test(test_extra_message_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
