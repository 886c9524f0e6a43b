// SGD with momentum on a device range (include/optim.h; optim/sgd.c is the
// reference): one thread per element, sgd.c's expressions in its order, so
// w, the buffer and the bf16 params are the CPU's bits. On the first step
// the buffer is written without being read (it may hold anything).
#include "optim_device.h"

namespace {

__global__ void sgd_kernel(const cuda_k_sgd_consts k, size_t n, float *w, float *buf, const void *grad, int grad_bf16,
                           const cuda_k_writeback out) {
    OPTIM_GRID_STRIDE(i, n) {
        const float g = dev_grad(grad, grad_bf16, i, k.grad_scale);
        // sgd.c's sgd_element
        const float gi = g + k.weight_decay * w[i];
        const float b = k.first_step ? gi : k.momentum * buf[i] + gi;
        buf[i] = b;
        const float upd = k.nesterov ? gi + k.momentum * b : b;
        const float wi = w[i] - k.lr * upd;
        w[i] = wi;
        dev_write_param(out, i, wi);
    }
}

}  // namespace

extern "C" int cuda_k_sgd(const struct cuda_k_sgd_consts *k, size_t n, float *w, float *buf, const void *grad, int grad_bf16,
                          const struct cuda_k_writeback *out) {
    sgd_kernel<<<optim_blocks(n), OPTIM_K_BLOCK>>>(*k, n, w, buf, grad, grad_bf16, *out);
    return (int)cudaGetLastError();
}
