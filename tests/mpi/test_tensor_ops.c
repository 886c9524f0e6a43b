/* Megatron's conjugate operators f and g (model/tensor_parallel/tp.h) over a
 * tensor-parallel group of every rank (tp = world): f is the identity
 * forward and sums the gradient backward; g sums forward and is the
 * identity backward. Exact sums of small integers in fp32 and bf16, and
 * bytes counted as the all-reduces they are; nothing moves at tp = 1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <mpi.h>

#include "grid.h"
#include "mpi_fixture.h"
#include "../../model/tensor_parallel/tp.h"

enum { N = 1000 };

static struct grid G;

static int setup(void **state) {
    (void)state;
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    char err[GRID_ERR_LEN];
    return grid_init(&G, world, 1, 1, err); /* every rank in one tp group */
}

static int teardown(void **state) {
    (void)state;
    grid_free(&G);
    return 0;
}

/* x[i] = rank + i % 7: small integers, so sums are exact in bf16 too. */
static void fill(float *x, int rank) {
    for (int i = 0; i < N; i++) x[i] = (float)(rank + i % 7);
}

static void check_sum(const float *x, int size) {
    bool ok = true;
    for (int i = 0; i < N; i++) ok = ok && x[i] == (float)(size * (size - 1) / 2 + size * (i % 7));
    assert_true(all_ok(ok));
}

static void check_unchanged(const float *x, int rank) {
    bool ok = true;
    for (int i = 0; i < N; i++) ok = ok && x[i] == (float)(rank + i % 7);
    assert_true(all_ok(ok));
}

static void test_f_and_g_fp32(void **state) {
    (void)state;
    struct collectives *tp = &G.tp_comm;
    float x[N];
    struct comm_counters before = tp->counters;
    fill(x, tp->rank);
    tp_f_forward(tp, x, N, DTYPE_FP32);
    check_unchanged(x, tp->rank);
    tp_g_backward(tp, x, N, DTYPE_FP32);
    check_unchanged(x, tp->rank);
    assert_true(tp->counters.calls[COLL_ALL_REDUCE] == before.calls[COLL_ALL_REDUCE]); /* identities move nothing */
    tp_f_backward(tp, x, N, DTYPE_FP32);
    check_sum(x, tp->size);
    fill(x, tp->rank);
    tp_g_forward(tp, x, N, DTYPE_FP32);
    check_sum(x, tp->size);
    /* two all-reduces of N fp32 values: 2 x 2 (T-1)/T x 4N bytes */
    double want = 2 * 2.0 * (tp->size - 1) / tp->size * 4.0 * N;
    assert_true(tp->counters.bytes[COLL_ALL_REDUCE] - before.bytes[COLL_ALL_REDUCE] == want);
}

static void test_f_backward_bf16(void **state) {
    (void)state;
    struct collectives *tp = &G.tp_comm;
    float x[N];
    bf16 h[N];
    fill(x, tp->rank);
    for (int i = 0; i < N; i++) h[i] = f32_to_bf16(x[i]);
    tp_f_backward(tp, h, N, DTYPE_BF16);
    for (int i = 0; i < N; i++) x[i] = bf16_to_f32(h[i]);
    check_sum(x, tp->size);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f_and_g_fp32),
        cmocka_unit_test(test_f_backward_bf16),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    MPI_Finalize();
    return failed;
}
