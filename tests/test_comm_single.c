/* The single-process grid (tests/grid_single.h): a 1 x 1 x 1 x 1 grid
 * whose collectives are identities, counted as calls with zero bytes, whose
 * point-to-point calls fail with a message naming the call (a group of one
 * has no peer), and usable without MPI_Init (this binary never calls it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "grid.h"
#include "grid_single.h"
#include "stderr_capture.h"

static void test_grid_is_one_by_one(void **state) {
    (void)state;
    struct grid g;
    grid_init_single(&g);
    assert_int_equal(g.world_rank, 0);
    assert_int_equal(g.world_size, 1);
    assert_int_equal(g.dp * g.cp * g.tp * g.pp, 1);
    assert_int_equal(g.dp_rank + g.tp_rank + g.pp_rank, 0);
    assert_true(g.tie_member); /* pp = 1: the one stage is first and last */
    struct collectives *groups[GROUP_NUM] = {&g.dp_comm, &g.tp_comm, &g.pp_comm, &g.tie_comm, &g.cp_comm};
    const char *names[GROUP_NUM] = {"dp", "tp", "pp", "tie", "cp"};
    for (int i = 0; i < GROUP_NUM; i++) {
        assert_ptr_equal(grid_group(&g, (enum grid_group)i), groups[i]);
        assert_string_equal(grid_group_name((enum grid_group)i), names[i]);
        assert_int_equal(groups[i]->rank, 0);
        assert_int_equal(groups[i]->size, 1);
        assert_null(groups[i]->impl);
    }
    assert_null(grid_group(&g, GROUP_NUM));
    assert_string_equal(grid_group_name(GROUP_NUM), "?");
    grid_free(&g); /* no MPI state: a no-op, and no MPI call */
}

static void test_collectives_are_identities(void **state) {
    (void)state;
    struct grid g;
    grid_init_single(&g);
    struct collectives *c = &g.dp_comm;
    float f[4] = {1.5f, -2.0f, 3.25f, 0.0f};
    bf16 h[3] = {f32_to_bf16(1.0f), f32_to_bf16(-0.5f), f32_to_bf16(7.0f)};
    bf16 ring[3];
    double s[2] = {3.5, -1.0};
    c->all_reduce_sum(c, f, 4, DTYPE_FP32);
    c->all_reduce_sum(c, h, 3, DTYPE_BF16);
    c->all_reduce_max(c, f, 4, DTYPE_FP32);
    c->all_reduce_max(c, h, 3, DTYPE_BF16);
    c->all_reduce_max(c, h, 3, DTYPE_BF16);
    c->reduce_scatter_sum(c, f, 4, DTYPE_FP32);
    c->all_gather(c, h, 3, DTYPE_BF16);
    c->all_reduce_scalars(c, s, 2);
    c->barrier(c);
    /* non-blocking: identities, complete when posted, counted like the blocking calls */
    struct coll_request q[3] = {c->iall_reduce_sum(c, f, 4, DTYPE_FP32), c->ireduce_scatter_sum(c, h, ring, 3, DTYPE_BF16),
                                c->iall_gather(c, f, 4, DTYPE_FP32)};
    c->progress(c);
    for (int k = 0; k < 3; k++) assert_int_equal(c->wait(c, q[k]), 0);
    assert_true(f[0] == 1.5f && f[1] == -2.0f && f[2] == 3.25f && f[3] == 0.0f);
    assert_true(bf16_to_f32(h[0]) == 1.0f && bf16_to_f32(h[1]) == -0.5f && bf16_to_f32(h[2]) == 7.0f);
    assert_true(s[0] == 3.5 && s[1] == -1.0);
    assert_int_equal(c->counters.calls[COLL_ALL_REDUCE], 3);
    assert_int_equal(c->counters.calls[COLL_ALL_REDUCE_MAX], 3);
    assert_int_equal(c->counters.calls[COLL_REDUCE_SCATTER], 2);
    assert_int_equal(c->counters.calls[COLL_ALL_GATHER], 2);
    assert_int_equal(c->counters.calls[COLL_SCALAR], 1);
    assert_int_equal(c->counters.calls[COLL_SEND] + c->counters.calls[COLL_RECV], 0);
    for (int k = 0; k < COLL_NUM_KINDS; k++) assert_true(c->counters.bytes[k] == 0.0);
    assert_int_equal(g.tp_comm.counters.calls[COLL_ALL_REDUCE], 0); /* groups count apart */
    assert_int_equal(g.tie_comm.counters.calls[COLL_ALL_REDUCE_MAX], 0);
    grid_free(&g);
}

/* Every point-to-point entry fails (-1, or a handle with slot -1), leaves
 * the buffers alone, counts nothing and names itself on stderr. */
static void test_point_to_point_fails_naming_the_call(void **state) {
    (void)state;
    struct grid g;
    grid_init_single(&g);
    struct collectives *c = &g.tie_comm;
    float x[2] = {1.0f, 2.0f}, y[2] = {-1.0f, -1.0f};
    char msg[5][512];
    struct stderr_capture cap;
    int rc[3];
    struct coll_request req[2];

    assert_int_equal(stderr_capture_begin(&cap), 0);
    rc[0] = c->send(c, x, 2, DTYPE_FP32, 0, 7);
    stderr_capture_end(&cap, msg[0], sizeof msg[0]);
    assert_int_equal(stderr_capture_begin(&cap), 0);
    rc[1] = c->recv(c, y, 2, DTYPE_FP32, 0, 7);
    stderr_capture_end(&cap, msg[1], sizeof msg[1]);
    assert_int_equal(stderr_capture_begin(&cap), 0);
    req[0] = c->isend(c, x, 2, DTYPE_FP32, 1, 7); /* out of range: the same answer */
    stderr_capture_end(&cap, msg[2], sizeof msg[2]);
    assert_int_equal(stderr_capture_begin(&cap), 0);
    req[1] = c->irecv(c, y, 2, DTYPE_FP32, 0, 7);
    stderr_capture_end(&cap, msg[3], sizeof msg[3]);
    assert_int_equal(stderr_capture_begin(&cap), 0);
    rc[2] = c->wait(c, req[1]);
    stderr_capture_end(&cap, msg[4], sizeof msg[4]);

    assert_int_equal(rc[0], -1);
    assert_int_equal(rc[1], -1);
    assert_int_equal(req[0].slot, -1);
    assert_int_equal(req[1].slot, -1);
    assert_int_equal(rc[2], -1);
    const char *prefix[5] = {"collectives: send to or from peer 0 ", "collectives: recv to or from peer 0 ",
                             "collectives: isend to or from peer 1 ", "collectives: irecv to or from peer 0 ",
                             "collectives: wait on handle (slot -1"};
    for (int i = 0; i < 5; i++) assert_memory_equal(msg[i], prefix[i], strlen(prefix[i]));
    for (int i = 0; i < 4; i++) assert_non_null(strstr(msg[i], "single-process table"));
    assert_true(y[0] == -1.0f && y[1] == -1.0f);
    for (int k = 0; k < COLL_NUM_KINDS; k++) {
        assert_int_equal(c->counters.calls[k], 0);
        assert_true(c->counters.bytes[k] == 0.0);
    }
    assert_true(c->counters.seconds == 0.0);
    grid_free(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid_is_one_by_one),
        cmocka_unit_test(test_collectives_are_identities),
        cmocka_unit_test(test_point_to_point_fails_naming_the_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
