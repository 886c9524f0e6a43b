// The plain causal attention on the device (layers.h; model/cpu/attention.c,
// whose semantics these are): the (T, T) probabilities of every head are
// materialised in att, exact zeros in the masked upper triangle; out and
// dqkv are overwritten. The same six products as the CPU, over the full
// T x T squares (the masked half is issued work, counted as the CPU counts
// it), as cuBLAS strided-batched SGEMMs: fp32 operands, fp32 compute
// (CUBLAS_DEFAULT_MATH, no TF32), as matmul.cu.
//   forward   S = q k^T / sqrt(hs)    P = causal_softmax(S)    out = P v
//   backward  dP = dout v^T   dv = P^T dout   dS = P (dP - rowsum(P dP))
//             dq = dS k / sqrt(hs)   dk = dS^T q / sqrt(hs)
// A head's q, k, v are hs columns of a 3C-wide row of qkv, so the heads of
// one batch row b sit hs floats apart: one strided-batched call covers the
// heads of one b (head h of b at q + h hs, its square at att + (b NH + h) T^2),
// and the B batch rows are a loop.
//
// The backward's dP/dS squares live in the caller's scratch, whose size is
// attention_backward_scratch(B, T, NH) floats (model/cpu/attention.c, the
// one definition in both builds: min(OpenMP threads, B NH) squares). Here
// the same count of squares is the number of heads processed at once: the
// (b, h) pairs go in groups of at most that many heads of one b, so the
// interface (and the caller's buffer) is the CPU's. With one OpenMP thread
// that is one head per call: correct, slow; a device context with its own
// workspace comes with wiring the engine (docs/GPU.md).
//
// The softmax rows are one warp each, fp32, max-subtracted, CUDA's expf
// (this file is compiled with --fmad=false, as gcc -std=c17 contracts no
// FMA); the row's max and sum are a fixed shuffle tree, not the CPU's left
// to right loop, so P and everything after it differ from the CPU's by
// rounding only (tests/cuda/test_attention_cuda.c: bounds). One cuBLAS
// handle per attention call without a run's context (no global state).
// Each call returns with its kernels queued on the default stream
// (model/kernel_timing.h), not finished.
#include <cublas_v2.h>
#include <math.h>
#include <time.h>

#include "cublas_check.h"
#include "cuda_check.h"
#include "kernel_context.h"
#include "../kernel_timing.h"
#include "layers_cuda.h"

namespace {

// As model/cpu/attention.c counts, per causal entry: softmax forward (max,
// subtract and exp, sum, scale), backward (the dot product, P (dP - dot)).
enum { SOFTMAX_FORWARD_FLOPS = 5, SOFTMAX_BACKWARD_FLOPS = 4 };

constexpr unsigned kWarp = 32;
constexpr unsigned kRowsPerBlock = 8;  // warps per block of the softmax kernels
constexpr int64_t kMaxDim = 2147483647;  // cuBLAS sizes are int (MATMUL_MAX_DIM)

// The products' sizes and leading dimensions (T, hs, C, 3C) and the head
// count of one call go to cuBLAS as int.
void check_shape(const char *kernel, int64_t B, int64_t T, int64_t C, int64_t NH) {
    if (B >= 0 && T >= 0 && C >= 1 && NH >= 1 && C % NH == 0 && T <= kMaxDim && 3 * C <= kMaxDim) return;
    fprintf(stderr,
            "%s: shape B %lld T %lld C %lld NH %lld cannot go through cuBLAS: B, T >= 0, C >= 1, NH >= 1 dividing C, "
            "T and 3C at most %lld\n",
            kernel, (long long)B, (long long)T, (long long)C, (long long)NH, (long long)kMaxDim);
    exit(1);
}

// The strided-batched form of gemm_counted (layers.h): for i < batch,
// row-major C_i (m, n) = alpha op(A_i) op(B_i) + beta C_i, X_i = x + i sx.
// Column-major cuBLAS computes C^T = op(B)^T op(A)^T: operands swapped, the
// same leading dimensions (matmul.cu). beta 0: C is not read (it may hold
// anything). 2 m n k per product into fc->attention, its time (CUDA
// events: model/kernel_timing.h) into fc->gemm_seconds.
struct batched_gemm {
    cublasHandle_t h;
    struct exec_ctx *fc;

    void operator()(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                    int64_t sa, const float *b, int64_t ldb, int64_t sb, float *c, int64_t ldc, int64_t sc,
                    int64_t batch) const {
        const float beta = 0.0f;
        struct kernel_span t = kernel_span_begin(fc, true);
        blas_check(cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                             (int)n, (int)m, (int)k, &alpha, b, (int)ldb, (long long)sb, a, (int)lda,
                                             (long long)sa, &beta, c, (int)ldc, (long long)sc, (int)batch),
                   "cublasSgemmStridedBatched");
        cuda_done("attention (GEMM)");
        kernel_span_end_gemm(fc, t);
        fc->attention += 2.0 * (double)m * (double)n * (double)k * (double)batch;
    }
};

cublasHandle_t handle_open() {
    cublasHandle_t h;
    blas_check(cublasCreate(&h), "cublasCreate");
    blas_check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    return h;
}

// Sum and max over the 32 lanes of a warp (shfl_down tree, then lane 0's
// result to every lane): a fixed order, so a row's result is the same on
// every run. The max as the CPU takes it (v > m ? v : m): a NaN is skipped.
__device__ __forceinline__ float warp_sum(float v) {
    for (unsigned w = kWarp / 2; w > 0; w /= 2) v += __shfl_down_sync(0xffffffffu, v, w);
    return __shfl_sync(0xffffffffu, v, 0);
}

__device__ __forceinline__ float warp_max(float v) {
    for (unsigned w = kWarp / 2; w > 0; w /= 2) {
        float o = __shfl_down_sync(0xffffffffu, v, w);
        v = o > v ? o : v;
    }
    return __shfl_sync(0xffffffffu, v, 0);
}

// rows consecutive rows of T x T squares, one warp per row; row r is row
// t = r % T of its square: columns 0..t causal, t+1.. masked. A lane reads
// and writes only its own columns (j = lane mod 32), so the warp needs no
// barrier beyond the shuffles; every lane of a warp walks the same rows.
// In place: the scores S become the probabilities P; masked entries 0.
__global__ void causal_softmax_forward(float *p, int64_t rows, int64_t T) {
    const int64_t warp0 = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / kWarp;
    const int64_t warps = (int64_t)gridDim.x * blockDim.x / kWarp;
    const int64_t lane = threadIdx.x % kWarp;
    for (int64_t r = warp0; r < rows; r += warps) {
        float *row = p + r * T;
        const int64_t t = r % T;
        float m = -INFINITY;
        for (int64_t j = lane; j <= t; j += kWarp) m = row[j] > m ? row[j] : m;
        m = warp_max(m);
        float s = 0.0f;
        for (int64_t j = lane; j <= t; j += kWarp) {
            row[j] = expf(row[j] - m);
            s += row[j];
        }
        const float inv = 1.0f / warp_sum(s);
        for (int64_t j = lane; j <= t; j += kWarp) row[j] *= inv;
        for (int64_t j = t + 1 + lane; j < T; j += kWarp) row[j] = 0.0f;
    }
}

// d holds dL/dP on entry and dL/dS on exit, dS = P (dP - sum_j P_j dP_j),
// row by row as above; masked entries exact zeros (not P dP there: 0 times
// an infinite dP is NaN).
__global__ void causal_softmax_backward(float *d, const float *p, int64_t rows, int64_t T) {
    const int64_t warp0 = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / kWarp;
    const int64_t warps = (int64_t)gridDim.x * blockDim.x / kWarp;
    const int64_t lane = threadIdx.x % kWarp;
    for (int64_t r = warp0; r < rows; r += warps) {
        float *row = d + r * T;
        const float *pr = p + r * T;
        const int64_t t = r % T;
        float dot = 0.0f;
        for (int64_t j = lane; j <= t; j += kWarp) dot += pr[j] * row[j];
        dot = warp_sum(dot);
        for (int64_t j = lane; j <= t; j += kWarp) row[j] = pr[j] * (row[j] - dot);
        for (int64_t j = t + 1 + lane; j < T; j += kWarp) row[j] = 0.0f;
    }
}

unsigned row_blocks(int64_t rows) {
    int64_t b = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

}  // namespace

extern "C" {

void attention_forward_cuda(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                            struct exec_ctx *fc) {
    check_shape("attention_forward", B, T, C, NH);
    const int64_t hs = C / NH, C3 = 3 * C, TT = T * T;
    const float scale = 1.0f / sqrtf((float)hs);
    if (B * T > 0) {
        const batched_gemm gemm{fc->kernels ? (cublasHandle_t)fc->kernels->cublas : handle_open(), fc};
        for (int64_t b = 0; b < B; b++) {  // S = q k^T / sqrt(hs), the NH heads of b
            const float *q = qkv + b * T * C3, *k = q + C;
            gemm(false, true, T, T, hs, scale, q, C3, hs, k, C3, hs, att + b * NH * TT, T, TT, NH);
        }
        causal_softmax_forward<<<row_blocks(B * NH * T), kRowsPerBlock * kWarp>>>(att, B * NH * T, T);
        cuda_done("attention_forward (softmax)");
        for (int64_t b = 0; b < B; b++) {  // out = P v
            const float *v = qkv + b * T * C3 + 2 * C;
            gemm(false, false, T, hs, T, 1.0f, att + b * NH * TT, T, TT, v, C3, hs, out + b * T * C, C, hs, NH);
        }
        if (!fc->kernels) blas_check(cublasDestroy(gemm.h), "cublasDestroy");
    }
    fc->other += SOFTMAX_FORWARD_FLOPS * (double)B * NH * T * (T + 1) / 2; /* the causal entries */
}

void attention_backward_cuda(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                             int64_t B, int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc) {
    check_shape("attention_backward", B, T, C, NH);
    const int64_t hs = C / NH, C3 = 3 * C, TT = T * T;
    const float scale = 1.0f / sqrtf((float)hs);
    if (B * T > 0) {
        // The caller's scratch holds this many T x T squares (>= 1 here: B NH >= 1).
        const int64_t group = (int64_t)(attention_backward_scratch(B, T, NH) / (size_t)TT);
        const batched_gemm gemm{fc->kernels ? (cublasHandle_t)fc->kernels->cublas : handle_open(), fc};
        for (int64_t b = 0; b < B; b++) {
            for (int64_t h0 = 0; h0 < NH; h0 += group) {
                // heads h0 .. h0 + n - 1 of batch row b; head i's dP/dS square at d + i T^2
                const int64_t n = NH - h0 < group ? NH - h0 : group;
                const float *q = qkv + b * T * C3 + h0 * hs, *k = q + C, *v = q + 2 * C;
                const float *p = att + (b * NH + h0) * TT, *dy = dout + b * T * C + h0 * hs;
                float *dq = dqkv + b * T * C3 + h0 * hs, *dk = dq + C, *dv = dq + 2 * C, *d = scratch;
                gemm(false, true, T, T, hs, 1.0f, dy, C, hs, v, C3, hs, d, T, TT, n);     // dP = dout v^T
                gemm(true, false, T, hs, T, 1.0f, p, T, TT, dy, C, hs, dv, C3, hs, n);    // dv = P^T dout
                causal_softmax_backward<<<row_blocks(n * T), kRowsPerBlock * kWarp>>>(d, p, n * T, T);
                cuda_done("attention_backward (softmax)");
                gemm(false, false, T, hs, T, scale, d, T, TT, k, C3, hs, dq, C3, hs, n);  // dq = dS k / sqrt(hs)
                gemm(true, false, T, hs, T, scale, d, T, TT, q, C3, hs, dk, C3, hs, n);   // dk = dS^T q / sqrt(hs)
            }
        }
        if (!fc->kernels) blas_check(cublasDestroy(gemm.h), "cublasDestroy");
    }
    fc->other += SOFTMAX_BACKWARD_FLOPS * (double)B * NH * T * (T + 1) / 2;
}

}  // extern "C"
