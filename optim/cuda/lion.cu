// Lion on a device range (include/optim.h; optim/lion.c and lion_rule.h
// are the reference): one thread per element, lion_element's expressions in
// its order, so w, m and the bf16 params are the CPU's bits.
#include "optim_device.h"

namespace {

// lion_rule.h's lion_sign: -1, 0 or 1; NaN and zeros stay themselves.
__device__ __forceinline__ float dev_lion_sign(float c) { return c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : c; }

__global__ void lion_kernel(const cuda_k_lion_consts k, size_t n, float *w, float *m, const void *grad, int grad_bf16,
                            const cuda_k_writeback out) {
    OPTIM_GRID_STRIDE(i, n) {
        const float g = dev_grad(grad, grad_bf16, i, k.grad_scale);
        // lion_rule.h's lion_element
        const float c = k.b1 * m[i] + (1.0f - k.b1) * g;
        const float wi = w[i] * k.decay - k.lr * dev_lion_sign(c);
        m[i] = k.b2 * m[i] + (1.0f - k.b2) * g;
        w[i] = wi;
        dev_write_param(out, i, wi);
    }
}

}  // namespace

extern "C" int cuda_k_lion(const struct cuda_k_lion_consts *k, size_t n, float *w, float *m, const void *grad,
                           int grad_bf16, const struct cuda_k_writeback *out) {
    lion_kernel<<<optim_blocks(n), OPTIM_K_BLOCK>>>(*k, n, w, m, grad, grad_bf16, *out);
    return (int)cudaGetLastError();
}
