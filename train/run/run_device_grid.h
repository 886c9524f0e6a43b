/* A grid's collectives where the model runs (include/device.h): on the
 * CPU the grid's own tables (MPI, or the one-process identities); on GPUs
 * the NCCL backend over the same groups (parallel/comm/cuda/), because the
 * collectives then move device memory, which the OpenMPI of these machines
 * cannot read (it is built without CUDA support). */
#ifndef SHARDLAB_DEVICE_GRID_H
#define SHARDLAB_DEVICE_GRID_H

#include "device.h"
#include "grid.h"

/* After grid_init: moves every group of g to the device's collectives.
 * Collective over the world; 0, or -1 with a message on every rank (g then
 * keeps its MPI tables: free it with device_grid_free all the same). */
int device_grid_attach(const struct device_info *d, struct grid *g, char err[GRID_ERR_LEN]);
/* Frees g, whichever tables it holds. */
void device_grid_free(const struct device_info *d, struct grid *g);

#endif
