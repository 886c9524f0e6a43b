/* The 1 x 1 x 1 grid of one process without MPI (include/grid.h): every
 * collective over one rank is the identity. No MPI call anywhere here, so
 * unit tests and tools run without MPI_Init. Calls are still counted (the
 * engine made them); the ring formulas give 0 bytes for one rank. */
#include "grid.h"

static void count(struct collectives *c, enum coll_kind k) { c->counters.calls[k]++; }

static void all_reduce_sum(struct collectives *c, void *buf, size_t n, enum dtype dt) {
    (void)buf, (void)n, (void)dt;
    count(c, COLL_ALL_REDUCE);
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

static void init_single(struct collectives *c) {
    *c = (struct collectives){
        .rank = 0,
        .size = 1,
        .impl = NULL, /* grid_free and collectives_free_mpi skip a table without MPI state */
        .all_reduce_sum = all_reduce_sum,
        .reduce_scatter_sum = reduce_scatter_sum,
        .all_gather = all_gather,
        .all_reduce_scalars = all_reduce_scalars,
        .barrier = barrier,
    };
}

void grid_init_single(struct grid *g) {
    *g = (struct grid){.world_rank = 0, .world_size = 1, .dp = 1, .tp = 1, .pp = 1};
    init_single(&g->dp_comm);
    init_single(&g->tp_comm);
    init_single(&g->pp_comm);
}
