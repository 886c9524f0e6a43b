// Softmax cross-entropy on the device (layers.h; model/cpu/crossentropy.c):
// the fused forward/backward over the first V of Vp logits (padding
// columns out of the softmax, their dlogits 0; the row in shared memory
// where it fits), and the three passes of the vocabulary-parallel form,
// which give the fused form's bits at one slice. One block per row. The max is exact in any
// order; the exponentials are fastmath_device.h's (the CPU's bits, this
// file compiled with --fmad=false); the sum of a row is one block's fixed
// tree (block_reduce.h), not the CPU's loop, so sums, losses and dlogits
// differ from the CPU's by rounding only (tests/cuda: bounds). logf is
// CUDA's (within 1 ulp), not glibc's. The returned total sums the losses
// in double on the host, in row order.
#include <math.h>
#include <stdlib.h>

#include "block_reduce.h"
#include "cuda_check.h"
#include "fastmath_device.h"
#include "layers_cuda.h"
#include "v2/crossentropy_bf16.h"

namespace {

unsigned row_blocks(int64_t N) { return (unsigned)(N < 65535 ? N : 65535); }

__global__ void ce_fused(float *logits, float *losses, const int32_t *targets, int64_t N, int64_t V, int64_t Vp,
                         float dloss) {
    __shared__ float s[LAYER_BLOCK];
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
        float *l = logits + i * Vp;
        const int64_t t = targets[i];
        float target_logit = l[t];  // read by every thread before any writes (the max's syncs come first)
        float part = -INFINITY;
        for (int64_t v = threadIdx.x; v < V; v += LAYER_BLOCK) part = l[v] > part ? l[v] : part;
        float maxv = block_max_f32(part, s);
        float sum;
        part = 0.0f;
        if (dloss != 0.0f) {
            for (int64_t v = threadIdx.x; v < V; v += LAYER_BLOCK) {
                l[v] = dev_fast_expf(l[v] - maxv);
                part += l[v];
            }
            sum = block_sum_f32(part, s);
            float k = dloss / sum;
            for (int64_t v = threadIdx.x; v < V; v += LAYER_BLOCK) l[v] *= k;
            for (int64_t v = V + threadIdx.x; v < Vp; v += LAYER_BLOCK) l[v] = 0.0f;
            __syncthreads();  // every column scaled before the target's is moved
            if (threadIdx.x == 0) l[t] -= dloss;
        } else {
            for (int64_t v = threadIdx.x; v < V; v += LAYER_BLOCK) part += dev_fast_expf(l[v] - maxv);
            sum = block_sum_f32(part, s);
        }
        if (threadIdx.x == 0) losses[i] = logf(sum) + maxv - target_logit;
        __syncthreads();  // the next row of this block starts after this one's writes
    }
}

// ce_fused with the row held in shared memory (V floats, up to the block's
// opt-in limit: 227 KiB on an H100, 58,000-odd logits): the logits are
// read from global memory once and the dlogits written once, where
// ce_fused reads them three times and writes twice. Each thread takes the
// same columns in the same order, and the block the same trees, so the
// bits are ce_fused's. The loads go kUnroll at a time per thread: one
// block fills an SM's shared memory, so its 256 threads alone must keep
// enough loads in flight.
constexpr int kUnroll = 16;

__global__ void ce_fused_smem(float *logits, float *losses, const int32_t *targets, int64_t N, int64_t V, int64_t Vp,
                              float dloss) {
    extern __shared__ float row[];
    __shared__ float s[LAYER_BLOCK];
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
        float *l = logits + i * Vp;
        const int64_t t = targets[i];
        const float target_logit = l[t];
        float part = -INFINITY;
        int64_t v = threadIdx.x;
        for (; v + (kUnroll - 1) * LAYER_BLOCK < V; v += kUnroll * LAYER_BLOCK) {
            float x[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; u++) x[u] = l[v + u * LAYER_BLOCK];
#pragma unroll
            for (int u = 0; u < kUnroll; u++) {
                row[v + u * LAYER_BLOCK] = x[u];
                part = x[u] > part ? x[u] : part;
            }
        }
        for (; v < V; v += LAYER_BLOCK) {
            const float x = l[v];
            row[v] = x;
            part = x > part ? x : part;
        }
        const float maxv = block_max_f32(part, s);  // its syncs also publish row[]
        part = 0.0f;
        for (v = threadIdx.x; v < V; v += LAYER_BLOCK) {
            const float e = dev_fast_expf(row[v] - maxv);
            row[v] = e;  // each thread rereads only its own columns
            part += e;
        }
        const float sum = block_sum_f32(part, s);
        if (dloss != 0.0f) {
            const float k = dloss / sum;
            for (v = threadIdx.x; v < V; v += LAYER_BLOCK) {
                float d = row[v] * k;
                if (v == t) d -= dloss;  // ce_fused's l[t] -= dloss after the scaling: the same two roundings
                l[v] = d;
            }
            for (v = V + threadIdx.x; v < Vp; v += LAYER_BLOCK) l[v] = 0.0f;
        }
        if (threadIdx.x == 0) losses[i] = logf(sum) + maxv - target_logit;
        __syncthreads();  // row[] is the next row's only after every thread is done with this one
    }
}

// The shared memory ce_fused_smem may have for V logits (0: it may not).
size_t smem_row_bytes(int64_t V) {
    int dev = 0, limit = 0;
    size_t bytes = (size_t)V * sizeof(float);
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return 0;
    size_t room = (size_t)limit - LAYER_BLOCK * sizeof(float);  // the trees' static array
    if (bytes > room) return 0;
    cuda_check(cudaFuncSetAttribute(ce_fused_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
               "crossentropy_forward_backward (shared memory)");
    return bytes;
}

__global__ void ce_row_max(const float *logits, float *maxv, int64_t N, int64_t Vl, int64_t valid) {
    __shared__ float s[LAYER_BLOCK];
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
        const float *l = logits + i * Vl;
        float part = -INFINITY;
        for (int64_t v = threadIdx.x; v < valid; v += LAYER_BLOCK) part = l[v] > part ? l[v] : part;
        float m = block_max_f32(part, s);
        if (threadIdx.x == 0) maxv[i] = m;
    }
}

__global__ void ce_exp_sum(float *logits, const float *maxv, float *sum, float *target, const int32_t *targets,
                           int64_t N, int64_t Vl, int64_t v0, int64_t valid, bool in_place) {
    __shared__ float s[LAYER_BLOCK];
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
        float *l = logits + i * Vl, m = maxv[i], part = 0.0f;
        int64_t t = (int64_t)targets[i] - v0;
        if (threadIdx.x == 0) target[i] = t >= 0 && t < valid ? l[t] : 0.0f;  // only the slice holding it
        __syncthreads();  // the target's logit read before it becomes an exponential
        if (in_place) {
            for (int64_t v = threadIdx.x; v < valid; v += LAYER_BLOCK) {
                l[v] = dev_fast_expf(l[v] - m);
                part += l[v];
            }
        } else {
            for (int64_t v = threadIdx.x; v < valid; v += LAYER_BLOCK) part += dev_fast_expf(l[v] - m);
        }
        float total = block_sum_f32(part, s);
        if (threadIdx.x == 0) sum[i] = total;
    }
}

__global__ void ce_finish(float *logits, float *losses, const float *maxv, const float *sum, const float *target,
                          const int32_t *targets, int64_t N, int64_t Vl, int64_t v0, int64_t valid, float dloss) {
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
        float *l = logits + i * Vl;
        if (dloss != 0.0f) {
            float k = dloss / sum[i];
            for (int64_t v = threadIdx.x; v < valid; v += LAYER_BLOCK) l[v] *= k;
            for (int64_t v = valid + threadIdx.x; v < Vl; v += LAYER_BLOCK) l[v] = 0.0f;
            __syncthreads();
            int64_t t = (int64_t)targets[i] - v0;
            if (threadIdx.x == 0 && t >= 0 && t < valid) l[t] -= dloss;
        }
        if (threadIdx.x == 0) losses[i] = logf(sum[i]) + maxv[i] - target[i];
    }
}

// The losses' sum in double, on the host, rows in order.
double sum_losses(const float *losses, int64_t N, const char *what) {
    if (N <= 0) return 0.0;
    float *h = (float *)malloc((size_t)N * sizeof *h);
    if (!h) {
        fprintf(stderr, "error: %s: no host memory for %lld losses\n", what, (long long)N);
        exit(EXIT_FAILURE);
    }
    cuda_check(cudaMemcpy(h, losses, (size_t)N * sizeof *h, cudaMemcpyDeviceToHost), what);
    double total = 0.0;
    for (int64_t i = 0; i < N; i++) total += h[i];
    free(h);
    return total;
}

}  // namespace

extern "C" {

double crossentropy_forward_backward_cuda(float *logits, float *losses, const int32_t *targets, int64_t N, int64_t V,
                                          int64_t Vp, float dloss, struct exec_ctx *fc) {
    if (N > 0) {
        size_t smem = smem_row_bytes(V);
        if (smem > 0) ce_fused_smem<<<row_blocks(N), LAYER_BLOCK, smem>>>(logits, losses, targets, N, V, Vp, dloss);
        else ce_fused<<<row_blocks(N), LAYER_BLOCK>>>(logits, losses, targets, N, V, Vp, dloss);
        cuda_done("crossentropy_forward_backward");
    }
    fc->other += (double)CE_FLOPS_PER_LOGIT * N * V;
    return sum_losses(losses, N, "crossentropy_forward_backward");
}

// --gpu_path v2's head at tp = 1 (layers.h): v2/crossentropy_bf16.cu's
// kernel on the bf16 logits, counted and summed as the fp32 form.
double crossentropy_forward_backward_bf16_cuda(bf16 *logits, float *losses, const int32_t *targets, int64_t N,
                                               int64_t V, int64_t Vp, float dloss, struct exec_ctx *fc) {
    crossentropy_v2(fc->kernels, logits, losses, targets, N, V, Vp, dloss);
    fc->other += (double)CE_FLOPS_PER_LOGIT * N * V;
    return sum_losses(losses, N, "crossentropy_forward_backward_bf16");
}

void crossentropy_row_max_cuda(const float *logits, float *maxv, int64_t N, int64_t Vl, int64_t valid,
                               struct exec_ctx *fc) {
    (void)fc;  // crossentropy_finish counts the three passes
    if (N <= 0) return;
    ce_row_max<<<row_blocks(N), LAYER_BLOCK>>>(logits, maxv, N, Vl, valid);
    cuda_done("crossentropy_row_max");
}

void crossentropy_exp_sum_cuda(float *logits, const float *maxv, float *sum, float *target, const int32_t *targets,
                               int64_t N, int64_t Vl, int64_t v0, int64_t valid, bool in_place,
                               struct exec_ctx *fc) {
    (void)fc;
    if (N <= 0) return;
    ce_exp_sum<<<row_blocks(N), LAYER_BLOCK>>>(logits, maxv, sum, target, targets, N, Vl, v0, valid, in_place);
    cuda_done("crossentropy_exp_sum");
}

double crossentropy_finish_cuda(float *logits, float *losses, const float *maxv, const float *sum, const float *target,
                                const int32_t *targets, int64_t N, int64_t Vl, int64_t v0, int64_t valid, float dloss,
                                struct exec_ctx *fc) {
    if (N > 0) {
        ce_finish<<<row_blocks(N), LAYER_BLOCK>>>(logits, losses, maxv, sum, target, targets, N, Vl, v0, valid, dloss);
        cuda_done("crossentropy_finish");
    }
    fc->other += (double)CE_FLOPS_PER_LOGIT * N * valid;
    return sum_losses(losses, N, "crossentropy_finish");
}

}  // extern "C"
