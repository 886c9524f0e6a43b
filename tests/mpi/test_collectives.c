/* The MPI collectives backend, on every rank of an mpirun world
 * (tests/run_mpi.sh runs this on 2, 3 and 4 ranks); its point-to-point
 * calls are tests/mpi/test_point_to_point.c, the process grid built on it
 * tests/mpi/test_grid.c.
 *
 * Every rank runs the same tests in the same order. Each test makes all of
 * its collective calls before its first assertion, so a failing rank
 * leaves its test without skipping a collective the others are waiting in:
 * the ranks stay in step and the run fails instead of hanging. */
#include <setjmp.h>
#include <stdarg.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mpi.h>

#include "../../parallel/comm/comm_mpi.h"
#include "coll_values.h"


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

/* Three non-blocking collectives in flight at once on a fresh table, waited
 * in reverse order: each gives what its blocking twin gives, counts the
 * same ring volume when posted, and frees its slot when waited. */
static void test_nonblocking_collectives(void **state) {
    (void)state;
    struct collectives c;
    char err[256];
    assert_int_equal(collectives_init_mpi(&c, MPI_COMM_WORLD, err, sizeof err), 0);
    int n = c.size, r = c.rank;
    enum { CHUNK = 40000 }; /* large enough for MPI's rendezvous path */
    float *rs = alloc_values((size_t)n * CHUNK, DTYPE_FP32, r);
    bf16 *ar = alloc_values(CHUNK, DTYPE_BF16, r);
    float *ag = calloc((size_t)n * CHUNK, sizeof *ag), *rs_ring = malloc(CHUNK * sizeof *rs_ring);
    assert_true(ag && rs_ring);
    for (size_t i = 0; i < CHUNK; i++) ag[(size_t)r * CHUNK + i] = value(r, i);
    struct coll_request q[3] = {c.iall_gather(&c, ag, CHUNK, DTYPE_FP32),
                                c.ireduce_scatter_sum(&c, rs, rs_ring, CHUNK, DTYPE_FP32),
                                c.iall_reduce_sum(&c, ar, CHUNK, DTYPE_BF16)};
    struct comm_counters posted = c.counters;
    c.progress(&c);
    int rc[3];
    for (int k = 2; k >= 0; k--) rc[k] = c.wait(&c, q[k]);
    struct comm_counters k = c.counters;
    collectives_free_mpi(&c);
    size_t bad = 0;
    for (int owner = 0; owner < n; owner++)
        for (size_t i = 0; i < CHUNK; i++) bad += ag[(size_t)owner * CHUNK + i] != value(owner, i);
    for (size_t i = 0; i < CHUNK; i++) {
        bad += rs[i] != value_sum(n, (size_t)r * CHUNK + i);
        bad += bf16_to_f32(ar[i]) != value_sum(n, i);
    }
    free(rs);
    free(rs_ring);
    free(ar);
    free(ag);
    assert_int_equal(bad, 0);
    for (int j = 0; j < 3; j++) {
        assert_true(q[j].slot >= 0);
        assert_int_equal(rc[j], 0);
    }
    assert_true(posted.bytes[COLL_ALL_GATHER] == (double)(n - 1) * CHUNK * 4);
    assert_true(posted.bytes[COLL_REDUCE_SCATTER] == (double)(n - 1) * CHUNK * 4);
    assert_true(posted.bytes[COLL_ALL_REDUCE] == 2.0 * (n - 1) * CHUNK * 2 / n);
    for (int j = 0; j < COLL_NUM_KINDS; j++) {
        assert_true(k.bytes[j] == posted.bytes[j]); /* wait adds no bytes or calls */
        assert_int_equal(k.calls[j], posted.calls[j]);
    }
    assert_int_equal(k.calls[COLL_ALL_GATHER] + k.calls[COLL_REDUCE_SCATTER] + k.calls[COLL_ALL_REDUCE], 3);
    assert_true(posted.seconds == 0.0 && posted.exposed_seconds > 0.0); /* in flight counts at completion */
    assert_true(k.seconds > 0.0 && k.exposed_seconds > posted.exposed_seconds);
}

/* Values whose fp32 and bf16 sums depend on the order of the additions:
 * magnitudes 2^-10 .. 2^9 and both signs, by a hash of (rank, i). */
static float ring_value(int rank, size_t i) {
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(rank + 1) * 40503u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return ldexpf((float)(h % 2001) - 1000.0f, (int)(h >> 20) % 20 - 20);
}

/* The ring's sum of chunk `owner`, element i: from rank owner+1 round to
 * owner itself, each addition rounded to dt (comm_mpi_ring.c). */
static float ring_sum(int n, int owner, size_t chunk, size_t i, enum dtype dt) {
    float s = 0;
    for (int k = 1; k <= n; k++) {
        float v = ring_value((owner + k) % n, (size_t)owner * chunk + i);
        if (dt == DTYPE_BF16) v = bf16_to_f32(f32_to_bf16(v));
        s = k == 1 ? v : s + v;
        if (dt == DTYPE_BF16) s = bf16_to_f32(f32_to_bf16(s));
    }
    return s;
}

/* The non-blocking reduce-scatter is the table's ring of point-to-point
 * steps (issue 27: MPI's own reduced through untracked temporaries on
 * rank 0): its sums are the ring's, bit for bit, in both dtypes; two rings
 * in flight at once (ZeRO's two buckets) advanced by progress alone do not
 * take each other's messages; each counts the ring volume, which is what it
 * sends, and no point-to-point traffic. */
static void test_ring_reduce_scatter(void **state) {
    (void)state;
    struct collectives c;
    char err[256];
    assert_int_equal(collectives_init_mpi(&c, MPI_COMM_WORLD, err, sizeof err), 0);
    int n = c.size, r = c.rank;
    enum { CHUNK = 30000 }; /* large enough for MPI's rendezvous path */
    float *f = malloc((size_t)n * CHUNK * sizeof *f), *f_ring = malloc(CHUNK * sizeof *f_ring);
    bf16 *h = malloc((size_t)n * CHUNK * sizeof *h), *h_ring = malloc(CHUNK * sizeof *h_ring);
    assert_true(f && f_ring && h && h_ring);
    for (size_t i = 0; i < (size_t)n * CHUNK; i++) {
        f[i] = ring_value(r, i);
        h[i] = f32_to_bf16(ring_value(r, i));
    }
    struct coll_request q[2] = {c.ireduce_scatter_sum(&c, f, f_ring, CHUNK, DTYPE_FP32),
                                c.ireduce_scatter_sum(&c, h, h_ring, CHUNK, DTYPE_BF16)};
    enum { POLLS = 1000 };
    for (int k = 0; k < POLLS; k++) c.progress(&c);
    int rc[2] = {c.wait(&c, q[0]), c.wait(&c, q[1])};
    struct comm_counters k = c.counters;
    collectives_free_mpi(&c);
    size_t bad[2] = {0, 0};
    for (size_t i = 0; i < CHUNK; i++) {
        bad[0] += memcmp(&f[i], &(float){ring_sum(n, r, CHUNK, i, DTYPE_FP32)}, sizeof(float)) != 0;
        bad[1] += bf16_to_f32(h[i]) != ring_sum(n, r, CHUNK, i, DTYPE_BF16);
    }
    free(f);
    free(f_ring);
    free(h);
    free(h_ring);
    assert_int_equal(rc[0], 0);
    assert_int_equal(rc[1], 0);
    assert_int_equal(bad[0], 0);
    assert_int_equal(bad[1], 0);
    assert_int_equal(k.calls[COLL_REDUCE_SCATTER], 2);
    assert_true(k.bytes[COLL_REDUCE_SCATTER] == (double)(n - 1) * CHUNK * (4 + 2));
    assert_int_equal(k.calls[COLL_SEND] + k.calls[COLL_RECV], 0);
}

/* Quarters in -1.5..1.5 (exact in bf16); the max over ranks differs from
 * every single rank's value for some i, so a missing rank shows. */
static float max_value(int rank, size_t i) { return 0.25f * (float)((int)((i * 5 + (size_t)rank * 3) % 13) - 6); }

static void test_all_reduce_max(void **state) {
    struct collectives *c = *state;
    size_t bad[2][NSIZES] = {{0}};
    for (int d = 0; d < 2; d++) {
        enum dtype dt = d == 0 ? DTYPE_FP32 : DTYPE_BF16;
        for (int s = 0; s < NSIZES; s++) {
            size_t n = sizes[s];
            void *buf = malloc(n * dtype_size(dt));
            assert_non_null(buf);
            for (size_t i = 0; i < n; i++) {
                if (dt == DTYPE_FP32) ((float *)buf)[i] = max_value(c->rank, i);
                else ((bf16 *)buf)[i] = f32_to_bf16(max_value(c->rank, i));
            }
            c->all_reduce_max(c, buf, n, dt);
            for (size_t i = 0; i < n; i++) {
                float want = max_value(0, i);
                for (int r = 1; r < c->size; r++) want = max_value(r, i) > want ? max_value(r, i) : want;
                bad[d][s] += get(buf, i, dt) != want;
            }
            free(buf);
        }
    }
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < NSIZES; s++) assert_int_equal(bad[d][s], 0);
}

/* The order-free rule of collectives.h: -Inf loses to any finite; +0 on
 * rank 1 beats -0 elsewhere; all -0 stays -0; and a NaN on any one rank
 * wins (element 3 + q holds it on rank q), whichever operand it is. */
static void test_all_reduce_max_nan_and_zeros(void **state) {
    struct collectives *c = *state;
    enum { N = 3 + 4 };
    float f[N] = {c->rank == 0 ? -1e30f : -INFINITY, c->rank == 1 ? 0.0f : -0.0f, -0.0f};
    for (int q = 0; q < 4; q++) f[3 + q] = c->rank == q ? NAN : 1.0f;
    bf16 h[N];
    for (int i = 0; i < N; i++) h[i] = f32_to_bf16(f[i]);
    c->all_reduce_max(c, f, N, DTYPE_FP32);
    c->all_reduce_max(c, h, N, DTYPE_BF16);
    assert_true(f[0] == -1e30f);
    assert_int_equal(f32_bits(f[1]), 0x00000000u);
    assert_int_equal(f32_bits(f[2]), 0x80000000u);
    assert_int_equal(h[0], f32_to_bf16(-1e30f));
    assert_int_equal(h[1], 0x0000);
    assert_int_equal(h[2], 0x8000);
    for (int q = 0; q < 4; q++) {
        bool has_nan = q < c->size;
        assert_true(has_nan ? isnan(f[3 + q]) : f[3 + q] == 1.0f);
        assert_int_equal(h[3 + q], has_nan ? 0x7fc0 : 0x3f80);
    }
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
        cmocka_unit_test(test_nonblocking_collectives),
        cmocka_unit_test(test_ring_reduce_scatter),
        cmocka_unit_test(test_all_reduce_max),
        cmocka_unit_test(test_all_reduce_max_nan_and_zeros),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    MPI_Finalize();
    return failed;
}

