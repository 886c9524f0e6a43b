/* Private to the MPI backend (comm_mpi.c: the table and its collectives;
 * comm_mpi_p2p.c: point to point): the per-table MPI state and the
 * helpers both halves count and fail with. */
#ifndef SHARDLAB_MPI_IMPL_H
#define SHARDLAB_MPI_IMPL_H

#include <mpi.h>
#include <time.h>

#include "collectives.h"

/* One pending isend or irecv. expect: the count an irecv must receive
 * (-1 for an isend); serial: the post's number, matched by wait. */
struct mpi_request_slot {
    MPI_Request req;  /* MPI_REQUEST_NULL: the slot is free */
    MPI_Datatype type;
    int expect;
    unsigned serial;
};

/* Per-instance MPI state: no globals, so several groups (dp, tp, pp, tie)
 * each own their datatype, ops and requests and free them with the group. */
struct mpi_impl {
    MPI_Comm comm;
    MPI_Datatype bf16_type;
    MPI_Op bf16_sum, bf16_max, fp32_max;
    struct mpi_request_slot requests[COLL_MAX_REQUESTS];
    unsigned next_serial;
};

static inline struct mpi_impl *impl_of(struct collectives *c) { return c->impl; }

static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline MPI_Datatype mpi_type(struct collectives *c, enum dtype dt) {
    return dt == DTYPE_FP32 ? MPI_FLOAT : impl_of(c)->bf16_type;
}

/* Adds one call of `bytes` to kind k and the time since t0. */
static inline void count_call(struct collectives *c, enum coll_kind k, double bytes, double t0) {
    c->counters.bytes[k] += bytes;
    c->counters.calls[k]++;
    c->counters.seconds += now_s() - t0;
}

/* comm_mpi_p2p.c: fills c's point-to-point entries and empties its
 * request table; counts the handles still pending (freeing the table with
 * one pending is a caller bug that collectives_free_mpi reports). */
void mpi_p2p_install(struct collectives *c);
int mpi_p2p_pending(const struct mpi_impl *m);

#endif
