/* Agreement across ranks: a failure anywhere fails every rank. */
#include "trainer.h"

/* Every rank's rc, agreed: a failure anywhere fails every rank, so no rank
 * waits forever in a collective the failed one never reaches. The grid is
 * dp x tp x pp, so summing over the dp, then the tp, then the pp group
 * reaches every rank of the world. */
int trainer_agree(struct trainer *tr, int rc, char err[TRAINER_ERR_LEN]) {
    struct collectives *groups[] = {&tr->grid->dp_comm, &tr->grid->tp_comm, &tr->grid->pp_comm};
    double failed = rc != 0;
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        struct comm_counters counts = groups[i]->counters; /* bookkeeping, not a step's traffic */
        groups[i]->all_reduce_scalars(groups[i], &failed, 1);
        groups[i]->counters = counts;
    }
    if (failed > 0 && rc == 0) {
        snprintf(err, TRAINER_ERR_LEN, "another rank failed (its message says why)");
        return -1;
    }
    return rc;
}
