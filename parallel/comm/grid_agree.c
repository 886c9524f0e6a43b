/* Agreement across the grid: a failure anywhere fails every rank. Its
 * sums are bookkeeping, not a step's traffic (grid_sum_uncounted). */
#include <stdio.h>

#include "grid.h"

int grid_agree(struct grid *g, int rc, char *err, size_t err_len) {
    double failed = rc != 0;
    grid_sum_uncounted(g, &failed, 1);
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
    grid_sum_uncounted(g, hot, GRID_AGREE_MAX_VALUES);
    int v = GRID_AGREE_MAX_VALUES - 1;
    while (v > 0 && hot[v] == 0.0) v--;
    return v;
}
