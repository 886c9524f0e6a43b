/* Agreement across ranks: a failure anywhere fails every rank. */
#include "trainer.h"

/* The grid is dp x tp x pp, so summing over the dp, then the tp, then the
 * pp group reaches every rank of the world. Host doubles through
 * all_reduce_scalars, which every backend takes (NCCL's included, whose
 * other collectives move device memory only). Agreement is bookkeeping,
 * not a step's traffic: the groups' counters are left as they were. */
static void sum_over_grid(struct trainer *tr, double *values, int n) {
    struct collectives *groups[] = {&tr->grid->dp_comm, &tr->grid->tp_comm, &tr->grid->pp_comm};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        struct comm_counters counts = groups[i]->counters;
        groups[i]->all_reduce_scalars(groups[i], values, n);
        groups[i]->counters = counts;
    }
}

/* Every rank's rc, agreed: a failure anywhere fails every rank, so no rank
 * waits forever in a collective the failed one never reaches. */
int trainer_agree(struct trainer *tr, int rc, char err[TRAINER_ERR_LEN]) {
    double failed = rc != 0;
    sum_over_grid(tr, &failed, 1);
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
    sum_over_grid(tr, hot, AGREE_MAX_VALUES);
    int v = AGREE_MAX_VALUES - 1;
    while (v > 0 && hot[v] == 0.0) v--;
    return v;
}
