/* The grid's collectives on the device (train/run/run_device_grid.h). */
#include "run_device_grid.h"

#include <stdio.h>

#ifdef SHARDLAB_CUDA
#include "../parallel/comm/cuda/comm_nccl.h"
#endif

int device_grid_attach(const struct device_info *d, struct grid *g, char err[GRID_ERR_LEN]) {
    if (d->kind != DEVICE_CUDA) return 0;
    /* ring attention (model/context_parallel/) runs on host memory only:
     * no GPU was at hand to test a device ring, so it is refused rather
     * than run untested */
    if (g->cp > 1) {
        snprintf(err, GRID_ERR_LEN, "cp = %d on a GPU: context parallelism's ring attention runs on the CPU only "
                 "(untested on a device); use --device cpu, or cp 1", g->cp);
        return -1;
    }
#ifdef SHARDLAB_CUDA
    /* The pp group's point to point runs on one-direction links, each its
     * own NCCL communicator and stream (parallel/comm/cuda/nccl_links.c);
     * NCCL matches a link's messages in posting order, which the trainer
     * checks for the schedule before anything runs (config_check_grid:
     * include/pipe_messages.h). */
    if (grid_use_nccl(g, err) != 0) return -1;
    g->nccl = true;
    return 0;
#else
    (void)g;
    snprintf(err, GRID_ERR_LEN, "the CPU build has no device collectives");
    return -1;
#endif
}

void device_grid_free(const struct device_info *d, struct grid *g) {
#ifdef SHARDLAB_CUDA
    if (d->kind == DEVICE_CUDA && g->nccl) {
        grid_free_nccl(g);
        return;
    }
#endif
    (void)d;
    grid_free(g);
}
