/* The single-process grid (parallel/comm_single.c): a 1 x 1 x 1 grid whose
 * collectives are identities, counted as calls with zero bytes, and usable
 * without MPI_Init (this binary never calls it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "grid.h"

static void test_grid_is_one_by_one(void **state) {
    (void)state;
    struct grid g;
    grid_init_single(&g);
    assert_int_equal(g.world_rank, 0);
    assert_int_equal(g.world_size, 1);
    assert_int_equal(g.dp * g.tp * g.pp, 1);
    assert_int_equal(g.dp_rank + g.tp_rank + g.pp_rank, 0);
    struct collectives *groups[] = {&g.dp_comm, &g.tp_comm, &g.pp_comm};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(groups[i]->rank, 0);
        assert_int_equal(groups[i]->size, 1);
    }
    grid_free(&g); /* no MPI state: a no-op, and no MPI call */
}

static void test_collectives_are_identities(void **state) {
    (void)state;
    struct grid g;
    grid_init_single(&g);
    struct collectives *c = &g.dp_comm;
    float f[4] = {1.5f, -2.0f, 3.25f, 0.0f};
    bf16 h[3] = {f32_to_bf16(1.0f), f32_to_bf16(-0.5f), f32_to_bf16(7.0f)};
    double s[2] = {3.5, -1.0};
    c->all_reduce_sum(c, f, 4, DTYPE_FP32);
    c->all_reduce_sum(c, h, 3, DTYPE_BF16);
    c->reduce_scatter_sum(c, f, 4, DTYPE_FP32);
    c->all_gather(c, h, 3, DTYPE_BF16);
    c->all_reduce_scalars(c, s, 2);
    c->barrier(c);
    assert_true(f[0] == 1.5f && f[1] == -2.0f && f[2] == 3.25f && f[3] == 0.0f);
    assert_true(bf16_to_f32(h[0]) == 1.0f && bf16_to_f32(h[1]) == -0.5f && bf16_to_f32(h[2]) == 7.0f);
    assert_true(s[0] == 3.5 && s[1] == -1.0);
    assert_int_equal(c->counters.calls[COLL_ALL_REDUCE], 2);
    assert_int_equal(c->counters.calls[COLL_REDUCE_SCATTER], 1);
    assert_int_equal(c->counters.calls[COLL_ALL_GATHER], 1);
    assert_int_equal(c->counters.calls[COLL_SCALAR], 1);
    for (int k = 0; k < COLL_NUM_KINDS; k++) assert_true(c->counters.bytes[k] == 0.0);
    assert_int_equal(g.tp_comm.counters.calls[COLL_ALL_REDUCE], 0); /* groups count apart */
    grid_free(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid_is_one_by_one),
        cmocka_unit_test(test_collectives_are_identities),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
