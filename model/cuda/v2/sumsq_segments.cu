// The gradient norm's sums of squares over a rank's segments in one pass
// and one copy (model/cuda/v2/sumsq_table.h says why and how). --gpu_path
// v2 only; compiled, not run on a GPU (docs/GPU.md).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "../block_reduce.h"
#include "../cuda_check.h"
#include "../../bufops_ops.h"
#include "sumsq_segments.h"

// One block per chunk: the chunk's squares in fp32 per thread (strided),
// then the block's fixed tree; bf16 segments widened on the way. For fp32
// data this is sumsq_chunk_reference bit for bit (built with --fmad=false).
static_assert(SUMSQ_THREADS == LAYER_BLOCK, "the host reference's block is the kernel's");
__global__ void sumsq_chunks_kernel(const sumsq_chunk *chunks, const void *const *data, const unsigned char *is_bf16,
                                    float *partials) {
    __shared__ float s[LAYER_BLOCK];
    const sumsq_chunk c = chunks[blockIdx.x];
    float acc = 0.0f;
    if (is_bf16[c.segment]) {
        const __nv_bfloat16 *x = (const __nv_bfloat16 *)data[c.segment];
        for (int64_t i = c.begin + threadIdx.x; i < c.end; i += LAYER_BLOCK) {
            float v = __bfloat162float(x[i]);
            acc += v * v;
        }
    } else {
        const float *x = (const float *)data[c.segment];
        for (int64_t i = c.begin + threadIdx.x; i < c.end; i += LAYER_BLOCK) {
            float sq = x[i] * x[i];
            acc += sq;
        }
    }
    float t = block_sum_f32(acc, s);
    if (threadIdx.x == 0) partials[blockIdx.x] = t;
}

// One thread per segment: its chunks' partials in chunk order, in double
// (sumsq_segment_total), so the sums are the same on every run.
__global__ void sumsq_totals_kernel(const float *partials, const int64_t *first, int nseg, double *totals) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= nseg) return;
    double t = 0.0;
    for (int64_t c = first[s]; c < first[s + 1]; c++) t += (double)partials[c];
    totals[s] = t;
}

int sumsq_plan_open(struct sumsq_plan *p, const void *const *data, const unsigned char *is_bf16, const int64_t *n,
                    int nseg) {
    *p = sumsq_plan{};
    p->nseg = nseg;
    p->nchunks = sumsq_chunk_count(n, nseg, SUMSQ_CHUNK);
    sumsq_chunk *chunks = (sumsq_chunk *)malloc((size_t)(p->nchunks > 0 ? p->nchunks : 1) * sizeof *chunks);
    int64_t *first = (int64_t *)malloc((size_t)(nseg + 1) * sizeof *first);
    if (!chunks || !first || sumsq_chunk_table(n, nseg, SUMSQ_CHUNK, chunks, p->nchunks, first) != p->nchunks) {
        free(chunks);
        free(first);
        return -1;
    }
    // the table is the run's: uploaded once, read every step
    cuda_check(cudaMalloc(&p->chunks, (size_t)p->nchunks * sizeof *chunks + 1), "sumsq table");
    cuda_check(cudaMalloc(&p->first, (size_t)(nseg + 1) * sizeof *first), "sumsq table");
    cuda_check(cudaMalloc(&p->data, (size_t)nseg * sizeof(void *) + 1), "sumsq table");
    cuda_check(cudaMalloc(&p->is_bf16, (size_t)nseg + 1), "sumsq table");
    cuda_check(cudaMalloc(&p->partials, (size_t)p->nchunks * sizeof(float) + 1), "sumsq partials");
    cuda_check(cudaMalloc(&p->totals, (size_t)nseg * sizeof(double) + 1), "sumsq totals");
    cuda_check(cudaMallocHost(&p->host_totals, (size_t)nseg * sizeof(double) + 1), "sumsq host totals");
    cuda_check(cudaMemcpy(p->chunks, chunks, (size_t)p->nchunks * sizeof *chunks, cudaMemcpyHostToDevice), "sumsq table");
    cuda_check(cudaMemcpy(p->first, first, (size_t)(nseg + 1) * sizeof *first, cudaMemcpyHostToDevice), "sumsq table");
    cuda_check(cudaMemcpy(p->data, data, (size_t)nseg * sizeof(void *), cudaMemcpyHostToDevice), "sumsq table");
    cuda_check(cudaMemcpy(p->is_bf16, is_bf16, (size_t)nseg, cudaMemcpyHostToDevice), "sumsq table");
    free(chunks);
    free(first);
    return 0;
}

const double *sumsq_plan_run(struct sumsq_plan *p, cudaStream_t stream) {
    if (p->nchunks > 0)
        sumsq_chunks_kernel<<<(unsigned)p->nchunks, LAYER_BLOCK, 0, stream>>>(p->chunks, p->data, p->is_bf16,
                                                                             p->partials);
    if (p->nseg > 0) sumsq_totals_kernel<<<(p->nseg + 127) / 128, 128, 0, stream>>>(p->partials, p->first, p->nseg, p->totals);
    cuda_done("sumsq_segments");
    cuda_check(cudaMemcpyAsync(p->host_totals, p->totals, (size_t)p->nseg * sizeof(double), cudaMemcpyDeviceToHost,
                               stream), "sumsq totals to the host");
    cuda_check(cudaStreamSynchronize(stream), "sumsq totals"); // the one wait: the norm needs the sums
    return p->host_totals;
}

void sumsq_plan_close(struct sumsq_plan *p) {
    cudaFree(p->chunks);
    cudaFree(p->first);
    cudaFree(p->data);
    cudaFree(p->is_bf16);
    cudaFree(p->partials);
    cudaFree(p->totals);
    cudaFreeHost(p->host_totals);
    *p = sumsq_plan{};
}

// include/bufops.h's device form of buf_sumsq_open/run/close: a plan in
// host memory (the dispatch holds it as a void *), its table on the device.
extern "C" void *buf_sumsq_open_cuda(const void *const *data, enum dtype dt, const size_t *n, int nseg) {
    sumsq_plan *p = (sumsq_plan *)malloc(sizeof *p);
    size_t k = nseg > 0 ? (size_t)nseg : 1;
    int64_t *n64 = (int64_t *)malloc(k * sizeof *n64);
    unsigned char *b16 = (unsigned char *)malloc(k);
    int rc = -1;
    if (p && n64 && b16) {
        for (int s = 0; s < nseg; s++) n64[s] = (int64_t)n[s], b16[s] = dt != DTYPE_FP32; // bufops: any other dtype is bf16
        rc = sumsq_plan_open(p, data, b16, n64, nseg);
    }
    free(n64);
    free(b16);
    if (rc != 0) {
        free(p);
        return nullptr;
    }
    return p;
}

// The default stream: the norm follows the reductions queued there.
extern "C" const double *buf_sumsq_run_cuda(void *plan) { return sumsq_plan_run((sumsq_plan *)plan, 0); }

extern "C" void buf_sumsq_close_cuda(void *plan) {
    if (!plan) return;
    sumsq_plan_close((sumsq_plan *)plan);
    free(plan);
}
