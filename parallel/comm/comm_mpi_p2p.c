/* Point to point over the group's MPI communicator (include/collectives.h):
 * blocking send/recv, and isend/irecv whose handles index a fixed request
 * table inside the table's own state (mpi_impl.h), so nothing is global and
 * two groups never share a handle. The non-blocking collectives of
 * comm_mpi.c post into the same table; wait and progress serve both. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_impl.h"

/* A caller bug: say what, naming the call, then raise `code` on the
 * group's error handler (fatal by default). Returns -1 for the caller to
 * pass on where the handler returns. */
static int fail(struct collectives *c, int code, const char *call, const char *fmt, ...) {
    fprintf(stderr, "collectives: %s on rank %d of a group of %d: ", call, c->rank, c->size);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    MPI_Comm_call_errhandler(impl_of(c)->comm, code);
    return -1;
}

/* An MPI call that failed under a returning error handler. */
static int mpi_failed(struct collectives *c, const char *call, int rc) {
    char why[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, why, &len);
    fprintf(stderr, "collectives: %s on rank %d of a group of %d: MPI: %s\n", call, c->rank, c->size, why);
    return -1;
}

static int check_args(struct collectives *c, const char *call, size_t n, int peer, int tag) {
    if (peer < 0 || peer >= c->size)
        return fail(c, MPI_ERR_RANK, call, "peer %d is not a rank of this group (0..%d)", peer, c->size - 1);
    if (peer == c->rank)
        return fail(c, MPI_ERR_RANK, call, "peer %d is this rank: a rank does not send to or receive from itself",
                    peer);
    if (tag < 0 || tag > COLL_TAG_MAX)
        return fail(c, MPI_ERR_TAG, call, "tag %d is outside 0..%d", tag, COLL_TAG_MAX);
    if (n > INT_MAX) return fail(c, MPI_ERR_COUNT, call, "%zu values do not fit MPI's int count", n);
    return 0;
}

/* A receive delivers exactly the count it asked for (collectives.h): a
 * shorter message would leave the tail of buf stale. */
static int check_count(struct collectives *c, const char *call, const MPI_Status *st, MPI_Datatype type,
                       int expect) {
    int got = 0;
    MPI_Get_count(st, type, &got);
    if (got == expect) return 0;
    return fail(c, MPI_ERR_COUNT, call, "expected %d values from peer %d (tag %d), the message holds %d", expect,
                st->MPI_SOURCE, st->MPI_TAG, got);
}

static int p2p_send(struct collectives *c, const void *buf, size_t n, enum dtype dt, int peer, int tag) {
    double t0 = monotonic_seconds();
    if (check_args(c, "send", n, peer, tag) != 0) return -1;
    struct mpi_impl *m = impl_of(c);
    int rc = (m->sync_sends ? MPI_Ssend : MPI_Send)(buf, (int)n, mpi_type(c, dt), peer, tag, m->comm);
    if (rc != MPI_SUCCESS) return mpi_failed(c, "send", rc);
    count_call(c, COLL_SEND, (double)n * (double)dtype_size(dt), peer, t0);
    return 0;
}

static int p2p_recv(struct collectives *c, void *buf, size_t n, enum dtype dt, int peer, int tag) {
    double t0 = monotonic_seconds();
    if (check_args(c, "recv", n, peer, tag) != 0) return -1;
    MPI_Status st;
    int rc = MPI_Recv(buf, (int)n, mpi_type(c, dt), peer, tag, impl_of(c)->comm, &st);
    if (rc != MPI_SUCCESS) return mpi_failed(c, "recv", rc);
    if (check_count(c, "recv", &st, mpi_type(c, dt), (int)n) != 0) return -1;
    count_call(c, COLL_RECV, (double)n * (double)dtype_size(dt), peer, t0);
    return 0;
}

static const struct coll_request failed_request = {.slot = -1, .serial = 0};

int mpi_request_claim(struct collectives *c, const char *call) {
    struct mpi_impl *m = impl_of(c);
    int slot = 0;
    while (slot < COLL_MAX_REQUESTS && m->requests[slot].busy) slot++;
    if (slot < COLL_MAX_REQUESTS) return slot;
    return fail(c, MPI_ERR_REQUEST, call, "all %d request slots of this table are pending: wait on some first",
                COLL_MAX_REQUESTS);
}

struct coll_request mpi_request_commit(struct collectives *c, int slot, MPI_Datatype type, int expect, double t0) {
    struct mpi_impl *m = impl_of(c);
    struct mpi_request_slot *s = &m->requests[slot];
    s->busy = true;
    s->done = false;
    s->type = type;
    s->expect = expect;
    s->posted_at = t0;
    s->serial = ++m->next_serial; /* from 1: a zeroed handle never matches */
    return (struct coll_request){.slot = slot, .serial = s->serial};
}

struct coll_request mpi_request_abandon(struct collectives *c, int slot, const char *call, int rc) {
    impl_of(c)->requests[slot] = (struct mpi_request_slot){.req = MPI_REQUEST_NULL};
    mpi_failed(c, call, rc);
    return failed_request;
}

/* Posts an isend (recv_buf NULL) or an irecv into a free slot. */
static struct coll_request post(struct collectives *c, const char *call, const void *send_buf, void *recv_buf,
                                size_t n, enum dtype dt, int peer, int tag) {
    double t0 = monotonic_seconds();
    if (check_args(c, call, n, peer, tag) != 0) return failed_request;
    int slot = mpi_request_claim(c, call);
    if (slot < 0) return failed_request;
    struct mpi_impl *m = impl_of(c);
    MPI_Request *req = &m->requests[slot].req;
    MPI_Datatype type = mpi_type(c, dt);
    int rc = recv_buf ? MPI_Irecv(recv_buf, (int)n, type, peer, tag, m->comm, req)
                      : (m->sync_sends ? MPI_Issend : MPI_Isend)(send_buf, (int)n, type, peer, tag, m->comm, req);
    if (rc != MPI_SUCCESS) return mpi_request_abandon(c, slot, call, rc);
    struct coll_request r = mpi_request_commit(c, slot, type, recv_buf ? (int)n : -1, t0);
    count_post(c, r, recv_buf ? COLL_RECV : COLL_SEND, (double)n * (double)dtype_size(dt), peer, t0);
    return r;
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
    struct mpi_impl *m = impl_of(c);
    if (r.slot < 0 || r.slot >= COLL_MAX_REQUESTS || !m->requests[r.slot].busy ||
        m->requests[r.slot].serial != r.serial)
        return fail(c, MPI_ERR_REQUEST, "wait",
                    "handle (slot %d, serial %u) is not pending on this table: its post failed, it was waited on "
                    "already, or it belongs to another group",
                    r.slot, r.serial);
    struct mpi_request_slot *s = &m->requests[r.slot];
    int rc = MPI_SUCCESS;
    if (!s->done) {
        rc = s->ring.on ? mpi_ring_wait(c, &s->ring) /* its remaining steps */
                        : MPI_Wait(&s->req, &s->status); /* req becomes MPI_REQUEST_NULL */
        s->done_at = monotonic_seconds();
    }
    struct mpi_request_slot done = *s;
    *s = (struct mpi_request_slot){.req = MPI_REQUEST_NULL}; /* the slot is free again */
    c->counters.seconds += done.done_at - done.posted_at;
    double t1 = monotonic_seconds();
    c->counters.exposed_seconds += t1 - t0;
    trace_comm(c, TRACE_CALL_WAIT, done.kind, done.bytes, done.peer, t0, t1);
    if (rc != MPI_SUCCESS) return mpi_failed(c, "wait", rc);
    return done.expect >= 0 ? check_count(c, "wait (irecv)", &done.status, done.type, done.expect) : 0;
}

/* MPI_Test on every request not yet seen complete (a ring: its steps, as
 * far as they go): lets transports that advance only inside MPI calls
 * move, and dates completions for `seconds`.
 * An error is left for wait to report: it keeps the slot pending. */
static void progress(struct collectives *c) {
    double t0 = monotonic_seconds();
    struct mpi_impl *m = impl_of(c);
    for (int i = 0; i < COLL_MAX_REQUESTS; i++) {
        struct mpi_request_slot *s = &m->requests[i];
        if (!s->busy || s->done) continue;
        int flag = 0, rc = MPI_SUCCESS;
        if (s->ring.on) flag = mpi_ring_test(c, &s->ring, &rc); /* as many of its steps as are ready */
        else rc = MPI_Test(&s->req, &flag, &s->status);
        if (rc == MPI_SUCCESS && flag) {
            s->done = true;
            s->done_at = monotonic_seconds();
        }
    }
    c->counters.exposed_seconds += monotonic_seconds() - t0;
}

void mpi_p2p_install(struct collectives *c) {
    struct mpi_impl *m = impl_of(c);
    for (int i = 0; i < COLL_MAX_REQUESTS; i++) m->requests[i] = (struct mpi_request_slot){.req = MPI_REQUEST_NULL};
    m->next_serial = 0;
    const char *sync = getenv("SHARDLAB_MPI_SYNC_SENDS");
    m->sync_sends = sync && strcmp(sync, "1") == 0;
    c->progress = progress;
    c->send = p2p_send;
    c->recv = p2p_recv;
    c->isend = p2p_isend;
    c->irecv = p2p_irecv;
    c->wait = p2p_wait;
}

int mpi_p2p_pending(const struct mpi_impl *m) {
    int n = 0;
    for (int i = 0; i < COLL_MAX_REQUESTS; i++) n += m->requests[i].busy;
    return n;
}
