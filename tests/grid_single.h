/* The 1 x 1 x 1 x 1 grid of one process without MPI: every collective over
 * one rank is the identity. No MPI call anywhere here, so unit tests run
 * the engine without MPI_Init. Test code only: the trainer always has MPI
 * (parallel/comm/grid.c's grid_init), so this lives in tests/, header-only
 * as tests/device_replays.h is (the tests link the library alone). Calls
 * are still counted (the engine made them); the ring formulas give 0
 * bytes for one rank.
 *
 * Point to point has no valid peer in a group of one (a rank never sends
 * to itself, include/collectives.h): every such call says so, naming
 * itself, and fails without counting. That also keeps the table free of
 * state (impl stays NULL), so callers that never grid_free leak nothing.
 * The non-blocking collectives are the identities too, complete when
 * posted: their handle is one fixed value that wait accepts. */
#ifndef SHARDLAB_TESTS_GRID_SINGLE_H
#define SHARDLAB_TESTS_GRID_SINGLE_H

#include <stdio.h>

#include "grid.h"

static inline void single_count(struct collectives *c, enum coll_kind k) { c->counters.calls[k]++; }

/* The buffer collectives over one rank: the buffer already holds the
 * result (reduce-scatter's chunk 0 is the whole buffer, already at its
 * start), so each only counts its call. */
#define SINGLE_IDENTITY(name, kind)                                                                 \
    static inline void single_##name(struct collectives *c, void *buf, size_t n, enum dtype dt) { \
        (void)buf, (void)n, (void)dt;                                                               \
        single_count(c, kind);                                                                      \
    }
SINGLE_IDENTITY(all_reduce_sum, COLL_ALL_REDUCE)
SINGLE_IDENTITY(all_reduce_max, COLL_ALL_REDUCE_MAX)
SINGLE_IDENTITY(reduce_scatter_sum, COLL_REDUCE_SCATTER)
SINGLE_IDENTITY(all_gather, COLL_ALL_GATHER)
#undef SINGLE_IDENTITY

static inline void single_all_reduce_scalars(struct collectives *c, double *values, int n) {
    (void)values, (void)n;
    single_count(c, COLL_SCALAR);
}

static inline void single_barrier(struct collectives *c) { (void)c; }

static inline int single_no_peer(const char *call, int peer) {
    fprintf(stderr,
            "collectives: %s to or from peer %d in a group of one rank (single-process table): there is no other "
            "rank, and a rank does not send to or receive from itself\n",
            call, peer);
    return -1;
}

static inline int single_send(struct collectives *c, const void *buf, size_t n, enum dtype dt, int peer, int tag) {
    (void)c, (void)buf, (void)n, (void)dt, (void)tag;
    return single_no_peer("send", peer);
}

static inline int single_recv(struct collectives *c, void *buf, size_t n, enum dtype dt, int peer, int tag) {
    (void)c, (void)buf, (void)n, (void)dt, (void)tag;
    return single_no_peer("recv", peer);
}

static inline struct coll_request single_isend(struct collectives *c, const void *buf, size_t n, enum dtype dt,
                                        int peer, int tag) {
    (void)c, (void)buf, (void)n, (void)dt, (void)tag;
    single_no_peer("isend", peer);
    return (struct coll_request){.slot = -1};
}

static inline struct coll_request single_irecv(struct collectives *c, void *buf, size_t n, enum dtype dt, int peer,
                                        int tag) {
    (void)c, (void)buf, (void)n, (void)dt, (void)tag;
    single_no_peer("irecv", peer);
    return (struct coll_request){.slot = -1};
}

/* The handle of a collective posted on one rank: complete when posted. */
static inline struct coll_request single_done_at_post(void) { return (struct coll_request){.slot = 0, .serial = 1}; }

static inline struct coll_request single_iall_reduce_sum(struct collectives *c, void *buf, size_t n, enum dtype dt) {
    single_all_reduce_sum(c, buf, n, dt);
    return single_done_at_post();
}

static inline struct coll_request single_ireduce_scatter_sum(struct collectives *c, void *buf, void *scratch,
                                                             size_t chunk, enum dtype dt) {
    (void)scratch; /* an identity receives nothing */
    single_reduce_scatter_sum(c, buf, chunk, dt);
    return single_done_at_post();
}

static inline struct coll_request single_iall_gather(struct collectives *c, void *buf, size_t chunk, enum dtype dt) {
    single_all_gather(c, buf, chunk, dt);
    return single_done_at_post();
}

static inline void single_progress(struct collectives *c) { (void)c; }

static inline int single_wait(struct collectives *c, struct coll_request r) {
    (void)c;
    if (r.slot == single_done_at_post().slot && r.serial == single_done_at_post().serial) return 0;
    fprintf(stderr,
            "collectives: wait on handle (slot %d, serial %u): not pending; the single-process table posts only "
            "collectives, complete at once\n",
            r.slot, r.serial);
    return -1;
}

static inline void single_table(struct collectives *c) {
    *c = (struct collectives){
        .rank = 0,
        .size = 1,
        .impl = NULL, /* grid_free and collectives_free_mpi skip a table without MPI state */
        .all_reduce_sum = single_all_reduce_sum,
        .all_reduce_max = single_all_reduce_max,
        .reduce_scatter_sum = single_reduce_scatter_sum,
        .all_gather = single_all_gather,
        .all_reduce_scalars = single_all_reduce_scalars,
        .barrier = single_barrier,
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

static inline void grid_init_single(struct grid *g) {
    *g = (struct grid){.world_rank = 0, .world_size = 1, .dp = 1, .cp = 1, .tp = 1, .pp = 1, .tie_member = true};
    for (int k = 0; k < GROUP_NUM; k++) single_table(grid_group(g, (enum grid_group)k));
}

#endif
