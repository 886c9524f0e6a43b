/* The process grid over MPI_COMM_WORLD (include/grid.h). Rank order, tp
 * innermost: world rank = (pp_rank x dp + dp_rank) x tp + tp_rank. */
#include "grid.h"

#include <mpi.h>
#include <stdio.h>

#include "comm_mpi.h"

/* The ranks that share `color` form one group, ordered by `key`, so each
 * group's rank is the coordinate along its own axis. */
static int split(struct collectives *c, int color, int key, char err[GRID_ERR_LEN]) {
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, color, key, &sub);
    int rc = collectives_init_mpi(c, sub, err, GRID_ERR_LEN);
    MPI_Comm_free(&sub); /* the collectives keep their own duplicate */
    return rc;
}

int grid_init(struct grid *g, int tp, int pp, char err[GRID_ERR_LEN]) {
    *g = (struct grid){0};
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        snprintf(err, GRID_ERR_LEN, "grid_init needs MPI_Init first (one process without MPI: grid_init_single)");
        return -1;
    }
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    /* Every rank sees the same tp, pp and world, so all ranks fail here
     * together, before any collective: nobody is left waiting. */
    if (tp < 1 || pp < 1) {
        snprintf(err, GRID_ERR_LEN, "tp and pp must be at least 1 (got tp %d, pp %d)", tp, pp);
        return -1;
    }
    /* tp x pp beyond the world cannot divide it (and might overflow an int) */
    if ((long long)tp * pp > world || world % (tp * pp) != 0) {
        snprintf(err, GRID_ERR_LEN,
                 "%d ranks cannot form a grid with tp %d x pp %d: the world size must be a multiple of tp x pp", world,
                 tp, pp);
        return -1;
    }
    int dp = world / (tp * pp);
    *g = (struct grid){.world_rank = rank, .world_size = world, .dp = dp, .tp = tp, .pp = pp};
    g->tp_rank = rank % tp;
    g->dp_rank = rank / tp % dp;
    g->pp_rank = rank / (tp * dp);

    /* Build all three before judging, so every rank makes the same
     * collective calls even when one group fails; then agree world-wide. */
    char errs[3][GRID_ERR_LEN];
    int rc_dp = split(&g->dp_comm, g->pp_rank * tp + g->tp_rank, g->dp_rank, errs[0]);
    int rc_tp = split(&g->tp_comm, g->pp_rank * dp + g->dp_rank, g->tp_rank, errs[1]);
    int rc_pp = split(&g->pp_comm, g->dp_rank * tp + g->tp_rank, g->pp_rank, errs[2]);
    int ok = rc_dp == 0 && rc_tp == 0 && rc_pp == 0;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!ok) {
        const char *why = rc_dp ? errs[0] : rc_tp ? errs[1] : rc_pp ? errs[2] : "another rank failed";
        snprintf(err, GRID_ERR_LEN, "%s", why);
        grid_free(g);
        return -1;
    }
    return 0;
}

/* Collective. Safe on a grid from grid_init_single (no MPI state to free). */
void grid_free(struct grid *g) {
    collectives_free_mpi(&g->dp_comm);
    collectives_free_mpi(&g->tp_comm);
    collectives_free_mpi(&g->pp_comm);
}
