/* Agreement across the grid: a failure anywhere fails every rank. */
#include <stdio.h>

#include "grid.h"

/* The grid is dp x tp x pp, so summing over the dp, then the tp, then the
 * pp group reaches every rank of the world. Host doubles through
 * all_reduce_scalars, which every backend takes (NCCL's included, whose
 * other collectives move device memory only). Agreement is bookkeeping,
 * not a step's traffic: the groups' counters are left as they were. */
static void sum_over_grid(struct grid *g, double *values, int n) {
    struct collectives *groups[] = {&g->dp_comm, &g->tp_comm, &g->pp_comm};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        struct comm_counters counts = groups[i]->counters;
        groups[i]->all_reduce_scalars(groups[i], values, n);
        groups[i]->counters = counts;
    }
}

int grid_agree(struct grid *g, int rc, char *err, size_t err_len) {
    double failed = rc != 0;
    sum_over_grid(g, &failed, 1);
    if (failed > 0 && rc == 0) {
        snprintf(err, err_len, "another rank failed (its message says why)");
        return -1;
    }
    return rc;
}

/* The max of small values in [0, GRID_AGREE_MAX_VALUES) as a sum of one-hot
 * rows: the highest value some rank holds is the last nonzero count. */
int grid_agree_max(struct grid *g, int mine) {
    double hot[GRID_AGREE_MAX_VALUES] = {0};
    hot[mine < 0 ? 0 : mine >= GRID_AGREE_MAX_VALUES ? GRID_AGREE_MAX_VALUES - 1 : mine] = 1.0;
    sum_over_grid(g, hot, GRID_AGREE_MAX_VALUES);
    int v = GRID_AGREE_MAX_VALUES - 1;
    while (v > 0 && hot[v] == 0.0) v--;
    return v;
}
