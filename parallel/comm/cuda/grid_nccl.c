/* A grid's groups over NCCL (comm_nccl.h: grid_use_nccl).
 * Each NCCL table is made over the MPI table's own communicator (the same
 * ranks in the same order), then the MPI table is freed. The pp table
 * alone gets links (nccl_links.c), which the pipeline's point to point
 * needs; the other groups' point to point (the checkpoint's route) is
 * blocking, one message at a time. */
#include <stdio.h>

#include "../comm_mpi.h"
#include "comm_nccl.h"
#include "nccl_impl.h"

int grid_use_nccl(struct grid *g, char err[GRID_ERR_LEN]) {
    struct collectives made[GROUP_NUM];
    int failed = -1;
    char why[GRID_ERR_LEN] = "";
    /* Every group on every rank, so all ranks make the same calls. */
    for (int k = 0; k < GROUP_NUM; k++) {
        struct collectives *c = grid_group(g, (enum grid_group)k);
        MPI_Comm comm = impl_of(c)->comm;
        int rc = collectives_init_nccl(&made[k], comm, why, sizeof why);
        /* init fails on every rank of the group alike, so the group's ranks all make links or none */
        if (rc == 0 && k == GROUP_PP) rc = collectives_nccl_add_links(&made[k], why, sizeof why);
        if (rc != 0 && failed < 0) {
            failed = k;
            snprintf(err, GRID_ERR_LEN, "%s group: %s", grid_group_name((enum grid_group)k), why);
        }
    }
    int ok = failed < 0; /* a group fails on its ranks alone: agree world-wide */
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!ok) {
        if (failed < 0) snprintf(err, GRID_ERR_LEN, "NCCL: another rank failed to make its communicators");
        for (int k = 0; k < GROUP_NUM; k++) collectives_free_nccl(&made[k]);
        return -1;
    }
    for (int k = 0; k < GROUP_NUM; k++) {
        struct collectives *c = grid_group(g, (enum grid_group)k);
        made[k].trace = c->trace;
        made[k].trace_group = c->trace_group;
        collectives_free_mpi(c);
        *c = made[k];
    }
    return 0;
}

void grid_free_nccl(struct grid *g) {
    for (int k = 0; k < GROUP_NUM; k++) collectives_free_nccl(grid_group(g, (enum grid_group)k));
}
