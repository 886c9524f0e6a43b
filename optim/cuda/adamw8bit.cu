// 8-bit AdamW and its state codec on device ranges (include/optim.h;
// optim/adamw8bit.c and optim/adamw8bit_state.c are the reference). One
// CUDA block of 256 threads per quantization block, one thread per element:
// dequantize, the fp32 step (adamw8bit.c's moments_block), the block's
// absmax by a max-reduction in shared memory (a max is the same in any
// order: the CPU's value), then each thread quantizes its own element with
// the CPU's search (optim_device.h). Codes, absmax, w and the bf16 params
// are the CPU's bits.
#include <climits>

#include "optim_device.h"

namespace {

constexpr unsigned kBlock = kQuantBlock;

// The max over the block's threads of each one's r1[t] and r2[t] (signed
// int32; the caller fills r1, r2 and then calls this from every thread).
// Leaves the maxima in r1[0], r2[0], visible to every thread on return.
__device__ void block_max2(int32_t *r1, int32_t *r2) {
    const unsigned t = threadIdx.x;
    __syncthreads();
    for (unsigned s = kBlock / 2; s > 0; s >>= 1) {
        if (t < s) {
            r1[t] = r1[t + s] > r1[t] ? r1[t + s] : r1[t];
            r2[t] = r2[t + s] > r2[t] ? r2[t + s] : r2[t];
        }
        __syncthreads();
    }
}

__global__ void __launch_bounds__(kBlock)
    adamw8bit_kernel(const cuda_k_adam_consts k, size_t n, float *w, uint8_t *q1, uint8_t *q2, float *absmax1,
                     float *absmax2, const __grid_constant__ cuda_k_map map_s_in,
                     const __grid_constant__ cuda_k_map map_u_in, uint8_t zero_s, uint8_t zero_u, const void *grad,
                     int grad_bf16, const cuda_k_writeback out) {
    __shared__ float map_s[kBlock], map_u[kBlock];
    __shared__ int32_t r1[kBlock], r2[kBlock];
    const unsigned t = threadIdx.x;
    const size_t b = blockIdx.x, i = b * kBlock + t;
    const bool live = t < dev_block_len(n, b);
    map_s[t] = map_s_in.code[t];
    map_u[t] = map_u_in.code[t];
    __syncthreads();
    float mi = 0.0f, vi = 0.0f;
    int32_t max1 = 0, max2 = 0;
    if (live) {
        const float g = dev_grad(grad, grad_bf16, i, k.grad_scale);
        // dequantize (qmap_dequantize: map[q] * absmax); absmax1[b], absmax2[b]
        // are read here, before block_max2's barriers, and written after them
        const float m0 = map_s[q1[i]] * absmax1[b];
        const float v0 = map_u[q2[i]] * absmax2[b];
        // moments_block, element i
        const bool ok = isfinite(g);
        mi = ok ? k.b1 * m0 + (1.0f - k.b1) * g : 0.0f;
        vi = ok ? k.b2 * v0 + (1.0f - k.b2) * g * g : 0.0f;
        const int32_t am = (int32_t)(__float_as_uint(mi) & 0x7fffffffu);
        const int32_t av = (int32_t)(__float_as_uint(vi) & 0x7fffffffu);
        const int32_t sv = (int32_t)__float_as_uint(vi);
        max1 = am > (int32_t)0x7f800000 ? 0 : am;  // |m| on the bits, NaN as 0
        max2 = av > (int32_t)0x7f800000 ? 0 : sv;  // v on the bits, NaN as 0 (a negative v loses to +0)
        const float wi = w[i] * k.decay - k.step_size * mi / (sqrtf(vi) * k.isb + k.eps);
        const float wn = ok ? wi : w[i];
        w[i] = wn;
        dev_write_param(out, i, wn);
    }
    r1[t] = max1;
    r2[t] = max2;
    block_max2(r1, r2);
    const float a1 = __int_as_float(r1[0]), a2 = __int_as_float(r2[0]);
    if (live) {
        q1[i] = dev_quantize_one(map_s, a1, mi, true, zero_s);
        q2[i] = dev_quantize_one(map_u, a2, vi, false, zero_u);
    }
    if (t == 0) {
        absmax1[b] = a1;
        absmax2[b] = a2;
    }
}

// adamw8bit_state.c's dequantize: out[i] = map[q[i]] * absmax[i / 256].
__global__ void __launch_bounds__(kBlock)
    dequantize_kernel(const __grid_constant__ cuda_k_map map_in, const uint8_t *q, const float *absmax, size_t n,
                      float *out) {
    __shared__ float map[kBlock];
    const unsigned t = threadIdx.x;
    const size_t b = blockIdx.x, i = b * kBlock + t;
    map[t] = map_in.code[t];
    __syncthreads();
    if (t < dev_block_len(n, b)) out[i] = map[q[i]] * absmax[b];
}

// adamw8bit_state.c's quantize: absmax = the largest |x| of the block (NaN
// skipped: its bits count as 0; fabsf's bits order like the values), the
// code of x / absmax, or of 0 when absmax is 0; no sign fix.
__global__ void __launch_bounds__(kBlock)
    quantize_kernel(const __grid_constant__ cuda_k_map map_in, const float *x, size_t n, uint8_t *q,
                    float *absmax) {
    __shared__ float map[kBlock];
    __shared__ int32_t r1[kBlock], r2[kBlock];
    const unsigned t = threadIdx.x;
    const size_t b = blockIdx.x, i = b * kBlock + t;
    const bool live = t < dev_block_len(n, b);
    map[t] = map_in.code[t];
    const float xi = live ? x[i] : 0.0f;
    const int32_t ax = (int32_t)(__float_as_uint(xi) & 0x7fffffffu);
    r1[t] = ax > (int32_t)0x7f800000 ? 0 : ax;
    r2[t] = 0;  // block_max2 reduces two at once; the second is unused here
    block_max2(r1, r2);
    const float mx = __int_as_float(r1[0]);
    if (live) q[i] = dev_qmap_nearest(map, mx > 0.0f ? xi / mx : 0.0f);
    if (t == 0) absmax[b] = mx;
}

unsigned blocks_of(size_t n) { return (unsigned)((n + kBlock - 1) / kBlock); }
bool too_many_blocks(size_t n) { return (n + kBlock - 1) / kBlock > (size_t)INT_MAX; }

}  // namespace

extern "C" {

int cuda_k_adamw8bit(const struct cuda_k_adam_consts *k, size_t n, float *w, uint8_t *q1, uint8_t *q2, float *absmax1,
                     float *absmax2, const struct cuda_k_map *map_s, const struct cuda_k_map *map_u, uint8_t zero_s,
                     uint8_t zero_u, const void *grad, int grad_bf16, const struct cuda_k_writeback *out) {
    if (n == 0) return 0;
    if (too_many_blocks(n)) return (int)cudaErrorInvalidValue;
    adamw8bit_kernel<<<blocks_of(n), kBlock>>>(*k, n, w, q1, q2, absmax1, absmax2, *map_s, *map_u, zero_s, zero_u,
                                              grad, grad_bf16, *out);
    return (int)cudaGetLastError();
}

int cuda_k_dequantize8(const struct cuda_k_map *map, const uint8_t *q, const float *absmax, size_t n, float *out) {
    if (n == 0) return 0;
    if (too_many_blocks(n)) return (int)cudaErrorInvalidValue;
    dequantize_kernel<<<blocks_of(n), kBlock>>>(*map, q, absmax, n, out);
    return (int)cudaGetLastError();
}

int cuda_k_quantize8(const struct cuda_k_map *map, const float *x, size_t n, uint8_t *q, float *absmax) {
    if (n == 0) return 0;
    if (too_many_blocks(n)) return (int)cudaErrorInvalidValue;
    quantize_kernel<<<blocks_of(n), kBlock>>>(*map, x, n, q, absmax);
    return (int)cudaGetLastError();
}

}  // extern "C"
