/* The 1 x 1 x 1 grid of one process without MPI (include/grid.h): every
 * collective over one rank is the identity. No MPI call anywhere here, so
 * unit tests and tools run without MPI_Init. Calls are still counted (the
 * engine made them); the ring formulas give 0 bytes for one rank.
 *
 * Point to point has no valid peer in a group of one (a rank never sends
 * to itself, include/collectives.h): every such call says so, naming
 * itself, and fails without counting. That also keeps the table free of
 * state (impl stays NULL), so callers that never grid_free leak nothing.
 * The non-blocking collectives are the identities too, complete when
 * posted: their handle is one fixed value that wait accepts. */
#include "grid.h"

#include <stdio.h>

static void count(struct collectives *c, enum coll_kind k) { c->counters.calls[k]++; }

static void all_reduce_sum(struct collectives *c, void *buf, size_t n, enum dtype dt) {
    (void)buf, (void)n, (void)dt;
    count(c, COLL_ALL_REDUCE);
}

static void all_reduce_max(struct collectives *c, void *buf, size_t n, enum dtype dt) {
    (void)buf, (void)n, (void)dt;
    count(c, COLL_ALL_REDUCE_MAX);
}

/* With one rank, chunk 0 is the whole buffer and already at its start. */
static void reduce_scatter_sum(struct collectives *c, void *buf, size_t chunk, enum dtype dt) {
    (void)buf, (void)chunk, (void)dt;
    count(c, COLL_REDUCE_SCATTER);
}

static void all_gather(struct collectives *c, void *buf, size_t chunk, enum dtype dt) {
    (void)buf, (void)chunk, (void)dt;
    count(c, COLL_ALL_GATHER);
}

static void all_reduce_scalars(struct collectives *c, double *values, int n) {
    (void)values, (void)n;
    count(c, COLL_SCALAR);
}

static void barrier(struct collectives *c) { (void)c; }

static int no_peer(const char *call, int peer) {
    fprintf(stderr,
            "collectives: %s to or from peer %d in a group of one rank (single-process table): there is no other "
            "rank, and a rank does not send to or receive from itself\n",
            call, peer);
    return -1;
}

static int single_send(struct collectives *c, const void *buf, size_t n, enum dtype dt, int peer, int tag) {
    (void)c, (void)buf, (void)n, (void)dt, (void)tag;
    return no_peer("send", peer);
}

static int single_recv(struct collectives *c, void *buf, size_t n, enum dtype dt, int peer, int tag) {
    (void)c, (void)buf, (void)n, (void)dt, (void)tag;
    return no_peer("recv", peer);
}

static struct coll_request single_isend(struct collectives *c, const void *buf, size_t n, enum dtype dt,
                                        int peer, int tag) {
    (void)c, (void)buf, (void)n, (void)dt, (void)tag;
    no_peer("isend", peer);
    return (struct coll_request){.slot = -1};
}

static struct coll_request single_irecv(struct collectives *c, void *buf, size_t n, enum dtype dt, int peer,
                                        int tag) {
    (void)c, (void)buf, (void)n, (void)dt, (void)tag;
    no_peer("irecv", peer);
    return (struct coll_request){.slot = -1};
}

/* The handle of a collective posted on one rank: complete when posted. */
static const struct coll_request done_at_post = {.slot = 0, .serial = 1};

static struct coll_request single_iall_reduce_sum(struct collectives *c, void *buf, size_t n, enum dtype dt) {
    all_reduce_sum(c, buf, n, dt);
    return done_at_post;
}

static struct coll_request single_ireduce_scatter_sum(struct collectives *c, void *buf, void *scratch, size_t chunk,
                                                      enum dtype dt) {
    (void)scratch; /* an identity receives nothing */
    reduce_scatter_sum(c, buf, chunk, dt);
    return done_at_post;
}

static struct coll_request single_iall_gather(struct collectives *c, void *buf, size_t chunk, enum dtype dt) {
    all_gather(c, buf, chunk, dt);
    return done_at_post;
}

static void single_progress(struct collectives *c) { (void)c; }

static int single_wait(struct collectives *c, struct coll_request r) {
    (void)c;
    if (r.slot == done_at_post.slot && r.serial == done_at_post.serial) return 0;
    fprintf(stderr,
            "collectives: wait on handle (slot %d, serial %u): not pending; the single-process table posts only "
            "collectives, complete at once\n",
            r.slot, r.serial);
    return -1;
}

static void init_single(struct collectives *c) {
    *c = (struct collectives){
        .rank = 0,
        .size = 1,
        .impl = NULL, /* grid_free and collectives_free_mpi skip a table without MPI state */
        .all_reduce_sum = all_reduce_sum,
        .all_reduce_max = all_reduce_max,
        .reduce_scatter_sum = reduce_scatter_sum,
        .all_gather = all_gather,
        .all_reduce_scalars = all_reduce_scalars,
        .barrier = barrier,
        .send = single_send,
        .recv = single_recv,
        .isend = single_isend,
        .irecv = single_irecv,
        .wait = single_wait,
        .iall_reduce_sum = single_iall_reduce_sum,
        .ireduce_scatter_sum = single_ireduce_scatter_sum,
        .iall_gather = single_iall_gather,
        .progress = single_progress,
    };
}

void grid_init_single(struct grid *g) {
    *g = (struct grid){.world_rank = 0, .world_size = 1, .dp = 1, .cp = 1, .tp = 1, .pp = 1, .tie_member = true};
    for (int k = 0; k < GROUP_NUM; k++) init_single(grid_group(g, (enum grid_group)k));
}
