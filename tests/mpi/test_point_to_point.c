/* The MPI table's point-to-point calls and their counters, on every rank
 * of an mpirun world (tests/run_mpi.sh: 2, 3 and 4 ranks): blocking and
 * non-blocking sends around the ring, tags matched out of order, the
 * payload counters, and caller bugs reported, not hung. The collectives
 * are tests/mpi/test_collectives.c. As there, every rank makes all of a
 * test's calls before its first assertion, so a failing rank cannot leave
 * the others waiting. */
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
#include "../stderr_capture.h"

static int next_of(const struct collectives *c) { return (c->rank + 1) % c->size; }
static int prev_of(const struct collectives *c) { return (c->rank + c->size - 1) % c->size; }

/* Blocking ring: rank 0 sends first and receives last, every other rank
 * receives then sends, so no send waits on a rank that is itself sending
 * (70000 values go by rendezvous). Each rank ends with its predecessor's
 * values, tag by tag. */
static void test_send_recv_ring(void **state) {
    struct collectives *c = *state;
    int rc_bad = 0;
    size_t bad[2][NSIZES] = {{0}};
    for (int d = 0; d < 2; d++) {
        enum dtype dt = d == 0 ? DTYPE_FP32 : DTYPE_BF16;
        for (int s = 0; s < NSIZES; s++) {
            int tag = 10 + 2 * s + d;
            void *mine = alloc_values(sizes[s], dt, c->rank);
            void *got = malloc(sizes[s] * dtype_size(dt));
            assert_non_null(got);
            if (c->rank == 0) {
                rc_bad += c->send(c, mine, sizes[s], dt, next_of(c), tag) != 0;
                rc_bad += c->recv(c, got, sizes[s], dt, prev_of(c), tag) != 0;
            } else {
                rc_bad += c->recv(c, got, sizes[s], dt, prev_of(c), tag) != 0;
                rc_bad += c->send(c, mine, sizes[s], dt, next_of(c), tag) != 0;
            }
            for (size_t i = 0; i < sizes[s]; i++) bad[d][s] += get(got, i, dt) != value(prev_of(c), i);
            free(mine);
            free(got);
        }
    }
    assert_int_equal(rc_bad, 0);
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < NSIZES; s++) assert_int_equal(bad[d][s], 0);
}

/* Two messages to the same peer, tag 1 (70000 values) then tag 2 (3
 * values), sent blocking in that order; the receiver posts irecv for tag 2
 * first and waits on it first. Tags, not arrival order, match them. */
static void test_tags_match_out_of_order(void **state) {
    struct collectives *c = *state;
    enum { BIG = 70000, SMALL = 3 };
    float *big = malloc(BIG * sizeof *big), *big_got = malloc(BIG * sizeof *big_got);
    assert_true(big && big_got);
    float small[SMALL], small_got[SMALL] = {0};
    for (size_t i = 0; i < BIG; i++) big[i] = value(c->rank, i);
    for (int i = 0; i < SMALL; i++) small[i] = -100.0f * (float)(c->rank + 1) - (float)i;
    struct coll_request r2 = c->irecv(c, small_got, SMALL, DTYPE_FP32, prev_of(c), 2);
    struct coll_request r1 = c->irecv(c, big_got, BIG, DTYPE_FP32, prev_of(c), 1);
    int rc[4];
    rc[0] = c->send(c, big, BIG, DTYPE_FP32, next_of(c), 1);
    rc[1] = c->send(c, small, SMALL, DTYPE_FP32, next_of(c), 2);
    rc[2] = c->wait(c, r2);
    rc[3] = c->wait(c, r1);
    size_t bad = 0;
    for (size_t i = 0; i < BIG; i++) bad += big_got[i] != value(prev_of(c), i);
    free(big);
    free(big_got);
    for (int i = 0; i < 4; i++) assert_int_equal(rc[i], 0);
    assert_true(r1.slot >= 0 && r2.slot >= 0 && r1.slot != r2.slot);
    assert_int_equal(bad, 0);
    for (int i = 0; i < SMALL; i++) assert_true(small_got[i] == -100.0f * (float)(prev_of(c) + 1) - (float)i);
}

/* Non-blocking both ways: isend to both neighbours, irecv from both, then
 * wait on all four in an order unlike the posts. On 2 ranks both
 * neighbours are the same rank and only the tags tell the messages apart. */
static void test_isend_irecv_both_neighbours(void **state) {
    struct collectives *c = *state;
    enum { N = 1000 };
    bf16 to_next[N], to_prev[N], from_prev[N], from_next[N];
    for (int i = 0; i < N; i++) {
        to_next[i] = f32_to_bf16(value(c->rank, (size_t)i));
        to_prev[i] = f32_to_bf16(-value(c->rank, (size_t)i) + 64.0f);
    }
    struct coll_request r[4];
    r[0] = c->isend(c, to_next, N, DTYPE_BF16, next_of(c), 5);
    r[1] = c->isend(c, to_prev, N, DTYPE_BF16, prev_of(c), 6);
    r[2] = c->irecv(c, from_prev, N, DTYPE_BF16, prev_of(c), 5);
    r[3] = c->irecv(c, from_next, N, DTYPE_BF16, next_of(c), 6);
    int rc[4];
    rc[0] = c->wait(c, r[3]);
    rc[1] = c->wait(c, r[0]);
    rc[2] = c->wait(c, r[2]);
    rc[3] = c->wait(c, r[1]);
    for (int i = 0; i < 4; i++) assert_int_equal(rc[i], 0);
    size_t bad = 0;
    for (int i = 0; i < N; i++) {
        bad += bf16_to_f32(from_prev[i]) != value(prev_of(c), (size_t)i);
        bad += bf16_to_f32(from_next[i]) != -value(next_of(c), (size_t)i) + 64.0f;
    }
    assert_int_equal(bad, 0);
}

/* Point-to-point payloads and the max's ring volume, exactly. */
static void test_counters_point_to_point_and_max(void **state) {
    (void)state;
    struct collectives c;
    char err[256];
    assert_int_equal(collectives_init_mpi(&c, MPI_COMM_WORLD, err, sizeof err), 0);
    int n = c.size;
    float *f = calloc(1000, sizeof *f), *g = calloc(1000, sizeof *g);
    bf16 h[500] = {0}, k3[3] = {0}, k3_got[3];
    assert_true(f && g);
    struct coll_request r[2] = {c.isend(&c, f, 1000, DTYPE_FP32, next_of(&c), 1),   /* 4000 B out */
                                c.irecv(&c, g, 1000, DTYPE_FP32, prev_of(&c), 1)};  /* 4000 B in */
    int rc = c.wait(&c, r[0]) | c.wait(&c, r[1]);
    if (c.rank == 0) { /* ring order again: 6 B out and in */
        rc |= c.send(&c, k3, 3, DTYPE_BF16, next_of(&c), 2);
        rc |= c.recv(&c, k3_got, 3, DTYPE_BF16, prev_of(&c), 2);
    } else {
        rc |= c.recv(&c, k3_got, 3, DTYPE_BF16, prev_of(&c), 2);
        rc |= c.send(&c, k3, 3, DTYPE_BF16, next_of(&c), 2);
    }
    c.all_reduce_max(&c, f, 1000, DTYPE_FP32); /* M = 4000 */
    c.all_reduce_max(&c, h, 500, DTYPE_BF16);  /* M = 1000 */
    struct comm_counters k = c.counters;
    collectives_free_mpi(&c);
    free(f);
    free(g);
    assert_int_equal(rc, 0);
    assert_true(k.bytes[COLL_SEND] == 4006.0);
    assert_true(k.bytes[COLL_RECV] == 4006.0);
    assert_int_equal(k.calls[COLL_SEND], 2);
    assert_int_equal(k.calls[COLL_RECV], 2);
    assert_true(k.bytes[COLL_ALL_REDUCE_MAX] == 2.0 * (n - 1) * 4000 / n + 2.0 * (n - 1) * 1000 / n);
    if (n == 4) assert_true(k.bytes[COLL_ALL_REDUCE_MAX] == 7500.0); /* 2 x 3/4 x 5000 */
    assert_int_equal(k.calls[COLL_ALL_REDUCE_MAX], 2);
    for (int j = 0; j < COLL_NUM_KINDS; j++)
        if (j != COLL_SEND && j != COLL_RECV && j != COLL_ALL_REDUCE_MAX) {
            assert_true(k.bytes[j] == 0.0);
            assert_int_equal(k.calls[j], 0);
        }
    assert_true(k.seconds > 0.0);
}

/* Captures stderr around one call. */
#define CAPTURED(msg, call)                                                                                          \
    do {                                                                                                             \
        struct stderr_capture cap_;                                                                                  \
        int began_ = stderr_capture_begin(&cap_);                                                                    \
        call;                                                                                                        \
        if (began_ == 0) stderr_capture_end(&cap_, msg, sizeof msg);                                                 \
        else snprintf(msg, sizeof msg, "(stderr not captured)");                                                     \
    } while (0)

/* Caller bugs under MPI_ERRORS_RETURN (the table's duplicate inherits the
 * handler): each call fails, names itself and the problem on stderr, moves
 * no data and counts nothing; the table stays usable. */
static void test_point_to_point_errors(void **state) {
    (void)state;
    MPI_Comm returning;
    MPI_Comm_dup(MPI_COMM_WORLD, &returning);
    MPI_Comm_set_errhandler(returning, MPI_ERRORS_RETURN);
    struct collectives c;
    char err[256];
    int init_rc = collectives_init_mpi(&c, returning, err, sizeof err);
    MPI_Comm_free(&returning);
    assert_int_equal(init_rc, 0);
    float x[5] = {1, 2, 3, 4, 5}, y[5] = {-1, -1, -1, -1, -1};
    char msg[8][512];
    int rc[7];
    struct coll_request bad_tag, bad_tag2;
    CAPTURED(msg[0], rc[0] = c.send(&c, x, 5, DTYPE_FP32, c.rank, 0));
    CAPTURED(msg[1], rc[1] = c.recv(&c, y, 5, DTYPE_FP32, c.size, 0));
    CAPTURED(msg[2], bad_tag = c.isend(&c, x, 5, DTYPE_FP32, next_of(&c), -1));
    CAPTURED(msg[3], bad_tag2 = c.irecv(&c, y, 5, DTYPE_FP32, prev_of(&c), COLL_TAG_MAX + 1));
    CAPTURED(msg[4], rc[4] = c.wait(&c, bad_tag));
    struct comm_counters after_errors = c.counters;
    bool y_untouched = y[0] == -1.0f && y[4] == -1.0f;

    /* Fill the request table, then one more. */
    float slots[COLL_MAX_REQUESTS];
    struct coll_request r[COLL_MAX_REQUESTS], over;
    for (int i = 0; i < COLL_MAX_REQUESTS; i++) r[i] = c.irecv(&c, &slots[i], 1, DTYPE_FP32, prev_of(&c), i);
    CAPTURED(msg[5], over = c.irecv(&c, y, 1, DTYPE_FP32, prev_of(&c), 99));
    int sent = 0;
    for (int i = 0; i < COLL_MAX_REQUESTS; i++) {
        float v = (float)(100 * c.rank + i);
        sent += c.send(&c, &v, 1, DTYPE_FP32, next_of(&c), i) == 0;
    }
    int waited = 0;
    for (int i = COLL_MAX_REQUESTS - 1; i >= 0; i--) waited += c.wait(&c, r[i]) == 0;
    /* r[0]'s slot is free again: a new post may take it under a new serial */
    struct coll_request again = c.irecv(&c, y, 3, DTYPE_FP32, prev_of(&c), 7);
    CAPTURED(msg[6], rc[6] = c.wait(&c, r[0]));
    rc[2] = c.send(&c, x, 3, DTYPE_FP32, next_of(&c), 7);
    rc[3] = c.wait(&c, again);
    /* A message shorter than the receive asks for: rank 0 sends 2 values,
     * rank 1 asks for 5. */
    int short_rc = 0;
    if (c.rank == 0) short_rc = c.send(&c, x, 2, DTYPE_FP32, 1, 8);
    if (c.rank == 1) CAPTURED(msg[7], short_rc = c.recv(&c, y, 5, DTYPE_FP32, 0, 8));
    struct comm_counters end = c.counters;
    collectives_free_mpi(&c);

    assert_int_equal(rc[0], -1);
    assert_non_null(strstr(msg[0], "collectives: send on rank"));
    assert_non_null(strstr(msg[0], "is this rank"));
    assert_int_equal(rc[1], -1);
    assert_non_null(strstr(msg[1], "collectives: recv on rank"));
    assert_non_null(strstr(msg[1], "is not a rank of this group"));
    assert_int_equal(bad_tag.slot, -1);
    assert_non_null(strstr(msg[2], "collectives: isend on rank"));
    assert_non_null(strstr(msg[2], "tag -1 is outside 0..32767"));
    assert_int_equal(bad_tag2.slot, -1);
    assert_non_null(strstr(msg[3], "collectives: irecv on rank"));
    assert_non_null(strstr(msg[3], "tag 32768"));
    assert_int_equal(rc[4], -1);
    assert_non_null(strstr(msg[4], "collectives: wait on rank"));
    assert_non_null(strstr(msg[4], "slot -1"));
    for (int k = 0; k < COLL_NUM_KINDS; k++) assert_int_equal(after_errors.calls[k], 0);
    assert_true(after_errors.bytes[COLL_SEND] == 0.0 && after_errors.bytes[COLL_RECV] == 0.0);
    assert_true(y_untouched);

    assert_int_equal(over.slot, -1);
    assert_non_null(strstr(msg[5], "collectives: irecv on rank"));
    char full[96];
    snprintf(full, sizeof full, "all %d request slots of this table are pending", COLL_MAX_REQUESTS);
    assert_non_null(strstr(msg[5], full));
    assert_int_equal(sent, COLL_MAX_REQUESTS);
    assert_int_equal(waited, COLL_MAX_REQUESTS);
    for (int i = 0; i < COLL_MAX_REQUESTS; i++) assert_true(slots[i] == (float)(100 * prev_of(&c) + i));
    assert_int_equal(again.slot, r[0].slot);
    assert_int_not_equal(again.serial, r[0].serial);
    assert_int_equal(rc[6], -1);
    assert_non_null(strstr(msg[6], "is not pending on this table"));
    assert_int_equal(rc[2], 0);
    assert_int_equal(rc[3], 0);
    assert_int_equal(short_rc, c.rank == 1 ? -1 : 0);
    if (c.rank == 1) {
        assert_non_null(strstr(msg[7], "collectives: recv on rank 1"));
        assert_non_null(strstr(msg[7], "expected 5 values from peer 0 (tag 8), the message holds 2"));
    }
    /* Only calls that succeeded count: 32 + 1 irecvs of 4 and 12 B (rank
     * 1's short recv failed), sends likewise plus rank 0's short one. */
    assert_int_equal(end.calls[COLL_RECV], COLL_MAX_REQUESTS + 1);
    assert_true(end.bytes[COLL_RECV] == 4.0 * COLL_MAX_REQUESTS + 12.0);
    assert_int_equal(end.calls[COLL_SEND], COLL_MAX_REQUESTS + 1 + (c.rank == 0));
    assert_true(end.bytes[COLL_SEND] == 4.0 * COLL_MAX_REQUESTS + 12.0 + (c.rank == 0 ? 8.0 : 0.0));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_send_recv_ring),
        cmocka_unit_test(test_tags_match_out_of_order),
        cmocka_unit_test(test_isend_irecv_both_neighbours),
        cmocka_unit_test(test_counters_point_to_point_and_max),
        cmocka_unit_test(test_point_to_point_errors),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    MPI_Finalize();
    return failed;
}

