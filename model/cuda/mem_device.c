/* The MEM_DEVICE space of include/mem.h: cudaMalloc'd, zero-filled
 * buffers. A failure returns NULL, so mem_alloc records it like a failed
 * host allocation ("out of memory allocating ... device memory") and the
 * ranks agree on it before anyone exits (trainer_agree). */
#include <cuda_runtime.h>
#include <stdio.h>

#include "cuda_device.h"

/* cudaMalloc aligns to 256 bytes, beyond mem.h's MEM_ALIGN. */
static void *device_alloc(size_t bytes) {
    size_t n = bytes ? bytes : MEM_ALIGN;
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory is not sticky: clear it for the next call */
        return NULL;
    }
    if (cudaMemset(p, 0, n) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void device_free(void *p) { cudaFree(p); }

void cuda_mem_install(struct mem_tracker *t) { t->device = (struct mem_space_ops){.alloc = device_alloc, .free = device_free}; }

int cuda_mem_used(size_t *used, size_t *total, char *err, size_t err_len) {
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(err, err_len, "cudaMemGetInfo: %s", cudaGetErrorString(e));
        return -1;
    }
    *used = total_b - free_b;
    *total = total_b;
    return 0;
}
