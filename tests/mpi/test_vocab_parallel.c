/* The vocabulary-parallel cross-entropy (model/tensor_parallel/tp.h) against
 * the full softmax cross-entropy, on every rank of one tp group (tp =
 * world: 2, 3, 4). Random logits of N rows over a vocabulary V = 300 that
 * is no multiple of 128 tp, so the slices end in padding columns, which
 * hold huge values here: they must stay out of the softmax and get dlogits
 * 0, as the full kernel treats V..Vp. Each rank holds only its Vp/tp
 * columns; the losses and the loss sum must equal the full kernel's (within
 * fp32 summation order: 1e-5 relative) and be bitwise the same on every
 * rank, and each rank's dlogits must equal its columns of the full dlogits.
 * With no group the three passes are the full kernel bit for bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "grid.h"
#include "layers.h"
#include "mpi_fixture.h"
#include "../../model/tensor_parallel/tp.h"

enum { N = 24, V = 300, PAD_VALUE = 10000 };

static struct grid G;

/* Vp: V padded to a multiple of 128 tp (include/layout.h). */
static int64_t padded(int64_t tp) { return (V + 128 * tp - 1) / (128 * tp) * (128 * tp); }

static float uniform(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xFFFFFF) / (float)0x1000000;
}

/* Row i, column v of the logits every rank agrees on: padding huge. */
static void fill(float *l, int64_t Vp, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < N; i++)
        for (int64_t v = 0; v < Vp; v++) l[i * Vp + v] = v < V ? 8.0f * uniform(&s) - 4.0f : (float)PAD_VALUE;
}

static void targets_of(int32_t *t) {
    for (int i = 0; i < N; i++) t[i] = (int32_t)((i * 97 + 13) % V);
    t[0] = V - 1; /* the last real token: in the last slice that holds any */
}

/* One run of the group at dloss: this rank's slice against the full kernel. */
static void check(float dloss) {
    struct collectives *tp = &G.tp_comm;
    int64_t Vp = padded(tp->size), Vl = Vp / tp->size, v0 = (int64_t)tp->rank * Vl;
    float *full = malloc((size_t)(N * Vp) * sizeof *full), *mine = malloc((size_t)(N * Vl) * sizeof *mine);
    float full_loss[N], loss[N], scratch[2 * N];
    int32_t t[N];
    targets_of(t);
    fill(full, Vp, 7);
    for (int64_t i = 0; i < N; i++) memcpy(mine + i * Vl, full + i * Vp + v0, (size_t)Vl * sizeof *mine);
    struct exec_ctx fc = {0};
    double want = crossentropy_forward_backward(full, full_loss, t, N, V, Vp, dloss, &fc);
    struct comm_counters before = tp->counters;
    struct vocab_slice s = {.V = V, .Vl = Vl, .v0 = v0};
    double got = vocab_parallel_crossentropy(tp, s, mine, loss, t, N, dloss, scratch, &fc);

    bool ok = fabs(got - want) <= 1e-5 * fabs(want);
    double worst_loss = 0, worst_d = 0;
    for (int i = 0; i < N; i++) worst_loss = fmax(worst_loss, fabs((double)loss[i] - full_loss[i]));
    ok = ok && worst_loss <= 1e-5 * fabs(want / N);
    if (dloss != 0.0f)
        for (int64_t i = 0; i < N; i++)
            for (int64_t v = 0; v < Vl; v++) {
                float a = mine[i * Vl + v], b = full[i * Vp + v0 + v];
                if (v0 + v >= V) ok = ok && a == 0.0f; /* padding: outside the softmax */
                worst_d = fmax(worst_d, fabs((double)a - b));
            }
    ok = ok && worst_d <= 1e-6 * fabs(dloss);
    /* one max and one sum of 2N values; the loss the same bits everywhere */
    ok = ok && tp->counters.calls[COLL_ALL_REDUCE_MAX] - before.calls[COLL_ALL_REDUCE_MAX] == 1 &&
         tp->counters.calls[COLL_ALL_REDUCE] - before.calls[COLL_ALL_REDUCE] == 1;
    double hi = got, lo = -got;
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    ok = ok && hi == got && -lo == got;
    if (tp->rank == 0)
        printf("  tp %d, Vp %lld (%lld per rank), dloss %g: loss sum %.6f vs %.6f, max |loss diff| %.2e, "
               "max |dlogit diff| %.2e\n",
               tp->size, (long long)Vp, (long long)Vl, dloss, got, want, worst_loss, worst_d);
    free(full);
    free(mine);
    assert_true(all_ok(ok));
}

static void test_loss_only(void **state) {
    (void)state;
    check(0.0f);
}

static void test_loss_and_dlogits(void **state) {
    (void)state;
    check(1.0f / N);
}

/* No group: the same bits as the full kernel (what tp = 1 runs). */
static void test_no_group_is_the_full_kernel(void **state) {
    (void)state;
    int64_t Vp = padded(1);
    float *a = malloc((size_t)(N * Vp) * sizeof *a), *b = malloc((size_t)(N * Vp) * sizeof *b);
    float la[N], lb[N], scratch[2 * N];
    int32_t t[N];
    targets_of(t);
    fill(a, Vp, 11);
    memcpy(b, a, (size_t)(N * Vp) * sizeof *a);
    struct exec_ctx fa = {0}, fb = {0};
    double sa = crossentropy_forward_backward(a, la, t, N, V, Vp, 0.5f, &fa);
    double sb = vocab_parallel_crossentropy(NULL, (struct vocab_slice){V, Vp, 0}, b, lb, t, N, 0.5f, scratch, &fb);
    assert_true(sa == sb);
    assert_memory_equal(la, lb, sizeof la);
    assert_memory_equal(a, b, (size_t)(N * Vp) * sizeof *a);
    assert_true(fa.other == fb.other);
    free(a);
    free(b);
}

static int setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
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

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loss_only),
        cmocka_unit_test(test_loss_and_dlogits),
        cmocka_unit_test(test_no_group_is_the_full_kernel),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    MPI_Finalize();
    return failed;
}
