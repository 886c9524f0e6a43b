/* The collectives seam: everything the engine (and later tensor and
 * pipeline parallel code) communicates goes through this table of function
 * pointers, so the same engine runs over MPI on CPUs
 * (parallel/comm/comm_mpi.c) and over NCCL on GPUs. One table per group
 * (include/grid.h: dp, tp, pp and the embedding-head tie group), each with
 * its own counters.
 *
 * Counting. Collectives count the bytes this rank sends under the ring
 * algorithm for a call of that size (nccl-tests' bus-bandwidth
 * accounting, THEORY.md section 7):
 *   all-reduce (sum and max)  2 (N-1)/N x M
 *   reduce-scatter              (N-1)/N x M   M = the full (unscattered) buffer
 *   all-gather                  (N-1)/N x M   M = the full (gathered) buffer
 * The library underneath may pick another algorithm; the counter states
 * the volume the collective needs, which is what ZeRO's analysis counts.
 * The scalar all-reduces (loss, norms) count apart, as COLL_SCALAR.
 * Point to point counts the payload, exactly: send and isend add
 * n x dtype size to COLL_SEND, recv and irecv the same to COLL_RECV (bytes
 * received: the one kind that is not bytes sent); a non-blocking call
 * counts when posted, and wait adds no bytes or calls. barrier counts
 * nothing. A call that fails counts nothing.
 *
 * Time. `seconds` is the time collectives were in flight: a blocking
 * call's duration; a posted one's from its post to its completion (as wait
 * or progress first saw it), so that time hidden behind compute still
 * counts. Concurrent requests each count their own span. `exposed_seconds`
 * is the part the caller spent blocked inside the calls (blocking calls,
 * posts, waits, progress): what communication adds to the step. Blocking
 * calls only: the two are equal.
 *
 * Non-blocking collectives. iall_reduce_sum, ireduce_scatter_sum and
 * iall_gather post the collective of the same name and return a handle
 * for wait; the buffer belongs to the collective until wait returns. They
 * share the request table of isend/irecv. The MPI table runs the
 * non-blocking reduce-scatter as its own ring of point-to-point steps (the
 * ring volume above is then what each rank sends, exactly), the others as
 * MPI's. Every rank posts the group's
 * collectives, blocking and non-blocking, in the same order (MPI's rule).
 * A count must fit an int (no splitting: a request is one MPI call).
 * progress() lets pending requests move: some MPI transports advance a
 * request only inside an MPI call, so a caller computing between post and
 * wait calls it now and then. The single-process table completes them at
 * once (identities, as its blocking calls).
 *
 * Point to point. peer is a rank within the group, tag in [0,
 * COLL_TAG_MAX]. Messages from one rank to another with the same tag
 * arrive in the order sent; different tags match by tag, so a receiver may
 * take them in any order. A receive expects exactly n values of dt. A rank
 * never sends to itself: peer == rank is an error in every backend (MPI's
 * blocking send to self can deadlock, and no user here needs it: a group
 * of one, like the tie group at pp = 1, has nothing to send; so the
 * single-process table has no valid peer at all). isend and irecv return a
 * handle, and the buffer belongs to the transfer until wait(handle)
 * returns. A table holds at most COLL_MAX_REQUESTS pending handles.
 *
 * Errors in point to point are caller bugs (a bad peer or tag, a count
 * over INT_MAX, a full request table, a handle that is not pending, a
 * message shorter than the receive): the call prints what went wrong,
 * naming itself, on stderr. The MPI table then raises the group's MPI
 * error handler (fatal by default: every rank exits non-zero). Where that
 * handler returns, and always in the single-process table, the call
 * returns -1 (a handle: slot -1) having moved no data, except that a short
 * message was written into the receive buffer before its length was seen. */
#ifndef SHARDLAB_COLLECTIVES_H
#define SHARDLAB_COLLECTIVES_H

#include <stddef.h>

#include "dtype.h"

enum coll_kind {
    COLL_ALL_REDUCE,
    COLL_REDUCE_SCATTER,
    COLL_ALL_GATHER,
    COLL_ALL_REDUCE_MAX,
    COLL_SEND,       /* payload bytes sent point to point */
    COLL_RECV,       /* payload bytes received point to point */
    COLL_SCALAR,     /* small all-reduces of loss and gradient norm: kept apart from the model traffic */
    COLL_NUM_KINDS
};

enum {
    COLL_TAG_MAX = 32767,     /* the smallest MPI_TAG_UB the MPI standard allows */
    COLL_MAX_REQUESTS = 160,  /* pending isend/irecv handles per table: a GPipe stage holds two per slot */
};

struct comm_counters {
    double bytes[COLL_NUM_KINDS];
    long calls[COLL_NUM_KINDS];
    double seconds;          /* wall time collectives and point to point were in flight (above) */
    double exposed_seconds;  /* of which the caller was blocked inside a call */
};

/* A pending isend or irecv: its slot in the table's request table and the
 * serial number of the post, so that a handle waited on twice (its slot
 * since reused) is an error rather than a wait on someone else's transfer.
 * slot < 0: the post failed. */
struct coll_request {
    int slot;
    unsigned serial;
};

struct trace;

struct collectives {
    int rank, size;                 /* within this group */
    struct comm_counters counters;
    void *impl;                     /* backend state (an MPI communicator, an NCCL comm) */
    /* The run's timeline (include/trace.h; NULL: off): the MPI backend
     * records every call there, blocking ones as one span, non-blocking
     * ones as a short post and the wait. trace_group: which group of the
     * grid this table is (enum grid_group), for the span's name; set both
     * with grid_attach_trace (include/grid.h). */
    struct trace *trace;
    int trace_group;

    /* In place: buf holds this rank's n values, then the sum over ranks. */
    void (*all_reduce_sum)(struct collectives *c, void *buf, size_t n, enum dtype dt);
    /* In place: buf holds this rank's n values, then the elementwise max
     * over ranks. Exact (the result is one of the inputs) in both dtypes;
     * a NaN on any rank gives NaN (overflow checks must see it), and +0
     * beats -0, so the result does not depend on the reduction order. */
    void (*all_reduce_max)(struct collectives *c, void *buf, size_t n, enum dtype dt);
    /* In place: buf holds size x chunk values on entry; on return its first
     * chunk values hold the sum over ranks of chunk `rank`. */
    void (*reduce_scatter_sum)(struct collectives *c, void *buf, size_t chunk, enum dtype dt);
    /* In place: chunk `rank` of buf (size x chunk values) is this rank's;
     * on return every chunk holds its owner's values. */
    void (*all_gather)(struct collectives *c, void *buf, size_t chunk, enum dtype dt);
    /* Sum of doubles across ranks (loss, squared norms), counted as COLL_SCALAR. */
    void (*all_reduce_scalars)(struct collectives *c, double *values, int n);
    void (*barrier)(struct collectives *c);

    /* Point to point (rules above). Blocking: send returns when buf may be
     * reused, recv when buf holds the message. 0, or -1 on error. */
    int (*send)(struct collectives *c, const void *buf, size_t n, enum dtype dt, int peer, int tag);
    int (*recv)(struct collectives *c, void *buf, size_t n, enum dtype dt, int peer, int tag);
    /* Non-blocking: post and return a handle for wait. */
    struct coll_request (*isend)(struct collectives *c, const void *buf, size_t n, enum dtype dt, int peer, int tag);
    struct coll_request (*irecv)(struct collectives *c, void *buf, size_t n, enum dtype dt, int peer, int tag);
    /* Completes a pending handle and frees its slot. 0, or -1 on error. */
    int (*wait)(struct collectives *c, struct coll_request r);

    /* Non-blocking collectives (above): post, return a handle for wait.
     * The handle's slot is -1 where the post failed. */
    struct coll_request (*iall_reduce_sum)(struct collectives *c, void *buf, size_t n, enum dtype dt);
    /* buf as reduce_scatter_sum's; scratch: room for chunk values of dt in
     * buf's memory space, which the backend may receive into (the MPI
     * table's ring does, parallel/comm/comm_mpi_ring.c; NCCL's and the
     * single-process table's do not), the collective's until wait. The
     * caller owns it, so it is tracked memory like buf. */
    struct coll_request (*ireduce_scatter_sum)(struct collectives *c, void *buf, void *scratch, size_t chunk,
                                               enum dtype dt);
    struct coll_request (*iall_gather)(struct collectives *c, void *buf, size_t chunk, enum dtype dt);
    /* Tests every pending request once, without blocking. */
    void (*progress)(struct collectives *c);
};

/* Traffic that is bookkeeping, not a step's (checkpoints moving units,
 * agreement across ranks, the memory check, validation, sampling): the
 * calls between coll_uncounted_begin(c) and coll_uncounted_end leave c's
 * counters as they were, so the comm table counts steps only. */
struct coll_uncounted {
    struct collectives *c;
    struct comm_counters kept;
};
static inline struct coll_uncounted coll_uncounted_begin(struct collectives *c) {
    return (struct coll_uncounted){.c = c, .kept = c->counters};
}
static inline void coll_uncounted_end(struct coll_uncounted u) { u.c->counters = u.kept; }

/* The most common such call: one all-gather, uncounted. */
static inline void coll_all_gather_uncounted(struct collectives *c, void *buf, size_t chunk, enum dtype dt) {
    struct coll_uncounted u = coll_uncounted_begin(c);
    c->all_gather(c, buf, chunk, dt);
    coll_uncounted_end(u);
}

static inline const char *coll_kind_name(enum coll_kind k) {
    static const char *const names[COLL_NUM_KINDS] = {
        [COLL_ALL_REDUCE] = "all-reduce", [COLL_REDUCE_SCATTER] = "reduce-scatter", [COLL_ALL_GATHER] = "all-gather",
        [COLL_ALL_REDUCE_MAX] = "all-reduce-max", [COLL_SEND] = "send", [COLL_RECV] = "recv",
        [COLL_SCALAR] = "scalars"};
    return names[k];
}

#endif
