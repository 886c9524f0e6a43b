/* The process grid (include/grid.h) on every rank of an mpirun world
 * (tests/run_mpi.sh runs this on 2, 3 and 4 ranks): the dp, tp, pp and tie
 * groups each rank lands in, checked by summing world ranks over each
 * group's collectives, and the shapes a world cannot form. The grid tests
 * that need an even world skip on 3 ranks.
 *
 * As in test_collectives.c, each test makes all of its collective calls
 * before its first assertion, so a failing rank cannot leave the others
 * waiting in a collective. */
#include <setjmp.h>
#include <stdarg.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <mpi.h>

#include "grid.h"

/* What a grid test checks, copied out before grid_free (a collective). */
struct grid_seen {
    int rc;
    struct grid g;   /* the fields; its collectives are freed */
    float dp_sum, tp_sum, pp_sum, tie_sum, cp_sum;  /* world ranks summed over each group */
    float tie_partner;  /* the other tie rank's world rank, by send/recv; -1 in a group of one */
    int tie_p2p_rc;
};

static struct grid_seen build_grid_cp(int tp, int cp, int pp) {
    struct grid_seen s = {0};
    char err[GRID_ERR_LEN];
    s.rc = grid_init(&s.g, tp, cp, pp, err);
    if (s.rc != 0) return s;
    s.dp_sum = s.tp_sum = s.pp_sum = s.tie_sum = s.cp_sum = (float)s.g.world_rank;
    s.g.cp_comm.all_reduce_sum(&s.g.cp_comm, &s.cp_sum, 1, DTYPE_FP32);
    s.g.dp_comm.all_reduce_sum(&s.g.dp_comm, &s.dp_sum, 1, DTYPE_FP32);
    s.g.tp_comm.all_reduce_sum(&s.g.tp_comm, &s.tp_sum, 1, DTYPE_FP32);
    s.g.pp_comm.all_reduce_sum(&s.g.pp_comm, &s.pp_sum, 1, DTYPE_FP32);
    s.g.tie_comm.all_reduce_sum(&s.g.tie_comm, &s.tie_sum, 1, DTYPE_FP32);
    /* The pair as a link: the first stage sends its world rank to the last
     * and the last answers with its own. */
    struct collectives *tie = &s.g.tie_comm;
    float mine = (float)s.g.world_rank;
    s.tie_partner = -1;
    if (tie->size == 2 && tie->rank == 0)
        s.tie_p2p_rc = tie->send(tie, &mine, 1, DTYPE_FP32, 1, 3) | tie->recv(tie, &s.tie_partner, 1, DTYPE_FP32, 1, 4);
    if (tie->size == 2 && tie->rank == 1)
        s.tie_p2p_rc = tie->recv(tie, &s.tie_partner, 1, DTYPE_FP32, 0, 3) | tie->send(tie, &mine, 1, DTYPE_FP32, 0, 4);
    grid_free(&s.g);
    return s;
}

static struct grid_seen build_grid(int tp, int pp) { return build_grid_cp(tp, 1, pp); }

/* Stage 0 and stage pp-1 of one (dp_rank, tp_rank) pair up; world rank =
 * (pp_rank x dp + dp_rank) x tp + tp_rank. */
static void assert_tie_pair(const struct grid_seen *s) {
    const struct grid *g = &s->g;
    int first = g->dp_rank * g->tp + g->tp_rank, last = ((g->pp - 1) * g->dp + g->dp_rank) * g->tp + g->tp_rank;
    bool member = g->pp_rank == 0 || g->pp_rank == g->pp - 1;
    assert_int_equal(g->tie_member, member);
    if (!member || g->pp == 1) { /* a group of this rank alone */
        assert_int_equal(g->tie_comm.size, 1);
        assert_int_equal(g->tie_comm.rank, 0);
        assert_true(s->tie_sum == (float)g->world_rank);
        assert_true(s->tie_partner == -1.0f);
        return;
    }
    assert_int_equal(g->tie_comm.size, 2);
    assert_int_equal(g->tie_comm.rank, g->pp_rank == 0 ? 0 : 1);
    assert_true(s->tie_sum == (float)(first + last));
    assert_int_equal(s->tie_p2p_rc, 0);
    assert_true(s->tie_partner == (float)(g->pp_rank == 0 ? last : first));
}

static int world_size(void) {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

/* tp = 2: tp groups are consecutive pairs; dp groups stride by 2. */
static void test_grid_tp2(void **state) {
    (void)state;
    if (world_size() % 2) skip();
    struct grid_seen s = build_grid(2, 1);
    const struct grid *g = &s.g;
    int r = g->world_rank, n = world_size(), dp = n / 2;
    assert_int_equal(s.rc, 0);
    assert_int_equal(g->world_size, n);
    assert_int_equal(g->dp, dp);
    assert_int_equal(g->tp, 2);
    assert_int_equal(g->pp, 1);
    assert_int_equal(g->tp_rank, r % 2);
    assert_int_equal(g->dp_rank, r / 2);
    assert_int_equal(g->pp_rank, 0);
    assert_int_equal(g->dp_comm.size, dp);
    assert_int_equal(g->dp_comm.rank, g->dp_rank);
    assert_int_equal(g->tp_comm.size, 2);
    assert_int_equal(g->tp_comm.rank, g->tp_rank);
    assert_int_equal(g->pp_comm.size, 1);
    float dp_members = 0;
    for (int d = 0; d < dp; d++) dp_members += (float)(d * 2 + g->tp_rank);
    assert_true(s.dp_sum == dp_members);
    assert_true(s.tp_sum == (float)(4 * g->dp_rank + 1)); /* 2d + (2d + 1) */
    assert_true(s.pp_sum == (float)r);
    assert_true(g->tie_member); /* pp = 1: this rank alone */
    assert_int_equal(g->tie_comm.size, 1);
    assert_tie_pair(&s);
}

/* pp = 2: each pipeline stage is a block of dp ranks. */
static void test_grid_pp2(void **state) {
    (void)state;
    if (world_size() % 2) skip();
    struct grid_seen s = build_grid(1, 2);
    const struct grid *g = &s.g;
    int r = g->world_rank, dp = world_size() / 2;
    assert_int_equal(s.rc, 0);
    assert_int_equal(g->dp, dp);
    assert_int_equal(g->pp_rank, r / dp);
    assert_int_equal(g->dp_rank, r % dp);
    assert_int_equal(g->tp_rank, 0);
    assert_int_equal(g->pp_comm.size, 2);
    assert_int_equal(g->pp_comm.rank, g->pp_rank);
    assert_int_equal(g->dp_comm.size, dp);
    assert_int_equal(g->tp_comm.size, 1);
    assert_true(s.pp_sum == (float)(2 * g->dp_rank + dp));
    assert_true(s.tp_sum == (float)r);
    /* pp = 2: every rank is a first or last stage, paired with the rank
     * dp places away: on 2 ranks 0-1, on 4 ranks 0-2 and 1-3. */
    assert_true(g->tie_member);
    assert_int_equal(g->tie_comm.size, 2);
    assert_int_equal(g->tie_comm.rank, g->pp_rank);
    assert_true(s.tie_partner == (float)(g->pp_rank == 0 ? r + dp : r - dp));
    if (world_size() == 4) assert_true(s.tie_partner == (float)((const int[]){2, 3, 0, 1})[r]);
    if (world_size() == 2) assert_true(s.tie_partner == (float)(1 - r));
    assert_tie_pair(&s);
}

/* 4 = dp 1 x tp 2 x pp 2: world rank = pp_rank x 2 + tp_rank. */
static void test_grid_tp2_pp2(void **state) {
    (void)state;
    if (world_size() != 4) skip();
    struct grid_seen s = build_grid(2, 2);
    const struct grid *g = &s.g;
    int r = g->world_rank;
    assert_int_equal(s.rc, 0);
    assert_int_equal(g->dp, 1);
    assert_int_equal(g->tp_rank, r % 2);
    assert_int_equal(g->pp_rank, r / 2);
    assert_int_equal(g->dp_rank, 0);
    assert_true(s.tp_sum == (float)(4 * g->pp_rank + 1));
    assert_true(s.pp_sum == (float)(2 * g->tp_rank + 2));
    assert_true(s.dp_sum == (float)r);
    assert_true(s.tie_partner == (float)((const int[]){2, 3, 0, 1})[r]); /* same tp_rank, other stage */
    assert_tie_pair(&s);
}

/* cp = 2 on 2 or 4 ranks: world rank = dp_rank x 2 + cp_rank; a cp ring is
 * a consecutive pair, and the dp group holds dp x cp ranks (every rank),
 * its rank dp_rank x cp + cp_rank. */
static void test_grid_cp2(void **state) {
    (void)state;
    if (world_size() % 2) skip();
    struct grid_seen s = build_grid_cp(1, 2, 1);
    const struct grid *g = &s.g;
    int r = g->world_rank, n = world_size();
    assert_int_equal(s.rc, 0);
    assert_int_equal(g->dp, n / 2);
    assert_int_equal(g->cp, 2);
    assert_int_equal(g->cp_rank, r % 2);
    assert_int_equal(g->dp_rank, r / 2);
    assert_int_equal(g->cp_comm.size, 2);
    assert_int_equal(g->cp_comm.rank, g->cp_rank);
    assert_int_equal(g->dp_comm.size, n);
    assert_int_equal(g->dp_comm.rank, g->dp_rank * 2 + g->cp_rank);
    assert_int_equal(g->tp_comm.size, 1);
    assert_true(s.cp_sum == (float)(4 * g->dp_rank + 1)); /* 2d + (2d + 1) */
    assert_true(s.dp_sum == (float)(n * (n - 1) / 2));
    assert_true(s.tp_sum == (float)r);
    assert_true(s.pp_sum == (float)r);
}

/* 4 = dp 1 x cp 2 x tp 2: world rank = cp_rank x 2 + tp_rank; the cp ring
 * pairs the ranks of one tp_rank (r, r + 2), as does the dp x cp group. */
static void test_grid_cp2_tp2(void **state) {
    (void)state;
    if (world_size() != 4) skip();
    struct grid_seen s = build_grid_cp(2, 2, 1);
    const struct grid *g = &s.g;
    int r = g->world_rank;
    assert_int_equal(s.rc, 0);
    assert_int_equal(g->dp, 1);
    assert_int_equal(g->tp_rank, r % 2);
    assert_int_equal(g->cp_rank, r / 2);
    assert_true(s.tp_sum == (float)(4 * g->cp_rank + 1));
    assert_true(s.cp_sum == (float)(2 * g->tp_rank + 2));
    assert_true(s.dp_sum == (float)(2 * g->tp_rank + 2));
    assert_int_equal(g->dp_comm.rank, g->cp_rank);
    struct grid_coords at = grid_coords_of(r, g->dp, g->cp, g->tp);
    assert_int_equal(at.cp_rank, g->cp_rank);
    assert_int_equal(grid_world_rank(at, g->dp, g->cp, g->tp), r);
}

/* pp = 1 on any world: the tie group is this rank alone, a member. */
static void test_grid_tie_pp1(void **state) {
    (void)state;
    struct grid_seen s = build_grid(1, 1);
    assert_int_equal(s.rc, 0);
    assert_int_equal(s.g.dp, world_size());
    assert_true(s.g.tie_member);
    assert_int_equal(s.g.tie_comm.size, 1);
    assert_true(s.tie_sum == (float)s.g.world_rank);
    assert_tie_pair(&s);
}

/* pp = world (dp = tp = 1): ranks 0 and N-1 pair up; on 3 and 4 ranks the
 * middle stages are no members, each a group of itself. */
static void test_grid_tie_every_rank_a_stage(void **state) {
    (void)state;
    int n = world_size();
    struct grid_seen s = build_grid(1, n);
    int r = s.g.world_rank;
    bool member = r == 0 || r == n - 1;
    assert_int_equal(s.rc, 0);
    assert_int_equal(s.g.pp_rank, r);
    assert_int_equal(s.g.tie_member, member);
    assert_int_equal(s.g.tie_comm.size, member ? 2 : 1);
    assert_true(s.tie_sum == (float)(member ? n - 1 : r));
    assert_true(s.tie_partner == (float)(r == 0 ? n - 1 : r == n - 1 ? 0 : -1));
    assert_tie_pair(&s);
}

/* grid_group walks the five tables in enum order, named for reports. */
static void test_grid_groups_by_enum(void **state) {
    (void)state;
    struct grid g;
    char err[GRID_ERR_LEN];
    int rc = grid_init(&g, 1, 1, 1, err);
    assert_int_equal(rc, 0);
    struct collectives *want[GROUP_NUM] = {&g.dp_comm, &g.tp_comm, &g.pp_comm, &g.tie_comm, &g.cp_comm};
    const char *names[GROUP_NUM] = {"dp", "tp", "pp", "tie", "cp"};
    bool ok = true;
    for (int k = 0; k < GROUP_NUM; k++)
        ok = ok && grid_group(&g, (enum grid_group)k) == want[k] &&
             strcmp(grid_group_name((enum grid_group)k), names[k]) == 0;
    grid_free(&g);
    assert_true(ok);
}

/* A grid the world cannot form fails on every rank, with a message, before
 * any collective: the test reaching its barrier shows that nobody hangs.
 * tp 3 on 2 or 4 ranks; a world of 3 gets tp 4 instead. */
static void test_grid_rejects_bad_shapes(void **state) {
    (void)state;
    int n = world_size(), tp = n % 3 ? 3 : n + 1;
    struct grid g;
    char err3[GRID_ERR_LEN] = "", err0[GRID_ERR_LEN] = "";
    int rc3 = grid_init(&g, tp, 1, 1, err3);
    int rc0 = grid_init(&g, 0, 1, 2, err0);
    char errbig[GRID_ERR_LEN] = "";
    int rcbig = grid_init(&g, INT_MAX, 1, 2, errbig); /* tp x pp overflows an int */
    char errcp[GRID_ERR_LEN] = "";
    int rccp = grid_init(&g, 1, tp, 1, errcp); /* cp that does not divide the world */
    MPI_Barrier(MPI_COMM_WORLD);
    char want[GRID_ERR_LEN];
    snprintf(want, sizeof want,
             "%d ranks cannot form a grid with cp 1 x tp %d x pp 1: the world size must be a multiple of cp x tp x pp "
             "(dp is what remains)", n, tp);
    assert_int_equal(rccp, -1);
    char want_cp[GRID_ERR_LEN];
    snprintf(want_cp, sizeof want_cp,
             "%d ranks cannot form a grid with cp %d x tp 1 x pp 1: the world size must be a multiple of cp x tp x pp "
             "(dp is what remains)", n, tp);
    assert_string_equal(errcp, want_cp);
    assert_int_equal(rc3, -1);
    assert_string_equal(err3, want);
    assert_int_equal(rc0, -1);
    assert_non_null(strstr(err0, "tp 0"));
    assert_int_equal(rcbig, -1);
    assert_non_null(strstr(errbig, "cannot form a grid"));
}


int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid_tp2),
        cmocka_unit_test(test_grid_pp2),
        cmocka_unit_test(test_grid_tp2_pp2),
        cmocka_unit_test(test_grid_cp2),
        cmocka_unit_test(test_grid_cp2_tp2),
        cmocka_unit_test(test_grid_tie_pp1),
        cmocka_unit_test(test_grid_tie_every_rank_a_stage),
        cmocka_unit_test(test_grid_groups_by_enum),
        cmocka_unit_test(test_grid_rejects_bad_shapes),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return failed;
}
