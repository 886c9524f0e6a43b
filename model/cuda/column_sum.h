// Column sums of an (N, C) row-major term on the device, deterministic
// and without atomics, for the parameter gradients that sum over the rows
// (LayerNorm's dweight and dbias, a matmul's dbias). The rows go in chunks:
// each chunk's partial sum is taken in row order by one thread per column
// (a block covers kColumnThreads columns of one chunk, so the loads are
// coalesced and every SM has work), and the chunks' partials are then
// added in chunk order and accumulated into the output (+=). The order is
// fixed, so a run repeats bit for bit; it is not the CPU's single pass over
// all N rows once N exceeds one chunk, so the sums differ from the CPU's
// by rounding (tests/cuda/test_layers_cuda.c and test_gemm_cuda.c bound
// them). The partials (N / chunk x C floats) come from CUDA's
// stream-ordered pool.
#ifndef SHARDLAB_COLUMN_SUM_H
#define SHARDLAB_COLUMN_SUM_H

#include <stdint.h>

#include "cuda_check.h"

namespace {  // each .cu file gets its own copy of the kernels

constexpr int64_t kColumnChunk = 256;   // rows per partial sum
constexpr unsigned kColumnThreads = 128; // columns per block
constexpr int64_t kMaxChunks = 65535;   // gridDim.y

// part[r][c] = sum over the rows of chunk r, in order, of term(i, c).
template <class Term>
__global__ void column_partials(float *part, int64_t N, int64_t C, int64_t chunk, Term term) {
    int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, r = blockIdx.y;
    if (c >= C) return;
    int64_t i1 = (r + 1) * chunk < N ? (r + 1) * chunk : N;
    float s = 0.0f;
    for (int64_t i = r * chunk; i < i1; i++) s += term(i, c);
    part[r * C + c] = s;
}

// out[c] += the chunks' partials of column c, in chunk order.
__global__ void column_finish(float *out, const float *part, int64_t chunks, int64_t C) {
    CUDA_GRID_STRIDE(c, C) {
        float s = 0.0f;
        for (int64_t r = 0; r < chunks; r++) s += part[r * C + c];
        out[c] += s;
    }
}

// out[c] += sum_i term(i, c) for i < N, c < C; `what` names the caller in errors.
template <class Term>
void column_sum(float *out, int64_t N, int64_t C, Term term, const char *what) {
    if (N <= 0 || C <= 0) return;
    int64_t chunk = kColumnChunk;
    if ((N + chunk - 1) / chunk > kMaxChunks) chunk = (N + kMaxChunks - 1) / kMaxChunks;
    int64_t chunks = (N + chunk - 1) / chunk;
    float *part = nullptr;
    cuda_check(cudaMallocAsync((void **)&part, (size_t)(chunks * C) * sizeof *part, 0), what);
    dim3 grid((unsigned)((C + kColumnThreads - 1) / kColumnThreads), (unsigned)chunks);
    column_partials<<<grid, kColumnThreads>>>(part, N, C, chunk, term);
    column_finish<<<cuda_blocks(C, 256), 256>>>(out, part, chunks, C);
    cuda_check(cudaFreeAsync(part, 0), what);
}

}  // namespace

#endif
