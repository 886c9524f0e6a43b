/* The MPI collectives backend and the process grid, on every rank of an
 * mpirun world (tests/run_mpi.sh runs this on 2, 3 and 4 ranks).
 *
 * Also fine on 3 ranks (the grid tests that need an even world skip).
 *
 * Every rank runs the same tests in the same order. Each test makes all of
 * its collective calls before its first assertion, so a failing rank
 * leaves its test without skipping a collective the others are waiting in:
 * the ranks stay in step and the run fails instead of hanging. */
#include <setjmp.h>
#include <stdarg.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mpi.h>

#include "comm_mpi.h"
#include "grid.h"

static int setup(void **state) {
    struct collectives *c = malloc(sizeof *c);
    char err[256];
    if (!c || collectives_init_mpi(c, MPI_COMM_WORLD, err, sizeof err) != 0) {
        free(c);
        return -1;
    }
    *state = c;
    return 0;
}

static int teardown(void **state) {
    collectives_free_mpi(*state);
    free(*state);
    return 0;
}

/* Small multiples of 1/2: every partial sum over up to 4 ranks is exact in
 * bf16 (at most 8 significant bits), so any reduction order gives it. */
static float value(int rank, size_t i) { return 0.5f * (float)((int)(i % 7) - 3) * (float)(rank + 1); }

static float value_sum(int nranks, size_t i) {
    float s = 0;
    for (int r = 0; r < nranks; r++) s += value(r, i);
    return s;
}

static void *alloc_values(size_t n, enum dtype dt, int rank) {
    void *buf = malloc(n * dtype_size(dt));
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++) {
        if (dt == DTYPE_FP32) ((float *)buf)[i] = value(rank, i);
        else ((bf16 *)buf)[i] = f32_to_bf16(value(rank, i));
    }
    return buf;
}

static float get(const void *buf, size_t i, enum dtype dt) {
    return dt == DTYPE_FP32 ? ((const float *)buf)[i] : bf16_to_f32(((const bf16 *)buf)[i]);
}

/* Sizes on both sides of OpenMPI's algorithm switches (tuned component). */
static const size_t sizes[] = {1, 3, 1000, 70000};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };

static void test_all_reduce_sum(void **state) {
    struct collectives *c = *state;
    size_t bad[2][NSIZES] = {{0}};
    for (int d = 0; d < 2; d++) {
        enum dtype dt = d == 0 ? DTYPE_FP32 : DTYPE_BF16;
        for (int s = 0; s < NSIZES; s++) {
            void *buf = alloc_values(sizes[s], dt, c->rank);
            c->all_reduce_sum(c, buf, sizes[s], dt);
            for (size_t i = 0; i < sizes[s]; i++) bad[d][s] += get(buf, i, dt) != value_sum(c->size, i);
            free(buf);
        }
    }
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < NSIZES; s++) assert_int_equal(bad[d][s], 0);
}

/* The bf16 op adds in fp32 and rounds the sum once, to nearest even.
 * Ranks 0 and 1 hold a and b, the others +0, so every reduction order
 * computes RNE(a + b). 1 + 1.5 x 2^-8 lies above the midpoint between 1
 * and the next bf16 (1 + 2^-7): RNE rounds up where truncating the sum (or
 * adding bit patterns as integers) would not; the ties go to even. */
static void test_bf16_sum_rounds_to_nearest_even(void **state) {
    struct collectives *c = *state;
    const float a[] = {1.0f, 1.0f, 1.0078125f, -1.0f, 256.0f};
    const float b[] = {0.005859375f, 0.00390625f, 0.00390625f, -0.005859375f, 1.0f};
    const bf16 want[] = {0x3f81, 0x3f80 /* tie, even */, 0x3f82 /* tie, even */, 0xbf81, 0x4380 /* 257 -> 256 */};
    enum { N = sizeof a / sizeof a[0] };
    bf16 buf[N];
    for (int i = 0; i < N; i++) buf[i] = f32_to_bf16(c->rank == 0 ? a[i] : c->rank == 1 ? b[i] : 0.0f);
    c->all_reduce_sum(c, buf, N, DTYPE_BF16);
    for (int i = 0; i < N; i++) assert_int_equal(buf[i], want[i]);
}

static void test_reduce_scatter_sum(void **state) {
    struct collectives *c = *state;
    size_t bad[2][NSIZES] = {{0}};
    for (int d = 0; d < 2; d++) {
        enum dtype dt = d == 0 ? DTYPE_FP32 : DTYPE_BF16;
        for (int s = 0; s < NSIZES; s++) {
            size_t chunk = sizes[s], mine = (size_t)c->rank * chunk;
            void *buf = alloc_values((size_t)c->size * chunk, dt, c->rank);
            c->reduce_scatter_sum(c, buf, chunk, dt);
            /* this rank's chunk of the sum, at the start of buf */
            for (size_t i = 0; i < chunk; i++) bad[d][s] += get(buf, i, dt) != value_sum(c->size, mine + i);
            free(buf);
        }
    }
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < NSIZES; s++) assert_int_equal(bad[d][s], 0);
}

static void test_all_gather(void **state) {
    struct collectives *c = *state;
    size_t bad[2][NSIZES] = {{0}};
    for (int d = 0; d < 2; d++) {
        enum dtype dt = d == 0 ? DTYPE_FP32 : DTYPE_BF16;
        for (int s = 0; s < NSIZES; s++) {
            size_t chunk = sizes[s], n = (size_t)c->size * chunk, esz = dtype_size(dt);
            char *buf = malloc(n * esz);
            assert_non_null(buf);
            memset(buf, 0xff, n * esz); /* NaN in both dtypes: every foreign chunk must be overwritten */
            void *mine = alloc_values(chunk, dt, c->rank);
            memcpy(buf + (size_t)c->rank * chunk * esz, mine, chunk * esz);
            c->all_gather(c, buf, chunk, dt);
            for (int q = 0; q < c->size; q++)
                for (size_t i = 0; i < chunk; i++) bad[d][s] += get(buf, (size_t)q * chunk + i, dt) != value(q, i);
            free(mine);
            free(buf);
        }
    }
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < NSIZES; s++) assert_int_equal(bad[d][s], 0);
}

static void test_all_reduce_scalars(void **state) {
    struct collectives *c = *state;
    double v[3] = {(double)c->rank, 1.0, 0.25 * c->rank * c->rank};
    c->all_reduce_scalars(c, v, 3);
    int n = c->size;
    assert_true(v[0] == n * (n - 1) / 2.0);
    assert_true(v[1] == n);
    assert_true(v[2] == 0.25 * (n - 1) * n * (2 * n - 1) / 6.0);
}

/* Counters on a fresh table equal the ring formulas of collectives.h. */
static void test_counters_follow_ring_formulas(void **state) {
    (void)state;
    struct collectives c;
    char err[256];
    assert_int_equal(collectives_init_mpi(&c, MPI_COMM_WORLD, err, sizeof err), 0);
    int n = c.size;
    float *f = calloc(1000, sizeof *f);
    bf16 *h = calloc((size_t)n * 1000, sizeof *h);
    double s[2] = {0, 0};
    assert_true(f && h);
    c.all_reduce_sum(&c, f, 1000, DTYPE_FP32);      /* M = 4000 */
    c.reduce_scatter_sum(&c, h, 1000, DTYPE_BF16);  /* M = n x 2000 */
    c.reduce_scatter_sum(&c, h, 1000, DTYPE_BF16);
    c.all_gather(&c, h, 1000, DTYPE_BF16);          /* M = n x 2000 */
    c.all_reduce_scalars(&c, s, 2);                 /* M = 16 */
    c.barrier(&c);
    struct comm_counters k = c.counters;
    collectives_free_mpi(&c);
    free(f);
    free(h);
    assert_true(k.bytes[COLL_ALL_REDUCE] == 2.0 * (n - 1) * 4000 / n);
    assert_true(k.bytes[COLL_REDUCE_SCATTER] == 2.0 * (n - 1) * 2000); /* two calls of (n-1)/n x n x 2000 */
    assert_true(k.bytes[COLL_ALL_GATHER] == (double)(n - 1) * 2000);
    assert_true(k.bytes[COLL_SCALAR] == 2.0 * (n - 1) * 16 / n);
    if (n == 4) assert_true(k.bytes[COLL_REDUCE_SCATTER] == 2 * 6000.0); /* 3/4 x 8000, twice */
    assert_int_equal(k.calls[COLL_ALL_REDUCE], 1);
    assert_int_equal(k.calls[COLL_REDUCE_SCATTER], 2);
    assert_int_equal(k.calls[COLL_ALL_GATHER], 1);
    assert_int_equal(k.calls[COLL_SCALAR], 1);
    assert_true(k.seconds > 0.0);
}

/* What a grid test checks, copied out before grid_free (a collective). */
struct grid_seen {
    int rc;
    struct grid g;   /* the fields; its collectives are freed */
    float dp_sum, tp_sum, pp_sum;  /* world ranks summed over each group */
};

static struct grid_seen build_grid(int tp, int pp) {
    struct grid_seen s = {0};
    char err[GRID_ERR_LEN];
    s.rc = grid_init(&s.g, tp, pp, err);
    if (s.rc != 0) return s;
    s.dp_sum = s.tp_sum = s.pp_sum = (float)s.g.world_rank;
    s.g.dp_comm.all_reduce_sum(&s.g.dp_comm, &s.dp_sum, 1, DTYPE_FP32);
    s.g.tp_comm.all_reduce_sum(&s.g.tp_comm, &s.tp_sum, 1, DTYPE_FP32);
    s.g.pp_comm.all_reduce_sum(&s.g.pp_comm, &s.pp_sum, 1, DTYPE_FP32);
    grid_free(&s.g);
    return s;
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
}

/* A grid the world cannot form fails on every rank, with a message, before
 * any collective: the test reaching its barrier shows that nobody hangs.
 * tp 3 on 2 or 4 ranks; a world of 3 gets tp 4 instead. */
static void test_grid_rejects_bad_shapes(void **state) {
    (void)state;
    int n = world_size(), tp = n % 3 ? 3 : n + 1;
    struct grid g;
    char err3[GRID_ERR_LEN] = "", err0[GRID_ERR_LEN] = "";
    int rc3 = grid_init(&g, tp, 1, err3);
    int rc0 = grid_init(&g, 0, 2, err0);
    char errbig[GRID_ERR_LEN] = "";
    int rcbig = grid_init(&g, INT_MAX, 2, errbig); /* tp x pp overflows an int */
    MPI_Barrier(MPI_COMM_WORLD);
    char want[GRID_ERR_LEN];
    snprintf(want, sizeof want,
             "%d ranks cannot form a grid with tp %d x pp 1: the world size must be a multiple of tp x pp", n, tp);
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
        cmocka_unit_test(test_all_reduce_sum),
        cmocka_unit_test(test_bf16_sum_rounds_to_nearest_even),
        cmocka_unit_test(test_reduce_scatter_sum),
        cmocka_unit_test(test_all_gather),
        cmocka_unit_test(test_all_reduce_scalars),
        cmocka_unit_test(test_counters_follow_ring_formulas),
        cmocka_unit_test(test_grid_tp2),
        cmocka_unit_test(test_grid_pp2),
        cmocka_unit_test(test_grid_tp2_pp2),
        cmocka_unit_test(test_grid_rejects_bad_shapes),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    MPI_Finalize();
    return failed;
}
