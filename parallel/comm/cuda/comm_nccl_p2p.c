/* Point to point over NCCL (parallel/comm/cuda/comm_nccl.h): ncclSend /
 * ncclRecv on the link to or from the peer where the table has one
 * (nccl_links.c: a pp table's neighbours, each direction its own
 * communicator and stream), else on the table's own communicator and
 * stream; isend, irecv and the non-blocking collectives of comm_nccl.c
 * share a fixed request table whose slots each own a CUDA event, so
 * nothing is global and two groups never share a handle. NCCL has no
 * tags: a tag is range-checked, and messages between two ranks match in
 * posting order (comm_nccl.h). */
#include <stdarg.h>
#include <stdio.h>

#include "nccl_impl.h"

/* A caller bug, named as comm_mpi_p2p.c names it, raised on the group's
 * MPI error handler (fatal by default). -1 where the handler returns. */
static int fail(struct collectives *c, int code, const char *call, const char *fmt, ...) {
    fprintf(stderr, "collectives: %s on rank %d of a group of %d: ", call, c->rank, c->size);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    MPI_Comm_call_errhandler(nccl_of(c)->comm, code);
    return -1;
}

static int check_args(struct collectives *c, const char *call, int peer, int tag) {
    if (peer < 0 || peer >= c->size)
        return fail(c, MPI_ERR_RANK, call, "peer %d is not a rank of this group (0..%d)", peer, c->size - 1);
    if (peer == c->rank)
        return fail(c, MPI_ERR_RANK, call, "peer %d is this rank: a rank does not send to or receive from itself",
                    peer);
    if (tag < 0 || tag > COLL_TAG_MAX)
        return fail(c, MPI_ERR_TAG, call, "tag %d is outside 0..%d", tag, COLL_TAG_MAX);
    return 0;
}

/* The send (recv_buf NULL) or receive itself, on the peer's link or the
 * table's communicator; *stream: the stream it was queued on. */
static int issue(struct collectives *c, const char *call, const void *send_buf, void *recv_buf, size_t n,
                 enum dtype dt, int peer, int slot, cudaStream_t *stream) {
    struct nccl_impl *m = nccl_of(c);
    const struct nccl_link *l = nccl_link_to(m, peer, recv_buf == NULL);
    ncclComm_t comm = l ? l->nccl : m->nccl;
    int to = l ? l->link_peer : peer;
    *stream = l ? l->stream : m->stream;
    if (nccl_stream_after_default(c, *stream, call) != 0) return -1;
    if (slot >= 0 && nccl_request_start(c, slot, *stream, call) != 0) return -1;
    ncclResult_t r = recv_buf ? ncclRecv(recv_buf, n, nccl_type(dt), to, comm, *stream)
                              : ncclSend(send_buf, n, nccl_type(dt), to, comm, *stream);
    return r == ncclSuccess ? 0 : nccl_failed(c, call, ncclGetErrorString(r));
}

static int blocking(struct collectives *c, const char *call, const void *send_buf, void *recv_buf, size_t n,
                    enum dtype dt, int peer, int tag) {
    double t0 = monotonic_seconds();
    cudaStream_t stream;
    if (check_args(c, call, peer, tag) != 0 || issue(c, call, send_buf, recv_buf, n, dt, peer, -1, &stream) != 0)
        return -1;
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) return nccl_failed(c, call, cudaGetErrorString(e));
    count_call(c, recv_buf ? COLL_RECV : COLL_SEND, (double)n * (double)dtype_size(dt), peer, t0);
    return 0;
}

static int p2p_send(struct collectives *c, const void *buf, size_t n, enum dtype dt, int peer, int tag) {
    return blocking(c, "send", buf, NULL, n, dt, peer, tag);
}

static int p2p_recv(struct collectives *c, void *buf, size_t n, enum dtype dt, int peer, int tag) {
    return blocking(c, "recv", NULL, buf, n, dt, peer, tag);
}

static const struct coll_request failed_request = {.slot = -1, .serial = 0};

int nccl_request_claim(struct collectives *c, const char *call) {
    struct nccl_impl *m = nccl_of(c);
    int slot = 0;
    while (slot < COLL_MAX_REQUESTS && m->requests[slot].busy) slot++;
    if (slot < COLL_MAX_REQUESTS) {
        m->requests[slot].busy = true; /* claimed: the post fills it or frees it */
        return slot;
    }
    return fail(c, MPI_ERR_REQUEST, call, "all %d request slots of this table are pending: wait on some first",
                COLL_MAX_REQUESTS);
}

int nccl_request_start(struct collectives *c, int slot, cudaStream_t stream, const char *call) {
    cudaError_t e = cudaEventRecord(nccl_of(c)->requests[slot].start_event, stream);
    return e == cudaSuccess ? 0 : nccl_failed(c, call, cudaGetErrorString(e));
}

/* Marks slot s done now (its done event has completed) and reads its time
 * in flight from its two events. */
static void mark_done(struct nccl_request_slot *s) {
    float ms = 0.0f;
    s->done = true;
    s->done_at = monotonic_seconds();
    s->flight_s = cudaEventElapsedTime(&ms, s->start_event, s->done_event) == cudaSuccess ? ms / 1e3 : 0.0;
}

/* Counted as comm_mpi.c's count_post: bytes and the call now, the post's
 * time exposed; the time in flight (the events') when wait or progress
 * sees the call done. */
struct coll_request nccl_request_commit(struct collectives *c, int slot, cudaStream_t stream, const char *call,
                                        enum coll_kind k, double bytes, int peer, double t0) {
    struct nccl_impl *m = nccl_of(c);
    struct nccl_request_slot *s = &m->requests[slot];
    cudaError_t e = cudaEventRecord(s->done_event, stream);
    if (e != cudaSuccess) {
        s->busy = false;
        nccl_failed(c, call, cudaGetErrorString(e));
        return failed_request;
    }
    s->done = false;
    s->posted_at = t0;
    s->kind = k;
    s->bytes = bytes;
    s->peer = peer;
    s->flight_s = 0.0;
    s->serial = ++m->next_serial; /* from 1: a zeroed handle never matches */
    double t1 = monotonic_seconds();
    c->counters.bytes[k] += bytes;
    c->counters.calls[k]++;
    c->counters.exposed_seconds += t1 - t0;
    trace_comm(c, TRACE_CALL_POST, k, bytes, peer, t0, t1);
    return (struct coll_request){.slot = slot, .serial = s->serial};
}

static struct coll_request post(struct collectives *c, const char *call, const void *send_buf, void *recv_buf,
                                size_t n, enum dtype dt, int peer, int tag) {
    double t0 = monotonic_seconds();
    if (check_args(c, call, peer, tag) != 0) return failed_request;
    int slot = nccl_request_claim(c, call);
    if (slot < 0) return failed_request;
    cudaStream_t stream;
    if (issue(c, call, send_buf, recv_buf, n, dt, peer, slot, &stream) != 0) {
        nccl_of(c)->requests[slot].busy = false;
        return failed_request;
    }
    return nccl_request_commit(c, slot, stream, call, recv_buf ? COLL_RECV : COLL_SEND, (double)n * (double)dtype_size(dt),
                               peer, t0);
}

static struct coll_request p2p_isend(struct collectives *c, const void *buf, size_t n, enum dtype dt, int peer,
                                     int tag) {
    return post(c, "isend", buf, NULL, n, dt, peer, tag);
}

static struct coll_request p2p_irecv(struct collectives *c, void *buf, size_t n, enum dtype dt, int peer, int tag) {
    return post(c, "irecv", NULL, buf, n, dt, peer, tag);
}

static int p2p_wait(struct collectives *c, struct coll_request r) {
    double t0 = monotonic_seconds();
    struct nccl_impl *m = nccl_of(c);
    if (r.slot < 0 || r.slot >= COLL_MAX_REQUESTS || !m->requests[r.slot].busy ||
        m->requests[r.slot].serial != r.serial)
        return fail(c, MPI_ERR_REQUEST, "wait",
                    "handle (slot %d, serial %u) is not pending on this table: its post failed, it was waited on "
                    "already, or it belongs to another group",
                    r.slot, r.serial);
    struct nccl_request_slot *s = &m->requests[r.slot];
    cudaError_t e = cudaSuccess;
    if (!s->done) {
        e = cudaEventSynchronize(s->done_event);
        if (e == cudaSuccess) mark_done(s);
        else s->done_at = monotonic_seconds(), s->flight_s = 0.0;
    }
    s->busy = false; /* the slot (and its events) is free again */
    c->counters.seconds += s->flight_s;
    double t1 = monotonic_seconds();
    c->counters.exposed_seconds += t1 - t0;
    trace_comm(c, TRACE_CALL_WAIT, s->kind, s->bytes, s->peer, t0, t1);
    return e == cudaSuccess ? 0 : nccl_failed(c, "wait", cudaGetErrorString(e));
}

/* Dates completions for `seconds` without blocking (cudaEventQuery); NCCL
 * progresses on its own, so nothing else is needed. An error is left for
 * wait to report. */
static void progress(struct collectives *c) {
    double t0 = monotonic_seconds();
    struct nccl_impl *m = nccl_of(c);
    for (int i = 0; i < COLL_MAX_REQUESTS; i++) {
        struct nccl_request_slot *s = &m->requests[i];
        if (!s->busy || s->done || s->serial == 0) continue;
        if (cudaEventQuery(s->done_event) == cudaSuccess) mark_done(s);
    }
    (void)cudaGetLastError(); /* cudaErrorNotReady is not an error here */
    c->counters.exposed_seconds += monotonic_seconds() - t0;
}

void nccl_p2p_install(struct collectives *c) {
    struct nccl_impl *m = nccl_of(c);
    for (int i = 0; i < COLL_MAX_REQUESTS; i++) {
        m->requests[i].busy = m->requests[i].done = false;
        m->requests[i].serial = 0;
    }
    m->next_serial = 0;
    c->progress = progress;
    c->send = p2p_send;
    c->recv = p2p_recv;
    c->isend = p2p_isend;
    c->irecv = p2p_irecv;
    c->wait = p2p_wait;
}

int nccl_p2p_pending(const struct nccl_impl *m) {
    int n = 0;
    for (int i = 0; i < COLL_MAX_REQUESTS; i++) n += m->requests[i].busy;
    return n;
}
