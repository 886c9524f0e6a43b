/* The process grid over MPI_COMM_WORLD (include/grid.h). Rank order, tp
 * innermost, then cp, then dp: world rank =
 * ((pp_rank x dp + dp_rank) x cp + cp_rank) x tp + tp_rank. Each
 * group is one MPI_Comm_split: a color per group, the coordinate along the
 * group's axis as the key. */
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

int grid_init(struct grid *g, int tp, int cp, int pp, char err[GRID_ERR_LEN]) {
    *g = (struct grid){0};
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        snprintf(err, GRID_ERR_LEN, "grid_init needs MPI_Init first (a test without MPI: tests/grid_single.h)");
        return -1;
    }
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    /* Every rank sees the same tp, cp, pp and world, so all ranks fail here
     * together, before any collective: nobody is left waiting. */
    if (tp < 1 || cp < 1 || pp < 1) {
        snprintf(err, GRID_ERR_LEN, "tp, cp and pp must be at least 1 (got tp %d, cp %d, pp %d)", tp, cp, pp);
        return -1;
    }
    /* cp x tp x pp beyond the world cannot divide it (and might overflow an int) */
    long long fixed = (long long)tp * cp * pp;
    if (fixed > world || world % (int)fixed != 0) {
        snprintf(err, GRID_ERR_LEN,
                 "%d ranks cannot form a grid with cp %d x tp %d x pp %d: the world size must be a multiple of "
                 "cp x tp x pp (dp is what remains)", world, cp, tp, pp);
        return -1;
    }
    int dp = world / (int)fixed;
    *g = (struct grid){.world_rank = rank, .world_size = world, .dp = dp, .cp = cp, .tp = tp, .pp = pp};
    struct grid_coords at = grid_coords_of(rank, dp, cp, tp);
    g->dp_rank = at.dp_rank;
    g->cp_rank = at.cp_rank;
    g->tp_rank = at.tp_rank;
    g->pp_rank = at.pp_rank;

    /* The tie pair shares (dp_rank, tp_rank), like a pp group, and is
     * ordered by stage. A middle stage takes a color of its own (past every
     * pair's color) and so forms a group of one. */
    g->tie_member = g->pp_rank == 0 || g->pp_rank == pp - 1;
    /* a stage's position: (dp_rank, cp_rank, tp_rank), one number */
    int in_stage = (g->dp_rank * cp + g->cp_rank) * tp + g->tp_rank, stage_size = dp * cp * tp;
    int tie_color = g->tie_member ? in_stage : stage_size + rank;

    /* Build all five before judging, so every rank makes the same
     * collective calls even when one group fails; then agree world-wide. */
    const int colors[GROUP_NUM] = {
        [GROUP_DP] = g->pp_rank * tp + g->tp_rank,
        [GROUP_TP] = (g->pp_rank * dp + g->dp_rank) * cp + g->cp_rank,
        [GROUP_PP] = in_stage,
        [GROUP_TIE] = tie_color,
        [GROUP_CP] = (g->pp_rank * dp + g->dp_rank) * tp + g->tp_rank,
    };
    const int keys[GROUP_NUM] = {[GROUP_DP] = g->dp_rank * cp + g->cp_rank, [GROUP_TP] = g->tp_rank,
                                 [GROUP_PP] = g->pp_rank, [GROUP_TIE] = g->pp_rank, [GROUP_CP] = g->cp_rank};
    char errs[GROUP_NUM][GRID_ERR_LEN];
    int failed = -1; /* the first group that failed here */
    for (int k = 0; k < GROUP_NUM; k++)
        if (split(grid_group(g, (enum grid_group)k), colors[k], keys[k], errs[k]) != 0 && failed < 0) failed = k;
    int ok = failed < 0;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!ok) {
        snprintf(err, GRID_ERR_LEN, "%s", failed >= 0 ? errs[failed] : "another rank failed");
        grid_free(g);
        return -1;
    }
    return 0;
}

/* Collective. Safe on a grid from tests/grid_single.h (no MPI state to free). */
void grid_free(struct grid *g) {
    for (int k = 0; k < GROUP_NUM; k++) collectives_free_mpi(grid_group(g, (enum grid_group)k));
}
