/* For the dispatch files (model/dispatch.c,
 * optim/optim_dispatch.c), which every build compiles: each family of ops
 * sits behind a table of its backends' forms (model/layer_ops.h,
 * model/bufops_ops.h, optim/optim_ops.h), and one function per family
 * chooses the table by the memory space of the call (mem_space.h). The
 * CPU build has no device table to link, so there that function stops the
 * run instead, naming the public function: device memory reaching a CPU
 * build is a caller bug, never a quiet CPU run. */
#ifndef SHARDLAB_BACKEND_H
#define SHARDLAB_BACKEND_H

#include <stdio.h>
#include <stdlib.h>

_Noreturn static inline void backend_no_device(const char *op) {
    fprintf(stderr, "error: %s: a call on device memory in the CPU build, which has no device kernels (make cuda: "
                    "docs/GPU.md)\n", op);
    exit(EXIT_FAILURE);
}

/* A chooser's device answer: &table, the CUDA build's device table; in
 * the CPU build (where table is not even declared) the stop, naming op. */
#ifdef SHARDLAB_CUDA
#define BACKEND_DEVICE(table, op) ((void)(op), &(table))
#else
#define BACKEND_DEVICE(table, op) (backend_no_device(op), NULL)
#endif

#endif
