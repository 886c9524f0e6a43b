// The 8-bit rules with one state, sgd8bit and lion8bit, on device ranges
// (include/optim.h; optim/blockwise8.c's blockwise8_update_one_state with
// sgd8bit.c's and lion8bit.c's steps are the reference). As adamw8bit.cu:
// one CUDA block per quantization block, one thread per element:
// dequantize, the rule's fp32 step (a NaN/Inf gradient: state 0, weight
// kept), the block's absmax by a max-reduction on the bits (the same in
// any order), the code with the sign fix. Codes, absmax, w and the bf16
// params are the CPU's bits.
#include <climits>

#include "optim_device.h"

namespace {

constexpr unsigned kBlock = kQuantBlock;

// sgd_rule.h's sgd_element on (w, buf).
struct SgdStep {
    cuda_k_sgd_consts k;
    __device__ void operator()(float g, float &w, float &buf) const {
        const float gi = g + k.weight_decay * w;
        const float b = k.first_step ? gi : k.momentum * buf + gi;
        buf = b;
        const float upd = k.nesterov ? gi + k.momentum * b : b;
        w = w - k.lr * upd;
    }
    __device__ float grad_scale() const { return k.grad_scale; }
};

// lion_rule.h's lion_element on (w, m).
struct LionStep {
    cuda_k_lion_consts k;
    __device__ void operator()(float g, float &w, float &m) const {
        const float c = k.b1 * m + (1.0f - k.b1) * g;
        const float s = c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : c;
        const float wi = w * k.decay - k.lr * s;
        m = k.b2 * m + (1.0f - k.b2) * g;
        w = wi;
    }
    __device__ float grad_scale() const { return k.grad_scale; }
};

// The max over the block's threads of r[t]; in r[0] for every thread on return.
__device__ void block_max(int32_t *r) {
    const unsigned t = threadIdx.x;
    __syncthreads();
    for (unsigned s = kBlock / 2; s > 0; s >>= 1) {
        if (t < s) r[t] = r[t + s] > r[t] ? r[t + s] : r[t];
        __syncthreads();
    }
}

template <typename Step>
__global__ void __launch_bounds__(kBlock)
    onestate8bit_kernel(const Step step, size_t n, float *w, uint8_t *q, float *absmax,
                        const __grid_constant__ cuda_k_map map_in, uint8_t zero, const void *grad, int grad_bf16,
                        const cuda_k_writeback out) {
    __shared__ float map[kBlock];
    __shared__ int32_t r[kBlock];
    const unsigned t = threadIdx.x;
    const size_t b = blockIdx.x, i = b * kBlock + t;
    const bool live = t < dev_block_len(n, b);
    map[t] = map_in.code[t];
    __syncthreads();
    float s = 0.0f;
    int32_t mx = 0;
    if (live) {
        const float g = dev_grad(grad, grad_bf16, i, step.grad_scale());
        // absmax[b] is read here, before block_max's barriers, and written after them
        const float s0 = map[q[i]] * absmax[b];
        float wi = w[i], si = s0;
        step(g, wi, si);
        const bool ok = isfinite(g);
        s = ok ? si : 0.0f;
        const float wn = ok ? wi : w[i];
        const int32_t a = (int32_t)(__float_as_uint(s) & 0x7fffffffu);
        mx = a > (int32_t)0x7f800000 ? 0 : a;  // |s| on the bits, NaN as 0
        w[i] = wn;
        dev_write_param(out, i, wn);
    }
    r[t] = mx;
    block_max(r);
    const float a = __int_as_float(r[0]);
    if (live) q[i] = dev_quantize_one(map, a, s, true, zero);
    if (t == 0) absmax[b] = a;
}

unsigned blocks_of(size_t n) { return (unsigned)((n + kBlock - 1) / kBlock); }
bool too_many_blocks(size_t n) { return (n + kBlock - 1) / kBlock > (size_t)INT_MAX; }

template <typename Step>
int launch(const Step &step, size_t n, float *w, uint8_t *q, float *absmax, const cuda_k_map *map, uint8_t zero,
           const void *grad, int grad_bf16, const cuda_k_writeback *out) {
    if (n == 0) return 0;
    if (too_many_blocks(n)) return (int)cudaErrorInvalidValue;
    onestate8bit_kernel<<<blocks_of(n), kBlock>>>(step, n, w, q, absmax, *map, zero, grad, grad_bf16, *out);
    return (int)cudaGetLastError();
}

}  // namespace

extern "C" {

int cuda_k_sgd8bit(const struct cuda_k_sgd_consts *k, size_t n, float *w, uint8_t *q, float *absmax,
                   const struct cuda_k_map *map, uint8_t zero, const void *grad, int grad_bf16,
                   const struct cuda_k_writeback *out) {
    return launch(SgdStep{*k}, n, w, q, absmax, map, zero, grad, grad_bf16, out);
}

int cuda_k_lion8bit(const struct cuda_k_lion_consts *k, size_t n, float *w, uint8_t *q, float *absmax,
                    const struct cuda_k_map *map, uint8_t zero, const void *grad, int grad_bf16,
                    const struct cuda_k_writeback *out) {
    return launch(LionStep{*k}, n, w, q, absmax, map, zero, grad, grad_bf16, out);
}

}  // extern "C"
