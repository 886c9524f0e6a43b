/* The grid's collectives on the device (include/device_grid.h). */
#include "device_grid.h"

#include <stdio.h>

#ifdef SHARDLAB_CUDA
#include "../parallel/comm/cuda/comm_nccl.h"
#endif

int device_grid_attach(const struct device_info *d, struct grid *g, char err[GRID_ERR_LEN]) {
    if (d->kind != DEVICE_CUDA) return 0;
#ifdef SHARDLAB_CUDA
    /* NCCL matches point-to-point messages in posting order (no tags), and
     * a send waits for its receive: the pipeline schedules post them for
     * MPI's semantics (comm_nccl.h). Refused on every rank alike. */
    if (g->pp > 1) {
        snprintf(err, GRID_ERR_LEN, "--pp %d on GPUs: pipeline parallelism over NCCL is not supported yet (NCCL has "
                                    "no message tags and its sends and receives must be grouped: docs/GPU.md); "
                                    "use --pp 1, or --device cpu", g->pp);
        return -1;
    }
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
