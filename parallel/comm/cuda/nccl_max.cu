// Order-preserving keys for the NCCL max (nccl_max.h).
#include "nccl_max.h"

namespace {

constexpr unsigned kBlock = 256, kMaxBlocks = 65535;
constexpr uint32_t kSign = 0x80000000u, kQuietNaN = 0x7fc00000u;

// Negative floats reverse their order (all bits flipped), non-negative
// ones move above them (sign bit set). A NaN of either sign becomes the
// one quiet NaN, whose key is above +Inf's.
__device__ __forceinline__ uint32_t to_key(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) u = kQuietNaN;
    return (u & kSign) ? ~u : (u | kSign);
}
__device__ __forceinline__ uint32_t from_key(uint32_t k) { return (k & kSign) ? (k & ~kSign) : ~k; }

// include/dtype.h's bf16 narrowing of a value that bf16 holds exactly
// (or the quiet NaN): the top half of its bits, NaN kept quiet.
__device__ __forceinline__ uint16_t top_half(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)(u >> 16);
}

#define GRID_STRIDE(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ void to_keys_f32(uint32_t *x, size_t n) { GRID_STRIDE(i, n) x[i] = to_key(x[i]); }
__global__ void from_keys_f32(uint32_t *x, size_t n) { GRID_STRIDE(i, n) x[i] = from_key(x[i]); }
__global__ void to_keys_bf16(uint32_t *k, const uint16_t *x, size_t n) { GRID_STRIDE(i, n) k[i] = to_key((uint32_t)x[i] << 16); }
__global__ void from_keys_bf16(uint16_t *x, const uint32_t *k, size_t n) { GRID_STRIDE(i, n) x[i] = top_half(from_key(k[i])); }

unsigned blocks_for(size_t n) {
    size_t b = (n + kBlock - 1) / kBlock;
    return b > kMaxBlocks ? kMaxBlocks : (unsigned)(b ? b : 1);
}

}  // namespace

extern "C" {

int nccl_max_to_keys_f32(uint32_t *x, size_t n, cudaStream_t s) {
    if (n) to_keys_f32<<<blocks_for(n), kBlock, 0, s>>>(x, n);
    return (int)cudaGetLastError();
}
int nccl_max_from_keys_f32(uint32_t *x, size_t n, cudaStream_t s) {
    if (n) from_keys_f32<<<blocks_for(n), kBlock, 0, s>>>(x, n);
    return (int)cudaGetLastError();
}
int nccl_max_to_keys_bf16(uint32_t *keys, const uint16_t *x, size_t n, cudaStream_t s) {
    if (n) to_keys_bf16<<<blocks_for(n), kBlock, 0, s>>>(keys, x, n);
    return (int)cudaGetLastError();
}
int nccl_max_from_keys_bf16(uint16_t *x, const uint32_t *keys, size_t n, cudaStream_t s) {
    if (n) from_keys_bf16<<<blocks_for(n), kBlock, 0, s>>>(x, keys, n);
    return (int)cudaGetLastError();
}

}  // extern "C"
