/* Where a pointer lives, for the CUDA build's dispatchers (bufops_dispatch.c,
 * layers_dispatch.c): device memory when the CUDA runtime says so
 * (cudaPointerGetAttributes: device or managed); plain host memory, NULL,
 * and every pointer on a machine without a GPU are host memory. */
#ifndef SHARDLAB_POINTER_SPACE_H
#define SHARDLAB_POINTER_SPACE_H

#include <stdbool.h>

bool cuda_on_device(const void *p);

#endif
