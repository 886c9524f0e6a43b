// The device build's elementwise buffer kernels (bufops_kernels.h). The
// bf16 conversions are include/dtype.h's, bit for bit: round to nearest
// even on the bit pattern, NaN kept quiet, Inf passed through.
#include <cuda_runtime.h>

#include "bufops_kernels.h"

namespace {

__device__ __forceinline__ float bf16_to_f32_dev(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

// dtype.h's f32_to_bf16: the bias 0x7fff plus the kept lowest bit rounds
// ties to even; a NaN keeps its top bits and sets the quiet bit.
__device__ __forceinline__ uint16_t f32_to_bf16_dev(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    uint32_t lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

// A grid-stride loop: any n with a grid of at most max_blocks.
constexpr unsigned kMaxBlocks = 65535;
constexpr unsigned kSumBlocks = 1024;  // partials of the sum of squares

unsigned blocks_for(size_t n) {
    size_t b = (n + BUFOPS_BLOCK - 1) / BUFOPS_BLOCK;
    return b > kMaxBlocks ? kMaxBlocks : (unsigned)(b ? b : 1);
}

#define GRID_STRIDE(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ void widen_kernel(float *dst, const uint16_t *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = bf16_to_f32_dev(src[i]);
}
__global__ void narrow_kernel(uint16_t *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = f32_to_bf16_dev(src[i]);
}
__global__ void round_kernel(float *x, size_t n) {
    GRID_STRIDE(i, n) x[i] = bf16_to_f32_dev(f32_to_bf16_dev(x[i]));
}
__global__ void round_narrow_kernel(uint16_t *dst, float *x, size_t n) {
    GRID_STRIDE(i, n) {
        const uint16_t h = f32_to_bf16_dev(x[i]);
        dst[i] = h;
        x[i] = bf16_to_f32_dev(h);
    }
}

// The same three, four values a thread: one 16-byte float4 and one 8-byte
// uint2 of four bf16 per access instead of four narrow ones. The saved
// activations go through them every layer (a step at GPT-2 124M's B 32
// moves about 100 GB this way), where the scalar forms reach a part of
// the memory bandwidth only. n4 groups of 4; the caller does the tail.
__device__ __forceinline__ uint2 narrow4(float4 v) {
    return make_uint2((uint32_t)f32_to_bf16_dev(v.x) | (uint32_t)f32_to_bf16_dev(v.y) << 16,
                      (uint32_t)f32_to_bf16_dev(v.z) | (uint32_t)f32_to_bf16_dev(v.w) << 16);
}
__device__ __forceinline__ float4 widen4(uint2 h) {
    return make_float4(bf16_to_f32_dev((uint16_t)h.x), bf16_to_f32_dev((uint16_t)(h.x >> 16)),
                       bf16_to_f32_dev((uint16_t)h.y), bf16_to_f32_dev((uint16_t)(h.y >> 16)));
}
__global__ void widen4_kernel(float4 *dst, const uint2 *src, size_t n4) {
    GRID_STRIDE(i, n4) dst[i] = widen4(src[i]);
}
__global__ void narrow4_kernel(uint2 *dst, const float4 *src, size_t n4) {
    GRID_STRIDE(i, n4) dst[i] = narrow4(src[i]);
}
__global__ void round4_kernel(float4 *x, size_t n4) {
    GRID_STRIDE(i, n4) x[i] = widen4(narrow4(x[i]));
}
__global__ void round_narrow4_kernel(uint2 *dst, float4 *x, size_t n4) {
    GRID_STRIDE(i, n4) {
        const uint2 h = narrow4(x[i]);
        dst[i] = h;
        x[i] = widen4(h);
    }
}

bool aligned(const void *p, size_t bytes) { return (uintptr_t)p % bytes == 0; }
// __fadd_rn: an IEEE add the compiler may not contract into an FMA.
__global__ void acc_f32_kernel(float *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = __fadd_rn(dst[i], src[i]);
}
__global__ void acc_bf16_kernel(uint16_t *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = f32_to_bf16_dev(__fadd_rn(bf16_to_f32_dev(dst[i]), src[i]));
}
__global__ void add_bf16_kernel(uint16_t *dst, const uint16_t *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = f32_to_bf16_dev(__fadd_rn(bf16_to_f32_dev(dst[i]), bf16_to_f32_dev(src[i])));
}

__device__ __forceinline__ double square(float x) { return __dmul_rn((double)x, (double)x); }
__device__ __forceinline__ double square(uint16_t h) { return square(bf16_to_f32_dev(h)); }

// Block sum in shared memory, a fixed tree: deterministic for a given grid.
__device__ double block_sum(double v) {
    __shared__ double s[BUFOPS_BLOCK];
    s[threadIdx.x] = v;
    __syncthreads();
    for (unsigned w = BUFOPS_BLOCK / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) s[threadIdx.x] = __dadd_rn(s[threadIdx.x], s[threadIdx.x + w]);
        __syncthreads();
    }
    return s[0];
}

template <typename T>
__global__ void sumsq_partials(const T *src, size_t n, double *partials) {
    double acc = 0.0;
    GRID_STRIDE(i, n) acc = __dadd_rn(acc, square(src[i]));
    double b = block_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = b;
}

__global__ void sumsq_finish(const double *partials, unsigned n, double *out) {
    double acc = 0.0;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) acc = __dadd_rn(acc, partials[i]);
    double b = block_sum(acc);
    if (threadIdx.x == 0) *out = b;
}

template <typename T>
int sum_squares(const T *src, size_t n, double *out) {
    *out = 0.0;
    if (n == 0) return 0;
    unsigned blocks = blocks_for(n);
    if (blocks > kSumBlocks) blocks = kSumBlocks;
    // blocks partials, then the result; from the stream-ordered pool, as
    // cudaMalloc/cudaFree would synchronize the device per call (one call a
    // gradient segment: hundreds a step)
    double *scratch = nullptr;
    cudaError_t e = cudaMallocAsync((void **)&scratch, (blocks + 1) * sizeof(double), 0);
    if (e != cudaSuccess) return (int)e;
    sumsq_partials<T><<<blocks, BUFOPS_BLOCK>>>(src, n, scratch);
    sumsq_finish<<<1, BUFOPS_BLOCK>>>(scratch, blocks, scratch + blocks);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpy(out, scratch + blocks, sizeof(double), cudaMemcpyDeviceToHost);
    cudaError_t f = cudaFreeAsync(scratch, 0);
    return (int)(e != cudaSuccess ? e : f);
}

template <typename K, typename... A>
int launch(K kernel, size_t n, A... args) {
    if (n == 0) return 0;
    kernel<<<blocks_for(n), BUFOPS_BLOCK>>>(args..., n);
    return (int)cudaGetLastError();
}

}  // namespace

extern "C" {

// Four at a time where both sides are aligned for it (the tracked buffers
// are; a view into one may not be), then the scalar kernel for the tail.
int cuda_k_widen(float *dst, const uint16_t *src, size_t n) {
    size_t n4 = aligned(dst, 16) && aligned(src, 8) ? n / 4 : 0;
    int e = launch(widen4_kernel, n4, (float4 *)dst, (const uint2 *)src);
    return e ? e : launch(widen_kernel, n - 4 * n4, dst + 4 * n4, src + 4 * n4);
}
int cuda_k_narrow(uint16_t *dst, const float *src, size_t n) {
    size_t n4 = aligned(dst, 8) && aligned(src, 16) ? n / 4 : 0;
    int e = launch(narrow4_kernel, n4, (uint2 *)dst, (const float4 *)src);
    return e ? e : launch(narrow_kernel, n - 4 * n4, dst + 4 * n4, src + 4 * n4);
}
int cuda_k_round_bf16(float *x, size_t n) {
    size_t n4 = aligned(x, 16) ? n / 4 : 0;
    int e = launch(round4_kernel, n4, (float4 *)x);
    return e ? e : launch(round_kernel, n - 4 * n4, x + 4 * n4);
}
int cuda_k_round_narrow(uint16_t *dst, float *x, size_t n) {
    size_t n4 = aligned(dst, 8) && aligned(x, 16) ? n / 4 : 0;
    int e = launch(round_narrow4_kernel, n4, (uint2 *)dst, (float4 *)x);
    return e ? e : launch(round_narrow_kernel, n - 4 * n4, dst + 4 * n4, x + 4 * n4);
}
int cuda_k_accumulate_f32(float *dst, const float *src, size_t n) { return launch(acc_f32_kernel, n, dst, src); }
int cuda_k_accumulate_bf16(uint16_t *dst, const float *src, size_t n) { return launch(acc_bf16_kernel, n, dst, src); }
int cuda_k_add_bf16(uint16_t *dst, const uint16_t *src, size_t n) { return launch(add_bf16_kernel, n, dst, src); }
int cuda_k_sum_squares_f32(const float *src, size_t n, double *out) { return sum_squares(src, n, out); }
int cuda_k_sum_squares_bf16(const uint16_t *src, size_t n, double *out) { return sum_squares(src, n, out); }

}  // extern "C"
