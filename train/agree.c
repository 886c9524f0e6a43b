/* Agreement across ranks: a failure anywhere fails every rank. Agreement
 * is bookkeeping, not a step's traffic: its sums are uncounted
 * (grid_sum_uncounted). */
#include "trainer.h"

/* Every rank's rc, agreed: a failure anywhere fails every rank, so no rank
 * waits forever in a collective the failed one never reaches. */
int trainer_agree(struct trainer *tr, int rc, char err[TRAINER_ERR_LEN]) {
    double failed = rc != 0;
    grid_sum_uncounted(tr->grid, &failed, 1);
    if (failed > 0 && rc == 0) {
        snprintf(err, TRAINER_ERR_LEN, "another rank failed (its message says why)");
        return -1;
    }
    return rc;
}

/* The max of small values in [0, AGREE_MAX_VALUES) as a sum of one-hot
 * rows: the highest value some rank holds is the last nonzero count. */
enum { AGREE_MAX_VALUES = 64 };

int trainer_agree_max(struct trainer *tr, int mine) {
    double hot[AGREE_MAX_VALUES] = {0};
    hot[mine < 0 ? 0 : mine >= AGREE_MAX_VALUES ? AGREE_MAX_VALUES - 1 : mine] = 1.0;
    grid_sum_uncounted(tr->grid, hot, AGREE_MAX_VALUES);
    int v = AGREE_MAX_VALUES - 1;
    while (v > 0 && hot[v] == 0.0) v--;
    return v;
}
