/* The MPI table's non-blocking reduce-scatter, as a ring of point-to-point
 * steps (the bandwidth-optimal ring of Patarasuk and Yuan 2009).
 *
 * Why not MPI_Ireduce_scatter_block: Open MPI's non-blocking collectives
 * (libnbc) reduce to rank 0 through temporaries of their own and then
 * scatter, so rank 0's untracked memory grew over a ZeRO-3 run and its
 * host sent more than the ring volume. Here every value a rank receives
 * lands in the caller's scratch (one chunk, tracked by the caller) and is
 * added into the caller's buffer, and each rank sends N-1 chunks: exactly
 * the ring volume the counters state, (N-1)/N x M.
 *
 * The schedule. With N ranks and chunk q at offset q x chunk of buf, step s
 * (0 .. N-2) of rank r sends chunk (r-s-1) mod N to rank r+1 and receives
 * chunk (r-s-2) mod N from rank r-1 into the scratch, then adds its own
 * values of that chunk into what arrived (MPI_Reduce_local: the table's
 * sum, fp32 or bf16 rounded per addition). A chunk is sent on only after
 * it has been added into, so after step N-2 chunk r holds the sum over
 * all ranks, taken in the order r+1, r+2, ..., r (mod N); it is moved to
 * the start of buf (the seam's contract). A sent chunk is never written
 * again before the end, so the sends read stable values.
 *
 * Progress without a helper thread: the ring is a state machine kept in
 * its request slot, advanced by whoever looks at it. progress() (which the
 * engine calls between units: parallel/zero/comm.c's zero_progress) tests
 * the current step's two requests and, once both are done, adds and posts
 * the next step, as many steps as are ready; wait() runs the remaining
 * steps, blocking. So the background reduce-scatter of ZeRO-2/3 still
 * moves while later units compute, as far as the engine polls, and is
 * finished at the wait. Rings use their own communicator (mpi_impl.h:
 * ring_comm), and each ring its own tag, numbered in posting order, which
 * is one order on every rank: two rings in flight (two buckets) never take
 * each other's messages. */
#include <string.h>

#include "mpi_impl.h"

static int ring_mod(int a, int n) { return ((a % n) + n) % n; }

static char *chunk_at(const struct mpi_ring *g, int q) { return g->buf + (size_t)q * g->chunk_bytes; }

/* Posts step g->step: the receive from the previous rank, the send of the
 * chunk it names to the next. */
static int post_step(struct collectives *c, struct mpi_ring *g) {
    struct mpi_impl *m = impl_of(c);
    int n = c->size, r = c->rank;
    int rc = MPI_Irecv(g->recv, g->chunk, g->type, ring_mod(r - 1, n), g->tag, m->ring_comm, &g->reqs[1]);
    if (rc != MPI_SUCCESS) return rc;
    const char *send = chunk_at(g, ring_mod(r - g->step - 1, n));
    return (m->sync_sends ? MPI_Issend : MPI_Isend)(send, g->chunk, g->type, ring_mod(r + 1, n), g->tag,
                                                    m->ring_comm, &g->reqs[0]);
}

static bool ring_done(const struct collectives *c, const struct mpi_ring *g) { return g->step >= c->size - 1; }

/* The step's send and receive are complete: add this rank's values into
 * what arrived, keep the sum in place of them, then post the next step or,
 * after the last, move the owned chunk to the start of buf. */
static int step_complete(struct collectives *c, struct mpi_ring *g) {
    int n = c->size, r = c->rank;
    char *mine = chunk_at(g, ring_mod(r - g->step - 2, n));
    int rc = MPI_Reduce_local(g->recv, mine, g->chunk, g->type, g->op);
    if (rc != MPI_SUCCESS) return rc;
    g->step++;
    if (!ring_done(c, g)) return post_step(c, g);
    if (r != 0) memmove(g->buf, chunk_at(g, r), g->chunk_bytes);
    return MPI_SUCCESS;
}

int mpi_ring_start(struct collectives *c, struct mpi_ring *g, void *buf, void *scratch, int chunk,
                   MPI_Datatype type, size_t esz, MPI_Op op) {
    struct mpi_impl *m = impl_of(c);
    *g = (struct mpi_ring){.on = true, .buf = buf, .recv = scratch, .chunk = chunk,
                           .chunk_bytes = (size_t)chunk * esz, .type = type, .op = op,
                           .tag = (int)(m->rings_posted++ % (COLL_TAG_MAX + 1u)),
                           .reqs = {MPI_REQUEST_NULL, MPI_REQUEST_NULL}};
    return post_step(c, g);
}

bool mpi_ring_test(struct collectives *c, struct mpi_ring *g, int *rc) {
    *rc = MPI_SUCCESS;
    while (!ring_done(c, g)) {
        int flag = 0;
        *rc = MPI_Testall(2, g->reqs, &flag, MPI_STATUSES_IGNORE);
        if (*rc != MPI_SUCCESS || !flag) return false;
        *rc = step_complete(c, g);
        if (*rc != MPI_SUCCESS) return false;
    }
    return true;
}

int mpi_ring_wait(struct collectives *c, struct mpi_ring *g) {
    while (!ring_done(c, g)) {
        int rc = MPI_Waitall(2, g->reqs, MPI_STATUSES_IGNORE);
        if (rc == MPI_SUCCESS) rc = step_complete(c, g);
        if (rc != MPI_SUCCESS) return rc;
    }
    return MPI_SUCCESS;
}
