/* The one-pass sums of squares over a rank's segments on a GPU
 * (sumsq_segments.cu; the table and its reference: sumsq_table.h).
 * --gpu_path v2 only; compiled, not run on a GPU. C and C++ alike (the
 * CUDA tests are C). */
#ifndef SHARDLAB_SUMSQ_SEGMENTS_H
#define SHARDLAB_SUMSQ_SEGMENTS_H

#include <cuda_runtime.h>

#include "sumsq_table.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The run's plan: the chunk table and the segments' device pointers,
 * uploaded once (the segments a rank updates are fixed for the run), and
 * the partials, the device totals and their pinned host copy. */
struct sumsq_plan {
    int nseg;
    int64_t nchunks;
    struct sumsq_chunk *chunks;
    int64_t *first;
    const void **data;
    unsigned char *is_bf16;
    float *partials;
    double *totals, *host_totals;
};

/* data[s]: segment s on the device, n[s] elements, bf16 where is_bf16[s],
 * else fp32. 0, or -1 when the table cannot be built (a negative size). */
int sumsq_plan_open(struct sumsq_plan *p, const void *const *data, const unsigned char *is_bf16, const int64_t *n,
                    int nseg);
/* Two launches on stream, one copy, one wait: each segment's sum of
 * squares on the host (p->nseg doubles, valid until the next run). */
const double *sumsq_plan_run(struct sumsq_plan *p, cudaStream_t stream);
void sumsq_plan_close(struct sumsq_plan *p);

#ifdef __cplusplus
}
#endif

#endif
