/* Private to the NCCL backend (comm_nccl.c: the table and its
 * collectives; comm_nccl_p2p.c: point to point and the request table;
 * nccl_links.c: a pp table's one-direction links; grid_nccl.c): the
 * per-table state and the helpers both halves count and
 * fail with. Time and trace spans reuse the MPI backend's helpers
 * (../mpi_impl.h: monotonic_seconds, count_call, trace_comm), so both backends count
 * and trace alike. */
#ifndef SHARDLAB_NCCL_IMPL_H
#define SHARDLAB_NCCL_IMPL_H

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdbool.h>
#include <stdio.h>

#include "../mpi_impl.h"
#include "collectives.h"

/* One pending isend, irecv or non-blocking collective: done when its
 * done_event (recorded after the call on the stream that ran it: the
 * table's, or a link's) completes. Its time in flight is the events' own:
 * from start_event (recorded on that stream just before the call, after
 * the stream's wait for the kernels queued before it) to done_event, so it
 * counts the call (waiting for the peers included), not the kernels the
 * GPU still had to run when it was posted, nor how late the host looked. */
struct nccl_request_slot {
    cudaEvent_t start_event, done_event;
    bool busy, done;
    unsigned serial;
    double posted_at, done_at; /* host clock: the trace's spans */
    double flight_s;           /* start_event to done_event, once done */
    enum coll_kind kind;
    double bytes;
    int peer;
};

/* One direction between this rank and a neighbour (nccl_links.c): a
 * 2-rank communicator on which this rank only sends (send) or only
 * receives, with its own stream, so that its queue never holds the other
 * direction's calls and its messages match in posting order. */
struct nccl_link {
    int peer;            /* the other end, a rank of the table */
    bool send;
    int link_peer;       /* the other end's rank in the link's communicator (the sender is 0) */
    ncclComm_t nccl;
    cudaStream_t stream;
};

/* A rank of a ring has at most four: to and from each neighbour. */
enum { NCCL_MAX_LINKS = 4 };

struct nccl_impl {
    MPI_Comm comm;          /* a duplicate: the id's broadcast, the barrier */
    ncclComm_t nccl;
    cudaStream_t stream;    /* every NCCL call of this table */
    cudaEvent_t queued;     /* the default stream's work before a call */
    double *scalars;        /* device staging of all_reduce_scalars */
    int scalars_cap;
    void *scratch;          /* bf16 max keys */
    size_t scratch_bytes;
    struct nccl_request_slot requests[COLL_MAX_REQUESTS];
    unsigned next_serial;
    struct nccl_link links[NCCL_MAX_LINKS]; /* point to point to a neighbour: collectives_nccl_add_links */
    int n_links;
};

static inline struct nccl_impl *nccl_of(struct collectives *c) { return c->impl; }

static inline ncclDataType_t nccl_type(enum dtype dt) { return dt == DTYPE_FP32 ? ncclFloat32 : ncclBfloat16; }

/* An NCCL or CUDA failure in `call`: the message, then the group's MPI
 * error handler (fatal by default); -1 where the handler returns. */
static inline int nccl_failed(struct collectives *c, const char *call, const char *why) {
    fprintf(stderr, "collectives: %s on rank %d of a group of %d: %s\n", call, c->rank, c->size, why);
    MPI_Comm_call_errhandler(nccl_of(c)->comm, MPI_ERR_OTHER);
    return -1;
}

/* Makes `stream` (the table's or a link's) wait for the work queued on
 * the legacy default stream (the buffer operations' and kernels'). 0 or -1. */
static inline int nccl_stream_after_default(struct collectives *c, cudaStream_t stream, const char *call) {
    struct nccl_impl *m = nccl_of(c);
    cudaError_t e = cudaEventRecord(m->queued, 0);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(stream, m->queued, 0);
    return e == cudaSuccess ? 0 : nccl_failed(c, call, cudaGetErrorString(e));
}

static inline int nccl_after_default_stream(struct collectives *c, const char *call) {
    return nccl_stream_after_default(c, nccl_of(c)->stream, call);
}

/* comm_nccl_p2p.c: point to point and the request table. */
void nccl_p2p_install(struct collectives *c);
int nccl_p2p_pending(const struct nccl_impl *m);
int nccl_request_claim(struct collectives *c, const char *call);
/* Records the slot's start event on `stream`, just before its call: 0 or -1. */
int nccl_request_start(struct collectives *c, int slot, cudaStream_t stream, const char *call);
/* Records the slot's done event on `stream` after the call posted there;
 * the handle, or slot -1. */
struct coll_request nccl_request_commit(struct collectives *c, int slot, cudaStream_t stream, const char *call,
                                        enum coll_kind k, double bytes, int peer, double t0);

/* nccl_links.c: the link that carries this rank's sends to (send) or
 * receives from peer; NULL where there is none (the table's own comm and
 * stream carry the call). */
const struct nccl_link *nccl_link_to(const struct nccl_impl *m, int peer, bool send);
/* Drains and destroys the links (before the table's communicator). */
void nccl_links_free(struct nccl_impl *m);

#endif
