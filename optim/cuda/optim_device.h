// Device code shared by the optimizer kernels (adamw.cu, sgd.cu, lion.cu,
// adamw8bit.cu, onestate8bit.cu): include/dtype.h's bf16 conversions, include/rng.h's
// noise and include/optim.h's nearest-code search, ported op for op so
// that each gives the CPU's bits. Included by .cu files only.
#ifndef SHARDLAB_OPTIM_DEVICE_H
#define SHARDLAB_OPTIM_DEVICE_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "optim_kernels.h"
#include "rng.h"

__device__ __forceinline__ float dev_bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

// dtype.h's f32_to_bf16: nearest-even on the bits, NaN kept quiet.
__device__ __forceinline__ uint16_t dev_f32_to_bf16(float f) {
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    const uint32_t lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

// dtype.h's f32_to_bf16_stochastic.
__device__ __forceinline__ uint16_t dev_f32_to_bf16_stochastic(float f, uint32_t noise) {
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) >= 0x7f800000u) return dev_f32_to_bf16(f);
    const uint32_t r = u + (noise & 0xffffu);
    if ((r & 0x7f800000u) == 0x7f800000u) return (uint16_t)(u >> 16);
    return (uint16_t)(r >> 16);
}

// rng.h's rng_mix64 and rng_u32 (64-bit integer arithmetic, exact).
__device__ __forceinline__ uint64_t dev_rng_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ uint32_t dev_rng_u32(uint64_t seed, uint64_t stream, uint64_t index) {
    return (uint32_t)(dev_rng_mix64(dev_rng_mix64(seed ^ dev_rng_mix64(stream + 0x9e3779b97f4a7c15ull)) + index) >> 32);
}

// Gradient element i in fp32, times the clipping scale (the CPU's
// `(GRAD_EXPR) * gs`).
__device__ __forceinline__ float dev_grad(const void *grad, int grad_bf16, size_t i, float grad_scale) {
    const float g = grad_bf16 ? dev_bf16_to_f32(((const uint16_t *)grad)[i]) : ((const float *)grad)[i];
    return g * grad_scale;
}

// The updated weight of element i into the bf16 params, if any.
__device__ __forceinline__ void dev_write_param(const cuda_k_writeback &out, size_t i, float w) {
    if (!out.params) return;
    out.params[i] = out.stochastic
                        ? dev_f32_to_bf16_stochastic(w, dev_rng_u32(out.seed, RNG_STREAM_ROUNDING, out.noise_index + i))
                        : dev_f32_to_bf16(w);
}

// optim.h's qmap_nearest and qmap_round: the branchy binary search to the
// bracket, then the midpoint fl((map[lo] + map[hi]) * 0.5) with an exact tie
// to the even index. NaN gives 0.
__device__ __forceinline__ uint8_t dev_qmap_nearest(const float *map, float x) {
    unsigned k = 0;
    for (unsigned step = 256 / 2; step; step >>= 1)
        if (map[k + step - 1] < x) k += step;
    if (k == 0) return 0;
    if (k == 256) return 255;
    const unsigned lo = k - 1, hi = k;
    const float mid = (map[lo] + map[hi]) * 0.5f;
    if (x < mid) return (uint8_t)lo;
    if (x > mid) return (uint8_t)hi;
    return (uint8_t)((lo & 1u) ? hi : lo);
}

__device__ __forceinline__ bool dev_signbit(float x) { return (__float_as_uint(x) >> 31) != 0; }

// The 8-bit kernels: one CUDA block of kQuantBlock threads per quantization
// block, one thread per element.
constexpr unsigned kQuantBlock = 256;  // ADAMW8BIT_BLOCK and QMAP_SIZE (include/optim.h)
static_assert(kQuantBlock == OPTIM_K_BLOCK, "one thread per element of a block");

// Elements of quantization block b in a range of n.
__device__ __forceinline__ unsigned dev_block_len(size_t n, size_t b) {
    const size_t base = b * kQuantBlock;
    return n - base < kQuantBlock ? (unsigned)(n - base) : kQuantBlock;
}

// optim/blockwise8.c's blockwise8_quantize for one element: the zero code
// when the block is all zero, else the nearest code of x / absmax, with
// bitsandbytes' sign fix for a signed state (a code whose sign differs from
// x's moves one code toward x's side, 8-bit wrap-around as the CPU's cast).
__device__ __forceinline__ uint8_t dev_quantize_one(const float *map, float absmax, float x, bool sign_fix,
                                                    uint8_t zero_code) {
    if (absmax == 0.0f) return zero_code;
    int c = dev_qmap_nearest(map, x / absmax);
    if (sign_fix && dev_signbit(map[c]) != dev_signbit(x)) c += x > 0.0f ? 1 : -1;
    return (uint8_t)c;
}

// Grid-stride loops over n elements.
#define OPTIM_GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// Blocks for an elementwise kernel (grid-stride, so a cap is fine).
static inline unsigned optim_blocks(size_t n) {
    const size_t b = (n + OPTIM_K_BLOCK - 1) / OPTIM_K_BLOCK, cap = 65535;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

#endif
