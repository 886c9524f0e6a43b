/* Private to the MPI backend (comm_mpi.c: the table and its collectives;
 * comm_mpi_p2p.c: point to point): the per-table MPI state and the
 * helpers both halves count and fail with. */
#ifndef SHARDLAB_MPI_IMPL_H
#define SHARDLAB_MPI_IMPL_H

#include <math.h>
#include <mpi.h>
#include <stdbool.h>
#include "clock.h"

#include "collectives.h"
#include "trace.h"

/* A reduce-scatter run as a ring of point-to-point steps
 * (comm_mpi_ring.c): step s (0 .. size-2) sends one chunk of buf to the
 * next rank and receives one from the previous into recv, then adds it
 * into buf; the step's two requests are reqs. */
struct mpi_ring {
    bool on;           /* false: the slot holds an MPI request, not a ring */
    char *buf, *recv;  /* the caller's size x chunk values and its scratch for one chunk */
    int chunk, step, tag;
    size_t chunk_bytes;
    MPI_Datatype type;
    MPI_Op op;
    MPI_Request reqs[2];
};

/* One pending isend, irecv or non-blocking collective. expect: the count
 * an irecv must receive (-1 otherwise); serial: the post's number, matched
 * by wait. progress may complete the MPI request before wait: then req is
 * MPI_REQUEST_NULL, done is set and status and done_at keep what wait
 * needs. */
struct mpi_request_slot {
    MPI_Request req;
    bool busy;        /* false: the slot is free */
    bool done;
    MPI_Status status;
    MPI_Datatype type;
    int expect;
    unsigned serial;
    double posted_at, done_at;
    enum coll_kind kind;  /* for the wait's trace span: what was posted, its bytes, its peer */
    double bytes;
    int peer;
    struct mpi_ring ring;
};

/* Per-instance MPI state: no globals, so several groups (dp, tp, pp, tie)
 * each own their datatype, ops and requests and free them with the group. */
struct mpi_impl {
    MPI_Comm comm;
    MPI_Comm ring_comm;   /* the rings' own messages: never matched with the caller's point to point */
    unsigned rings_posted; /* the next ring's tag, counted alike on every rank (collectives post in one order) */
    MPI_Datatype bf16_type;
    MPI_Op bf16_sum, bf16_max, fp32_max;
    struct mpi_request_slot requests[COLL_MAX_REQUESTS];
    unsigned next_serial;
    /* SHARDLAB_MPI_SYNC_SENDS=1: sends are synchronous (MPI_Issend,
     * MPI_Ssend): done only once matched, and reading the buffer then, as
     * NCCL's do, so the CPU's tests show what would break over NCCL */
    bool sync_sends;
};

static inline struct mpi_impl *impl_of(struct collectives *c) { return c->impl; }

static inline MPI_Datatype mpi_type(struct collectives *c, enum dtype dt) {
    return dt == DTYPE_FP32 ? MPI_FLOAT : impl_of(c)->bf16_type;
}

/* One span of the table's trace (include/trace.h) from t0 to t1 (monotonic_seconds
 * seconds, the same clock), for a call of kind k; peer: -1 for collectives. */
static inline void trace_comm(struct collectives *c, enum trace_call call, enum coll_kind k, double bytes, int peer,
                              double t0, double t1) {
    if (!trace_on(c->trace)) return;
    enum trace_kind kind = call == TRACE_CALL_WAIT ? TRACE_WAIT
                         : k == COLL_SEND          ? TRACE_SEND
                         : k == COLL_RECV          ? TRACE_RECV
                                                   : TRACE_COLLECTIVE;
    trace_add(c->trace, (struct trace_event){
        .t0 = llround(t0 * 1e9), .t1 = llround(t1 * 1e9), .bytes = bytes, .kind = kind, .micro_batch = -1,
        .call = (int16_t)call, .coll = (int16_t)k, .group = (int16_t)c->trace_group, .peer = (int16_t)peer});
}

/* Adds one blocking call of `bytes` to kind k and the time since t0 (in
 * flight and exposed alike), and its trace span. peer: point to point's,
 * -1 for a collective. */
static inline void count_call(struct collectives *c, enum coll_kind k, double bytes, int peer, double t0) {
    double t1 = monotonic_seconds(), dt = t1 - t0;
    c->counters.bytes[k] += bytes;
    c->counters.calls[k]++;
    c->counters.seconds += dt;
    c->counters.exposed_seconds += dt;
    trace_comm(c, TRACE_CALL_BLOCKING, k, bytes, peer, t0, t1);
}

/* The post of handle r: its bytes and call now; its time in flight when it
 * completes (mpi_request_commit keeps t0), the post itself exposed. The
 * slot keeps kind, bytes and peer for the wait's trace span. */
static inline void count_post(struct collectives *c, struct coll_request r, enum coll_kind k, double bytes, int peer,
                              double t0) {
    double t1 = monotonic_seconds();
    c->counters.bytes[k] += bytes;
    c->counters.calls[k]++;
    c->counters.exposed_seconds += t1 - t0;
    struct mpi_request_slot *s = &impl_of(c)->requests[r.slot];
    s->kind = k;
    s->bytes = bytes;
    s->peer = peer;
    trace_comm(c, TRACE_CALL_POST, k, bytes, peer, t0, t1);
}

/* comm_mpi_p2p.c: fills c's point-to-point entries and empties its
 * request table; counts the handles still pending (freeing the table with
 * one pending is a caller bug that collectives_free_mpi reports). */
void mpi_p2p_install(struct collectives *c);
int mpi_p2p_pending(const struct mpi_impl *m);

/* The request table, for the non-blocking collectives of comm_mpi.c:
 * claim a free slot (-1, reported, when the table is full), let MPI fill
 * its req, then commit it (posted at t0) into a handle. */
int mpi_request_claim(struct collectives *c, const char *call);
struct coll_request mpi_request_commit(struct collectives *c, int slot, MPI_Datatype type, int expect, double t0);
/* A failed post into a claimed slot: frees it, reports rc, returns the
 * failed handle. */
struct coll_request mpi_request_abandon(struct collectives *c, int slot, const char *call, int rc);

/* comm_mpi_ring.c: the ring reduce-scatter of buf (size x chunk values
 * of type, esz bytes each; op the sum) receiving into scratch.
 * mpi_ring_start fills *ring and posts its first step (the caller's slot
 * holds it; a group of one never starts one); mpi_ring_test advances it
 * without blocking (true: done), mpi_ring_wait to its end. MPI error codes
 * (test's through rc). */
int mpi_ring_start(struct collectives *c, struct mpi_ring *ring, void *buf, void *scratch, int chunk,
                   MPI_Datatype type, size_t esz, MPI_Op op);
bool mpi_ring_test(struct collectives *c, struct mpi_ring *ring, int *rc);
int mpi_ring_wait(struct collectives *c, struct mpi_ring *ring);

#endif
