// For the layer kernels (.cu): a launch or CUDA call that failed leaves the
// device unusable, so the kernel's name and CUDA's reason go to stderr and
// the process exits non-zero (include/layers.h). cuda_done does not wait for
// the device: an X_cuda layer returns with its kernels queued on the default
// stream, in order with every later call and copy (model/kernel_timing.h
// says how they are timed, and where a failure while running shows).
#ifndef SHARDLAB_CUDA_CHECK_H
#define SHARDLAB_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static inline void cuda_check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "error: CUDA %s: %s (error %d)\n", what, cudaGetErrorString(e), (int)e);
    exit(EXIT_FAILURE);
}

// After the launches of one layers.h call: their launch error.
static inline void cuda_done(const char *what) { cuda_check(cudaGetLastError(), what); }

// Blocks for n elements at `block` threads each, for grid-stride loops.
static inline unsigned cuda_blocks(int64_t n, unsigned block) {
    const int64_t max_blocks = 65535;
    int64_t b = (n + block - 1) / block;
    return (unsigned)(b < 1 ? 1 : b > max_blocks ? max_blocks : b);
}

#define CUDA_GRID_STRIDE(i, n)                                                                         \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

#endif
