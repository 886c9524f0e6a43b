/* Where a buffer lives, and so which backend runs a call on it: the CPU's
 * kernels on host memory, the GPU's on device memory. The space travels
 * with the call (include/backend.h): a layer kernel or an update rule
 * reads it from the run's struct exec_ctx (counters.h), a buffer
 * operation and the 8-bit codec take it as their first argument. Nobody
 * asks a pointer where it lives. Its own header so that counters.h (read
 * by the .cu files) need not include mem.h. */
#ifndef SHARDLAB_MEM_SPACE_H
#define SHARDLAB_MEM_SPACE_H

/* MEM_HOST is 0: a struct exec_ctx made on the spot ({0}) runs its
 * kernels on the CPU. */
enum mem_space { MEM_HOST, MEM_DEVICE, MEM_NUM_SPACES };

#endif
