// The bf16 data path's layer GEMMs on the device (include/layers.h:
// matmul_forward_mixed, matmul_backward_mixed), which
// model/dispatch.c calls on device memory; only --gpu_path v2 makes
// the model call them there (model/gpt_acts.c: acts_direct). Compiled, not
// run on a GPU.
//
// Operands as layers.h's struct operand gives them: bf16 read as it is
// (the saved stores, the bf16 activation gradients), fp32 rounded once per
// call to nearest even into a pool temporary (the weights: the engine
// hands a GPU fp32 working copies, as v1's matmul.cu rounds them). Output
// (act_out) fp32, or bf16 where its consumer reads bf16 (qkv's store, the
// FC features' gradient): cuBLASLt writes D in bf16 from the fp32
// accumulator (plus the fp32 bias), rounded once, the CPU's rounding
// point. Every GEMM goes through cuBLASLt with the descriptor, layouts and
// algorithm cached per shape (matmul_lt_cached.h) in the run's kernel
// context; the forward's bias in the BIAS epilogue, dbias in the dweight
// GEMM's BGRADB epilogue from the same bf16 dout (into a pool partial,
// then added: dbias accumulates), as v1's matmul.cu does. Where cuBLASLt
// declines (an operand not 16-byte aligned, no algorithm), the GEMM runs
// on cublasGemmEx into fp32 with the bias or its column sums as passes of
// their own and, for a bf16 output, one narrowing pass: the same rounding
// points. FLOPs and GEMM time counted as matmul.cu counts them.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>

#include "../column_sum.h"
#include "../cublas_check.h"
#include "../cuda_check.h"
#include "../kernel_context.h"
#include "act_out_device.h"
#include "../../bufops_ops.h"
#include "../../kernel_timing.h"
#include "../layers_cuda.h"
#include "matmul_lt_cached.h"

namespace {

constexpr unsigned kBlock = 256;
constexpr int64_t kMaxDim = 2147483647;  // cublasGemmEx's int sizes (MATMUL_MAX_DIM)

__global__ void bias_rows(float *out, const float *bias, int64_t N, int64_t OC) {
    CUDA_GRID_STRIDE(i, N * OC) out[i] += bias[i % OC];
}

__global__ void add_into(float *out, const float *part, int64_t n) {
    CUDA_GRID_STRIDE(i, n) out[i] += part[i];
}

// dbias's term at (row i, column o): the bf16 dout both GEMMs read.
struct dbias_bf16_term {
    const __nv_bfloat16 *dout;
    int64_t OC;
    __device__ float operator()(int64_t i, int64_t o) const { return __bfloat162float(dout[i * OC + o]); }
};

// A GEMM operand in bf16: the caller's (a bf16 operand) or a rounded pool
// copy of an fp32 one (owned).
struct bf16_in {
    const __nv_bfloat16 *p;
    __nv_bfloat16 *owned;
};

bf16_in bf16_in_of(struct operand x, int64_t n, const char *what) {
    if (operand_is_bf16(x)) return bf16_in{(const __nv_bfloat16 *)operand_as_bf16(x, what), nullptr};
    if (n <= 0) return bf16_in{nullptr, nullptr};
    __nv_bfloat16 *p = nullptr;
    cuda_check(cudaMallocAsync((void **)&p, (size_t)n * sizeof *p, 0), what);
    buf_narrow_cuda((bf16 *)p, operand_as_f32(x, what), (size_t)n); /* rounded to nearest even (bufops.h) */
    return bf16_in{p, p};
}

void release(bf16_in x, const char *what) {
    if (x.owned) cuda_check(cudaFreeAsync(x.owned, 0), what);
}

void *pool_alloc(size_t bytes, const char *what) {
    void *p = nullptr;
    cuda_check(cudaMallocAsync(&p, bytes, 0), what);
    return p;
}

void check_dims(const char *kernel, int64_t N, int64_t C, int64_t OC, const struct exec_ctx *fc) {
    if (!fc->kernels) {
        fprintf(stderr, "error: %s: bf16 operands need the run's kernel context (kernel_context.h)\n", kernel);
        exit(EXIT_FAILURE);
    }
    if (N >= 0 && N <= kMaxDim && C >= 1 && C <= kMaxDim && OC >= 1 && OC <= kMaxDim) return;
    fprintf(stderr, "%s: shape N %lld x C %lld -> OC %lld: on the device each must be in 1..%lld (N from 0)\n", kernel,
            (long long)N, (long long)C, (long long)OC, (long long)kMaxDim);
    exit(1);
}

// The run's plans (the kernel context owns them; made by the first call).
struct lt_cache *plans_of(struct kernel_context *kc) {
    if (!kc->lt_plans) kc->lt_plans = calloc(1, sizeof(struct lt_cache));
    if (!kc->lt_plans) {
        fprintf(stderr, "error: the v2 GEMMs' plan cache: out of host memory\n");
        exit(EXIT_FAILURE);
    }
    return (struct lt_cache *)kc->lt_plans;
}

// One GEMM through the cached cuBLASLt plans, counted and timed; false,
// nothing done or counted, where it cannot run.
bool lt_counted(struct exec_ctx *fc, const struct lt_call &c, const char *what) {
    struct kernel_span t = kernel_span_begin(fc, true);
    bool ran = lt_matmul_cached(plans_of(fc->kernels), fc->kernels, &c);
    if (ran) cuda_done(what);
    kernel_span_end_gemm(fc, t);
    if (ran) fc->gemm += 2.0 * (double)c.m * (double)c.n * (double)c.k;
    return ran;
}

// The fall-back: row-major D (m, n) fp32 = op(A) op(B) + beta D on
// cublasGemmEx (bf16 operands, fp32 accumulation), counted and timed.
void gemm_ex_counted(struct exec_ctx *fc, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                     const __nv_bfloat16 *a, int64_t lda, const __nv_bfloat16 *b, int64_t ldb, float beta, float *d,
                     int64_t ldd) {
    struct kernel_span t = kernel_span_begin(fc, true);
    if (m > 0 && n > 0) {
        const float alpha = 1.0f;
        cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
        blas_check(cublasGemmEx((cublasHandle_t)fc->kernels->cublas, op_b, op_a, (int)n, (int)m, (int)k, &alpha, b,
                                CUDA_R_16BF, (int)ldb, a, CUDA_R_16BF, (int)lda, &beta, d, CUDA_R_32F, (int)ldd,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (bf16, v2)");
        cuda_done("matmul_mixed (fall-back GEMM)");
    }
    kernel_span_end_gemm(fc, t);
    fc->gemm += 2.0 * (double)m * (double)n * (double)k;
}

// D (m, n) = A op(B) (+ bias) into an act_out, overwritten: cuBLASLt with
// the bias in its epilogue and a bf16 or fp32 D, else the fall-back into
// fp32 (a pool copy for a bf16 D), the bias pass, and the narrowing.
void gemm_into(struct exec_ctx *fc, struct act_out out, bool trans_b, int64_t m, int64_t n, int64_t k,
               const __nv_bfloat16 *a, int64_t lda, const __nv_bfloat16 *b, int64_t ldb, const float *bias,
               const char *what) {
    if (m <= 0) return;
    const bool b16 = act_out_is_bf16(out);
    lt_call c = {bias ? (int)LT_BIAS : (int)LT_PLAIN, false, trans_b, b16, m, n, k, lda, ldb, n, a, b,
                 0.0f, out.data, (float *)bias};
    if (lt_counted(fc, c, what)) return;
    float *f = b16 ? (float *)pool_alloc((size_t)(m * n) * sizeof(float), what) : act_out_as_f32(out, what);
    gemm_ex_counted(fc, false, trans_b, m, n, k, a, lda, b, ldb, 0.0f, f, n);
    if (bias) bias_rows<<<cuda_blocks(m * n, kBlock), kBlock>>>(f, bias, m, n);
    if (b16) {
        buf_narrow_cuda(act_out_as_bf16(out, what), f, (size_t)(m * n));
        cuda_check(cudaFreeAsync(f, 0), what);
    }
    cuda_done(what);
}

}  // namespace

extern "C" {

void matmul_forward_mixed_cuda(struct act_out out, struct operand inp, struct operand weight, const float *bias,
                               int64_t N, int64_t C, int64_t OC, struct exec_ctx *fc) {
    const char *what = "matmul_forward_mixed";
    check_dims(what, N, C, OC, fc);
    v2_plain_out(out, what);
    bf16_in x = bf16_in_of(inp, N * C, what), w = bf16_in_of(weight, OC * C, what);
    gemm_into(fc, out, true, N, OC, C, x.p, C, w.p, C, bias, what);
    if (bias) fc->other += (double)N * OC;
    release(w, what);
    release(x, what);
}

void matmul_backward_mixed_cuda(struct act_out dinp, float *dweight, float *dbias, struct operand dout,
                                struct operand inp, struct operand weight, int64_t N, int64_t C, int64_t OC,
                                struct exec_ctx *fc) {
    const char *what = "matmul_backward_mixed";
    check_dims(what, N, C, OC, fc);
    v2_plain_out(dinp, what);
    bf16_in d = bf16_in_of(dout, N * OC, what), x = bf16_in_of(inp, N * C, what), w = bf16_in_of(weight, OC * C, what);
    if (dinp.data) gemm_into(fc, dinp, false, N, C, OC, d.p, OC, w.p, C, nullptr, what);
    if (dweight && N > 0) { /* N is dweight's reduction: beta 1 accumulates */
        float *part = dbias ? (float *)pool_alloc((size_t)OC * sizeof(float), what) : nullptr;
        lt_call c = {dbias ? (int)LT_BIAS_GRAD : (int)LT_PLAIN, true, false, false, OC, C, N, OC, C, C, d.p, x.p,
                     1.0f, dweight, part};
        if (lt_counted(fc, c, what)) {
            if (dbias) add_into<<<cuda_blocks(OC, kBlock), kBlock>>>(dbias, part, OC);
        } else {
            gemm_ex_counted(fc, true, false, OC, C, N, d.p, OC, x.p, C, 1.0f, dweight, C);
            if (dbias) column_sum(dbias, N, OC, dbias_bf16_term{d.p, OC}, what);
        }
        cuda_done(what);
        if (part) cuda_check(cudaFreeAsync(part, 0), what);
    }
    if (dbias) fc->other += (double)N * OC;
    release(w, what);
    release(x, what);
    release(d, what);
}

}  // extern "C"
