// AdamW on a device range (include/optim.h; optim/adamw.c is the
// reference): one thread per element, the CPU's expressions in the CPU's
// order on the constants it computed on the host (optim_kernels.h), so w, m,
// v and the bf16 params are the CPU's bits.
#include "optim_device.h"

namespace {

__global__ void adamw_kernel(const cuda_k_adam_consts k, size_t n, float *w, float *m, float *v, const void *grad,
                             int grad_bf16, const cuda_k_writeback out) {
    OPTIM_GRID_STRIDE(i, n) {
        const float g = dev_grad(grad, grad_bf16, i, k.grad_scale);
        // adamw.c's adamw_element
        const float mi = k.b1 * m[i] + (1.0f - k.b1) * g;
        const float vi = k.b2 * v[i] + (1.0f - k.b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        const float wi = w[i] * k.decay - k.step_size * mi / (sqrtf(vi) * k.isb + k.eps);
        w[i] = wi;
        dev_write_param(out, i, wi);
    }
}

}  // namespace

extern "C" int cuda_k_adamw(const struct cuda_k_adam_consts *k, size_t n, float *w, float *m, float *v, const void *grad,
                            int grad_bf16, const struct cuda_k_writeback *out) {
    adamw_kernel<<<optim_blocks(n), OPTIM_K_BLOCK>>>(*k, n, w, m, v, grad, grad_bf16, *out);
    return (int)cudaGetLastError();
}
