/* What the MPI table's tests share (tests/mpi/test_collectives.c,
 * test_point_to_point.c): the table on MPI_COMM_WORLD as the group's
 * state, and values whose sums over up to 4 ranks are exact in bf16. */
#ifndef SHARDLAB_TESTS_COLL_VALUES_H
#define SHARDLAB_TESTS_COLL_VALUES_H

#include <stdlib.h>

#include <cmocka.h>
#include <mpi.h>

#include "../../parallel/comm/comm_mpi.h"

static inline int setup(void **state) {
    struct collectives *c = malloc(sizeof *c);
    char err[256];
    if (!c || collectives_init_mpi(c, MPI_COMM_WORLD, err, sizeof err) != 0) {
        free(c);
        return -1;
    }
    *state = c;
    return 0;
}

static inline int teardown(void **state) {
    collectives_free_mpi(*state);
    free(*state);
    return 0;
}

/* Small multiples of 1/2: every partial sum over up to 4 ranks is exact in
 * bf16 (at most 8 significant bits), so any reduction order gives it. */
static inline float value(int rank, size_t i) { return 0.5f * (float)((int)(i % 7) - 3) * (float)(rank + 1); }

static inline float value_sum(int nranks, size_t i) {
    float s = 0;
    for (int r = 0; r < nranks; r++) s += value(r, i);
    return s;
}

static inline void *alloc_values(size_t n, enum dtype dt, int rank) {
    void *buf = malloc(n * dtype_size(dt));
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++) {
        if (dt == DTYPE_FP32) ((float *)buf)[i] = value(rank, i);
        else ((bf16 *)buf)[i] = f32_to_bf16(value(rank, i));
    }
    return buf;
}

static inline float get(const void *buf, size_t i, enum dtype dt) {
    return dt == DTYPE_FP32 ? ((const float *)buf)[i] : bf16_to_f32(((const bf16 *)buf)[i]);
}

/* Sizes on both sides of OpenMPI's algorithm switches (tuned component). */
static const size_t sizes[] = {1, 3, 1000, 70000};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };

#endif
