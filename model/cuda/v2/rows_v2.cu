// The X_cuda forms of the bf16 data path's row and elementwise kernels
// (include/layers.h: layernorm_forward_bf16, layernorm_backward_bf16,
// residual_forward_bf16, residual_layernorm_forward_bf16,
// gelu_backward_bf16_grads) on v2's kernels, which
// model/dispatch.c calls on device memory. Only --gpu_path v2 makes
// the model call them there (model/gpt_acts.c: acts_direct). Counted as
// the CPU counts them; the timing is the dispatch's. Compiled, not run on
// a GPU.
#include "../cuda_check.h"
#include "act_out_device.h"
#include "gelu_bf16.h"
#include "layernorm_backward.h"
#include "../layers_cuda.h"
#include "residual_layernorm.h"

extern "C" {

void layernorm_forward_bf16_cuda(bf16 *out, float *mean, float *rstd, const bf16 *inp, const float *weight,
                                 const float *bias, int64_t N, int64_t C, struct exec_ctx *fc) {
    layernorm_forward_v2(out, mean, rstd, inp, weight, bias, N, C);
    fc->other += (double)LN_FLOPS_FWD_PER_ELEM * N * C;
}

// The partials come from the stream-ordered pool, as v1's short-lived
// buffers do (model/cuda/kernel_context.cu keeps the pool at its peak).
void layernorm_backward_bf16_cuda(struct act_out dinp, float *dweight, float *dbias, const float *dout,
                                  const bf16 *inp, const float *weight, const float *mean, const float *rstd,
                                  int64_t N, int64_t C, struct exec_ctx *fc) {
    v2_plain_out(dinp, "layernorm_backward_bf16");
    if (N > 0 && C > 0) {
        float *scratch = nullptr;
        const size_t bytes = (size_t)layernorm_backward_v2_scratch(N, C) * sizeof(float);
        cuda_check(cudaMallocAsync((void **)&scratch, bytes, 0), "layernorm_backward_bf16 (partials)");
        const char *what = "layernorm_backward_bf16";
        const bool b16 = act_out_is_bf16(dinp);
        layernorm_backward_v2(b16 ? nullptr : act_out_as_f32(dinp, what), b16 ? act_out_as_bf16(dinp, what) : nullptr,
                              dweight, dbias, scratch, dout, nullptr, inp, weight, mean, rstd, N, C);
        cuda_check(cudaFreeAsync(scratch, 0), "layernorm_backward_bf16 (partials)");
    }
    fc->other += (double)LN_FLOPS_BWD_PER_ELEM * N * C;
}

void residual_forward_bf16_cuda(bf16 *out, const bf16 *a, const float *b, int64_t n, struct exec_ctx *fc) {
    residual_forward_v2(out, a, b, n);
    fc->other += (double)n;
}

void residual_layernorm_forward_bf16_cuda(bf16 *x, bf16 *out, float *mean, float *rstd, const bf16 *a, const float *b,
                                          const float *weight, const float *bias, int64_t N, int64_t C,
                                          struct exec_ctx *fc) {
    residual_layernorm_forward_v2(x, out, mean, rstd, a, b, nullptr, weight, bias, N, C);
    fc->other += (double)N * C + (double)LN_FLOPS_FWD_PER_ELEM * N * C; /* the add's and the LayerNorm's */
}

void gelu_backward_bf16_grads_cuda(bf16 *dinp, const bf16 *inp, const bf16 *dout, int64_t n,
                                   struct exec_ctx *fc) {
    gelu_backward_v2(dinp, inp, dout, n);
    fc->other += (double)GELU_FLOPS_BWD * n;
}

}  // extern "C"
