/* Agreement across ranks: a failure anywhere fails every rank. */
#include "trainer.h"

/* The grid is dp x tp x pp, so reducing over the dp, then the tp, then the
 * pp group reaches every rank of the world. Agreement is bookkeeping, not a
 * step's traffic: the groups' counters are left as they were. */
static void over_grid(struct trainer *tr, double *value, bool max) {
    struct collectives *groups[] = {&tr->grid->dp_comm, &tr->grid->tp_comm, &tr->grid->pp_comm};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        struct comm_counters counts = groups[i]->counters;
        if (max) {
            float v = (float)*value; /* small integers: exact in fp32 */
            groups[i]->all_reduce_max(groups[i], &v, 1, DTYPE_FP32);
            *value = v;
        } else {
            groups[i]->all_reduce_scalars(groups[i], value, 1);
        }
        groups[i]->counters = counts;
    }
}

/* Every rank's rc, agreed: a failure anywhere fails every rank, so no rank
 * waits forever in a collective the failed one never reaches. */
int trainer_agree(struct trainer *tr, int rc, char err[TRAINER_ERR_LEN]) {
    double failed = rc != 0;
    over_grid(tr, &failed, false);
    if (failed > 0 && rc == 0) {
        snprintf(err, TRAINER_ERR_LEN, "another rank failed (its message says why)");
        return -1;
    }
    return rc;
}

int trainer_agree_max(struct trainer *tr, int mine) {
    double v = mine;
    over_grid(tr, &v, true);
    return (int)v;
}
