/* For the dispatch files (model/layers_dispatch.c, model/bufops_dispatch.c,
 * optim/optim_dispatch.c), which every build compiles: each public name
 * picks its backend by the memory space of the call (mem_space.h),
 *
 *     if (space == MEM_DEVICE) ON_DEVICE(layernorm_forward_cuda(...));
 *     else layernorm_forward_cpu(...);
 *
 * The CPU build has no *_cuda functions to link, so there ON_DEVICE drops
 * the call and stops the run instead, naming the public function: device
 * memory reaching a CPU build is a caller bug, never a quiet CPU run. */
#ifndef SHARDLAB_BACKEND_H
#define SHARDLAB_BACKEND_H

#include <stdio.h>
#include <stdlib.h>

#ifdef SHARDLAB_CUDA
#define ON_DEVICE(call) (call)
#else
#define ON_DEVICE(call) backend_no_device(__func__)
#endif

_Noreturn static inline void backend_no_device(const char *op) {
    fprintf(stderr, "error: %s: a call on device memory in the CPU build, which has no device kernels (make cuda: "
                    "docs/GPU.md)\n", op);
    exit(EXIT_FAILURE);
}

#endif
