/* The process grid: world = dp x tp x pp, built once with MPI_Comm_split.
 * Rank order, tp innermost (Megatron's): world rank =
 * (pp_rank x dp + dp_rank) x tp + tp_rank, so a tensor-parallel group is
 * consecutive ranks (one node's fast links) and a pipeline stage is a block.
 * This build trains with tp = pp = 1; the grid and the keys exist so the
 * layout is fixed now. One process without mpirun is a 1 x 1 x 1 grid. */
#ifndef SHARDLAB_GRID_H
#define SHARDLAB_GRID_H

#include "collectives.h"

enum { GRID_ERR_LEN = 512 };

struct grid {
    int world_rank, world_size;
    int dp, tp, pp;
    int dp_rank, tp_rank, pp_rank;
    struct collectives dp_comm, tp_comm, pp_comm;
};

/* Checks world_size == dp x tp x pp for the given tp and pp (dp is what
 * remains) and splits the communicators. Collective: call on every rank. */
int grid_init(struct grid *g, int tp, int pp, char err[GRID_ERR_LEN]);
void grid_free(struct grid *g);

/* A 1 x 1 x 1 grid whose collectives are identities (no MPI needed): for
 * tests and tools that run the engine in one process without MPI_Init. */
void grid_init_single(struct grid *g);

#endif
