/* The collectives seam: everything the engine (and later tensor and
 * pipeline parallel code) communicates goes through this table of function
 * pointers, so the same engine runs over MPI on CPUs (parallel/comm_mpi.c)
 * and over NCCL on GPUs. Every call adds to per-rank byte counters: the
 * bytes this rank sends under the ring algorithm for a call of that size
 * (nccl-tests' bus-bandwidth accounting, THEORY.md section 7):
 *   all-reduce      2 (N-1)/N x M
 *   reduce-scatter    (N-1)/N x M      M = the full (unscattered) buffer
 *   all-gather        (N-1)/N x M      M = the full (gathered) buffer
 * The library underneath may pick another algorithm; the counter states
 * the volume the collective needs, which is what ZeRO's analysis counts. */
#ifndef SHARDLAB_COLLECTIVES_H
#define SHARDLAB_COLLECTIVES_H

#include <stddef.h>

#include "dtype.h"

enum coll_kind {
    COLL_ALL_REDUCE,
    COLL_REDUCE_SCATTER,
    COLL_ALL_GATHER,
    COLL_SCALAR,     /* small all-reduces of loss and gradient norm: kept apart from the model traffic */
    COLL_NUM_KINDS
};

struct comm_counters {
    double bytes[COLL_NUM_KINDS];
    long calls[COLL_NUM_KINDS];
    double seconds;  /* wall time inside collectives */
};

struct collectives {
    int rank, size;                 /* within this group */
    struct comm_counters counters;
    void *impl;                     /* backend state (an MPI communicator, an NCCL comm) */

    /* In place: buf holds this rank's n values, then the sum over ranks. */
    void (*all_reduce_sum)(struct collectives *c, void *buf, size_t n, enum dtype dt);
    /* In place: buf holds size x chunk values on entry; on return its first
     * chunk values hold the sum over ranks of chunk `rank`. */
    void (*reduce_scatter_sum)(struct collectives *c, void *buf, size_t chunk, enum dtype dt);
    /* In place: chunk `rank` of buf (size x chunk values) is this rank's;
     * on return every chunk holds its owner's values. */
    void (*all_gather)(struct collectives *c, void *buf, size_t chunk, enum dtype dt);
    /* Sum of doubles across ranks (loss, squared norms), counted as COLL_SCALAR. */
    void (*all_reduce_scalars)(struct collectives *c, double *values, int n);
    void (*barrier)(struct collectives *c);
};

static inline const char *coll_kind_name(enum coll_kind k) {
    static const char *const names[COLL_NUM_KINDS] = {"all-reduce", "reduce-scatter", "all-gather", "scalars"};
    return names[k];
}

#endif
