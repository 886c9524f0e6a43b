// LayerNorm on the device (layers.h; model/cpu/layernorm.c): eps 1e-5,
// statistics in fp32, mean then variance about the mean (two passes).
// A row's sums are one block's fixed tree (block_reduce.h), not the CPU's
// left-to-right loop: mean, rstd and everything after them differ from
// the CPU's by rounding only (tests/cuda/test_layers_cuda.c: bounds).
// The weight and bias gradients are one thread per channel summing the
// rows in the CPU's order, then added (+=): the CPU's bits given the same
// inputs, mean and rstd, and no atomics.
#include "block_reduce.h"
#include "column_sum.h"
#include "cuda_check.h"
#include "layers_cuda.h"

namespace {

__global__ void ln_fwd(float *out, float *mean, float *rstd, const float *inp, const float *weight, const float *bias,
                       int64_t N, int64_t C) {
    __shared__ float s[LAYER_BLOCK];
    const float eps = 1e-5f;
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
        const float *x = inp + i * C;
        float part = 0.0f;
        for (int64_t c = threadIdx.x; c < C; c += LAYER_BLOCK) part += x[c];
        float m = block_sum_f32(part, s) / (float)C;
        part = 0.0f;
        for (int64_t c = threadIdx.x; c < C; c += LAYER_BLOCK) part += (x[c] - m) * (x[c] - m);
        float v = block_sum_f32(part, s) / (float)C;
        float r = 1.0f / sqrtf(v + eps);
        float *o = out + i * C;
        for (int64_t c = threadIdx.x; c < C; c += LAYER_BLOCK) o[c] = (x[c] - m) * r * weight[c] + bias[c];
        if (threadIdx.x == 0) {
            mean[i] = m;
            rstd[i] = r;
        }
    }
}

// dx += rstd (w dy - mean(w dy) - xhat mean(w dy xhat)), a block per row.
__global__ void ln_bwd_inp(float *dinp, const float *dout, const float *inp, const float *weight, const float *mean,
                           const float *rstd, int64_t N, int64_t C) {
    __shared__ float s[LAYER_BLOCK];
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
        const float *x = inp + i * C, *dy = dout + i * C;
        float m = mean[i], r = rstd[i];
        float p_mean = 0.0f, p_xhat = 0.0f;
        for (int64_t c = threadIdx.x; c < C; c += LAYER_BLOCK) {
            float xhat = (x[c] - m) * r;
            float dnorm = weight[c] * dy[c];
            p_mean += dnorm;
            p_xhat += dnorm * xhat;
        }
        float dnorm_mean = block_sum_f32(p_mean, s) / (float)C;
        float dnorm_xhat_mean = block_sum_f32(p_xhat, s) / (float)C;
        float *dx = dinp + i * C;
        for (int64_t c = threadIdx.x; c < C; c += LAYER_BLOCK) {
            float xhat = (x[c] - m) * r;
            float dnorm = weight[c] * dy[c];
            dx[c] += r * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean);
        }
    }
}

// The terms of dweight and dbias at (row i, channel c), summed over the
// rows by column_sum (column_sum.h: chunked, a fixed order).
struct ln_dweight_term {
    const float *dout, *inp, *mean, *rstd;
    int64_t C;
    __device__ float operator()(int64_t i, int64_t c) const {
        return (inp[i * C + c] - mean[i]) * rstd[i] * dout[i * C + c];
    }
};

struct ln_dbias_term {
    const float *dout;
    int64_t C;
    __device__ float operator()(int64_t i, int64_t c) const { return dout[i * C + c]; }
};

unsigned row_blocks(int64_t N) { return (unsigned)(N < 65535 ? N : 65535); }

}  // namespace

extern "C" {

void layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                            const float *bias, int64_t N, int64_t C, struct exec_ctx *fc) {
    if (N > 0 && C > 0) {
        ln_fwd<<<row_blocks(N), LAYER_BLOCK>>>(out, mean, rstd, inp, weight, bias, N, C);
        cuda_done("layernorm_forward");
    }
    fc->other += (double)LN_FLOPS_FWD_PER_ELEM * N * C;
}

void layernorm_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, const float *mean, const float *rstd, int64_t N, int64_t C,
                             struct exec_ctx *fc) {
    if (N > 0 && C > 0) {
        ln_bwd_inp<<<row_blocks(N), LAYER_BLOCK>>>(dinp, dout, inp, weight, mean, rstd, N, C);
        column_sum(dweight, N, C, ln_dweight_term{dout, inp, mean, rstd, C}, "layernorm_backward (dweight)");
        column_sum(dbias, N, C, ln_dbias_term{dout, C}, "layernorm_backward (dbias)");
        cuda_done("layernorm_backward");
    }
    fc->other += (double)LN_FLOPS_BWD_PER_ELEM * N * C;
}

}  // extern "C"
