// The GEMMs on the device (layers.h; model/cpu/matmul.c) through cuBLAS,
// fp32 operands and fp32 compute (CUBLAS_DEFAULT_MATH: no TF32), since
// the engine hands the layers fp32 views. FLOPs are counted as the CPU
// counts them: 2mnk per GEMM into fc->gemm or fc->attention, its time
// (CUDA events: model/kernel_timing.h) into fc->gemm_seconds, N*OC into
// fc->other for a bias.
//
// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so each
// GEMM is cublasSgemm with the operands swapped and the same leading
// dimensions. cuBLAS takes int sizes, as cblas does: the same limits
// (MATMUL_MAX_DIM), the same row slicing of N, the same errors.
//
// The run's kernel context (kernel_context.h, reached through the flop
// counter) gives every GEMM one cuBLAS handle, and with gemm_dtype bf16
// the layer GEMMs (not the attention's) take bf16 operands with fp32
// accumulation; matmul_forward/backward round each operand once for all
// the GEMMs that read it (the backward's dout feeds two), and their bias
// rides in a cuBLASLt epilogue (matmul_lt.h): added in the forward GEMM's,
// summed from the rounded dout in the dweight GEMM's. Without a context (a
// test's counter) each GEMM makes its own handle and stays fp32, its bias
// a pass of its own.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <time.h>

#include "column_sum.h"
#include "cublas_check.h"
#include "cuda_check.h"
#include "kernel_context.h"
#include "../kernel_timing.h"
#include "layers_cuda.h"
#include "matmul_lt.h"

namespace {

constexpr unsigned kBlock = 256;
constexpr int64_t kMaxDim = 2147483647;  // MATMUL_MAX_DIM (layers.h): INT_MAX

bool fits_int(int64_t v, int64_t lo) { return v >= lo && v <= kMaxDim; }

void check_shape(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
    int64_t a_cols = ta ? m : k, b_cols = tb ? k : n;  // row-major: a row of op's stored matrix
    if (fits_int(m, 0) && fits_int(n, 0) && fits_int(k, 0) && fits_int(lda, 1) && fits_int(ldb, 1) &&
        fits_int(ldc, 1) && lda >= a_cols && ldb >= b_cols && ldc >= n)
        return;
    fprintf(stderr,
            "gemm_counted: shape m %lld n %lld k %lld (lda %lld, ldb %lld, ldc %lld%s%s) cannot go through "
            "cublasSgemm: sizes must be in 0..%lld, leading dimensions in 1..%lld and at least a row long\n",
            (long long)m, (long long)n, (long long)k, (long long)lda, (long long)ldb, (long long)ldc,
            ta ? ", A transposed" : "", tb ? ", B transposed" : "", (long long)kMaxDim, (long long)kMaxDim);
    exit(1);
}

int64_t slice_rows(const char *kernel, int64_t N, int64_t C, int64_t OC, int64_t max_rows) {
    if (N < 0 || C < 1 || OC < 1 || C > kMaxDim || OC > kMaxDim || max_rows < 1) {
        fprintf(stderr,
                "%s: shape N %lld x C %lld -> OC %lld (slices of %lld rows) cannot go through cublasSgemm: "
                "C and OC must be in 1..%lld (its sizes are int), N >= 0 and the slice >= 1 row\n",
                kernel, (long long)N, (long long)C, (long long)OC, (long long)max_rows, (long long)kMaxDim);
        exit(1);
    }
    return max_rows < kMaxDim ? max_rows : kMaxDim;
}

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

__global__ void bias_rows(float *out, const float *bias, int64_t N, int64_t OC) {
    CUDA_GRID_STRIDE(i, N * OC) out[i] += bias[i % OC];
}

// dbias's term at (row i, column o), summed by column_sum (column_sum.h).
struct dbias_term {
    const float *dout;
    int64_t OC;
    __device__ float operator()(int64_t i, int64_t o) const { return dout[i * OC + o]; }
};

// Without a run's context (a test's counter): a handle for this call.
cublasHandle_t open_handle() {
    cublasHandle_t h;
    blas_check(cublasCreate(&h), "cublasCreate");
    blas_check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    return h;
}

// x (rows of `cols` values, ld apart; row-major) rounded to bf16 (nearest
// even) into a packed copy with the same leading dimension.
__global__ void round_rows_bf16(__nv_bfloat16 *dst, const float *src, int64_t n) {
    CUDA_GRID_STRIDE(i, n) dst[i] = __float2bfloat16_rn(src[i]);
}

// The same, four values a thread (one float4 in, two bf16 pairs out): the
// operands are gigabytes a step (the logits' gradient alone is B T Vp).
__global__ void round_rows_bf16x4(__nv_bfloat162 *dst, const float4 *src, int64_t n4) {
    CUDA_GRID_STRIDE(i, n4) {
        const float4 v = src[i];
        dst[2 * i] = __floats2bfloat162_rn(v.x, v.y);
        dst[2 * i + 1] = __floats2bfloat162_rn(v.z, v.w);
    }
}

__nv_bfloat16 *to_bf16(const float *x, int64_t rows, int64_t cols, int64_t ld) {
    int64_t n = (rows - 1) * ld + cols;  // the span the GEMM reads, gaps between rows included
    __nv_bfloat16 *p = nullptr;          // the pool's blocks are 256-byte aligned
    cuda_check(cudaMallocAsync((void **)&p, (size_t)n * sizeof *p, 0), "gemm_counted (bf16 operand)");
    int64_t n4 = (uintptr_t)x % 16 == 0 && (uintptr_t)p % 8 == 0 ? n / 4 : 0;  // a view may be misaligned
    if (n4 > 0) round_rows_bf16x4<<<cuda_blocks(n4, kBlock), kBlock>>>((__nv_bfloat162 *)p, (const float4 *)x, n4);
    if (n > 4 * n4) round_rows_bf16<<<cuda_blocks(n - 4 * n4, kBlock), kBlock>>>(p + 4 * n4, x + 4 * n4, n - 4 * n4);
    return p;
}

// A bf16 copy of a row-major operand (rows of cols values, ld apart).
struct bf16_operand {
    const __nv_bfloat16 *p;
    int64_t ld;
};

bf16_operand bf16_of(const float *x, int64_t rows, int64_t cols, int64_t ld) {
    return bf16_operand{rows > 0 && cols > 0 ? to_bf16(x, rows, cols, ld) : nullptr, ld};
}

void bf16_free(bf16_operand x, const char *what) {
    if (x.p) cuda_check(cudaFreeAsync((void *)x.p, 0), what);
}

// Row-major C (m, n) = alpha op(A) op(B) + beta C from bf16 operands with
// fp32 accumulation (the tensor cores' bf16 path), counted and timed as
// gemm_counted_cuda counts a GEMM (the rounding is not in the time).
void gemm_bf16_counted(struct exec_ctx *fc, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       float alpha, bf16_operand a, bf16_operand b, float beta, float *c, int64_t ldc) {
    check_shape(trans_a, trans_b, m, n, k, a.ld, b.ld, ldc);
    struct kernel_span t = kernel_span_begin(fc, true);
    if (m > 0 && n > 0) {  // k == 0 still scales C by beta
        cublasHandle_t h = (cublasHandle_t)fc->kernels->cublas;
        cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
        blas_check(cublasGemmEx(h, op_b, op_a, (int)n, (int)m, (int)k, &alpha, b.p, CUDA_R_16BF, (int)b.ld, a.p,
                                CUDA_R_16BF, (int)a.ld, &beta, c, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (bf16)");
        cuda_done("gemm_counted");
    }
    kernel_span_end_gemm(fc, t);
    fc->gemm += 2.0 * (double)m * (double)n * (double)k;
}

// Whether the run's layer GEMMs take bf16 operands (kernel_context.h).
bool bf16_layers(const struct exec_ctx *fc) { return fc->kernels && fc->kernels->bf16_gemms; }

// gemm_bf16_counted with a bias epilogue (matmul_lt.h, alpha 1): false,
// and nothing done or counted, where cuBLASLt cannot fuse it.
bool gemm_bf16_lt_counted(struct exec_ctx *fc, enum lt_epilogue e, bool trans_a, bool trans_b, int64_t m,
                          int64_t n, int64_t k, bf16_operand a, bf16_operand b, float beta, float *c, int64_t ldc,
                          float *bias) {
    check_shape(trans_a, trans_b, m, n, k, a.ld, b.ld, ldc);
    struct kernel_span t = kernel_span_begin(fc, true);
    bool fused = lt_gemm_bf16(fc->kernels, e, trans_a, trans_b, m, n, k, a.p, a.ld, b.p, b.ld, beta, c, ldc, bias);
    if (fused) cuda_done(e == LT_BIAS ? "matmul_forward (bias epilogue)" : "matmul_backward (bias-gradient epilogue)");
    kernel_span_end_gemm(fc, t);
    if (fused) fc->gemm += 2.0 * (double)m * (double)n * (double)k;
    return fused;
}

void add_bias(float *out, const float *bias, int64_t N, int64_t OC, const char *what) {
    if (N * OC == 0) return;
    bias_rows<<<cuda_blocks(N * OC, kBlock), kBlock>>>(out, bias, N, OC);
    cuda_done(what);
}

// matmul_forward's GEMMs from bf16 rows x (N of C): the weight rounded
// once for every slice of `rows` rows; the bias (if any) added in each
// slice's GEMM epilogue, or by its own pass where cuBLASLt cannot.
void forward_bf16(float *out, bf16_operand x, const float *weight, const float *bias, int64_t N, int64_t C,
                  int64_t OC, int64_t rows, struct exec_ctx *fc) {
    bf16_operand w = bf16_of(weight, OC, C, C);
    for (int64_t r = 0; r < N; r += rows) {
        int64_t n_r = min64(rows, N - r);
        bf16_operand x_r{x.p + r * C, C};
        float *out_r = out + r * OC;
        if (bias && gemm_bf16_lt_counted(fc, LT_BIAS, false, true, n_r, OC, C, x_r, w, 0.0f, out_r, OC,
                                         (float *)bias))
            continue;
        gemm_bf16_counted(fc, false, true, n_r, OC, C, 1.0f, x_r, w, 0.0f, out_r, OC);
        if (bias) add_bias(out_r, bias, n_r, OC, "matmul_forward (bias)");
    }
    if (bias) fc->other += (double)N * OC;
    bf16_free(w, "matmul_forward (bf16 weight)");
}

// dbias's term at (row i, column o) from the rounded dout: what the
// bias-gradient epilogue sums.
struct dbias_bf16_term {
    const __nv_bfloat16 *dout;
    int64_t OC;
    __device__ float operator()(int64_t i, int64_t o) const { return __bfloat162float(dout[i * OC + o]); }
};

__global__ void add_into(float *out, const float *part, int64_t n) {
    CUDA_GRID_STRIDE(i, n) out[i] += part[i];
}

// matmul_backward's GEMMs from bf16 rows x: dout serves both, rounded once
// (the logits' gradient is B T Vp values), and the weight once. dbias sums
// that rounded dout too, slice by slice: in the dweight GEMM's epilogue
// (into `part`, then added), or by column_sum where cuBLASLt cannot.
void backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout, bf16_operand x, const float *weight,
                   int64_t N, int64_t C, int64_t OC, int64_t rows, struct exec_ctx *fc) {
    const char *what = "matmul_backward (bf16 operands)";
    bf16_operand d = bf16_of(dout, N, OC, OC), w = bf16_of(weight, OC, C, C);
    for (int64_t r = 0; r < N; r += rows)
        gemm_bf16_counted(fc, false, false, min64(rows, N - r), C, OC, 1.0f, bf16_operand{d.p + r * OC, OC}, w,
                          0.0f, dinp + r * C, C);
    float *part = nullptr;
    if (dbias && N > 0) cuda_check(cudaMallocAsync((void **)&part, (size_t)OC * sizeof *part, 0), what);
    for (int64_t r = 0; r < N; r += rows) {  // N is dweight's reduction: each slice adds (beta = 1)
        int64_t n_r = min64(rows, N - r);
        bf16_operand d_r{d.p + r * OC, OC}, x_r{x.p + r * C, C};
        if (dbias && gemm_bf16_lt_counted(fc, LT_BIAS_GRAD, true, false, OC, C, n_r, d_r, x_r, 1.0f, dweight, C,
                                          part)) {
            add_into<<<cuda_blocks(OC, kBlock), kBlock>>>(dbias, part, OC);
            cuda_done("matmul_backward (bias)");
            continue;
        }
        gemm_bf16_counted(fc, true, false, OC, C, n_r, 1.0f, d_r, x_r, 1.0f, dweight, C);
        if (!dbias) continue;
        column_sum(dbias, n_r, OC, dbias_bf16_term{d_r.p, OC}, "matmul_backward (bias)");
        cuda_done("matmul_backward (bias)");
    }
    if (dbias) fc->other += (double)N * OC;
    if (part) cuda_check(cudaFreeAsync(part, 0), what);
    bf16_free(d, what);
    bf16_free(w, what);
}

// The bf16 forms need the run's cuBLAS handle (a kernel context).
void need_context(const struct exec_ctx *fc, const char *kernel) {
    if (fc->kernels) return;
    fprintf(stderr, "error: %s: bf16 operands need the run's kernel context (kernel_context.h)\n", kernel);
    exit(EXIT_FAILURE);
}

void forward_bias(float *out, const float *bias, int64_t N, int64_t OC, struct exec_ctx *fc) {
    if (!bias) return;
    add_bias(out, bias, N, OC, "matmul_forward (bias)");
    fc->other += (double)N * OC;
}

void backward_bias(float *dbias, const float *dout, int64_t N, int64_t OC, struct exec_ctx *fc) {
    if (!dbias) return;
    if (N * OC > 0) {
        column_sum(dbias, N, OC, dbias_term{dout, OC}, "matmul_backward (bias)");
        cuda_done("matmul_backward (bias)");
    }
    fc->other += (double)N * OC;
}

}  // namespace

extern "C" {

void gemm_counted_cuda(struct exec_ctx *fc, enum gemm_kind kind, bool trans_a, bool trans_b, int64_t m, int64_t n,
                       int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                       float *c, int64_t ldc) {
    check_shape(trans_a, trans_b, m, n, k, lda, ldb, ldc);
    if (kind == GEMM_LAYER && bf16_layers(fc) && k > 0) {
        bf16_operand ab = bf16_of(a, trans_a ? k : m, trans_a ? m : k, lda);
        bf16_operand bb = bf16_of(b, trans_b ? n : k, trans_b ? k : n, ldb);
        gemm_bf16_counted(fc, trans_a, trans_b, m, n, k, alpha, ab, bb, beta, c, ldc);
        bf16_free(ab, "gemm_counted (bf16 operand)");
        bf16_free(bb, "gemm_counted (bf16 operand)");
        return;
    }
    struct kernel_span t = kernel_span_begin(fc, true);
    if (m > 0 && n > 0) {  // cuBLAS, like BLAS, scales C by beta when k == 0
        const struct kernel_context *kc = fc->kernels;
        cublasHandle_t h = kc ? (cublasHandle_t)kc->cublas : open_handle();
        cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
        blas_check(cublasSgemm(h, op_b, op_a, (int)n, (int)m, (int)k, &alpha, b, (int)ldb, a, (int)lda, &beta, c,
                               (int)ldc),
                   "cublasSgemm");
        cuda_done("gemm_counted");
        if (!kc) blas_check(cublasDestroy(h), "cublasDestroy");
    }
    // Not called from OpenMP regions on the device path: plain adds.
    kernel_span_end_gemm(fc, t);
    (kind == GEMM_ATTENTION ? fc->attention : fc->gemm) += 2.0 * (double)m * (double)n * (double)k;
}

void matmul_forward_sliced_cuda(float *out, const float *inp, const float *weight, const float *bias, int64_t N,
                                int64_t C, int64_t OC, int64_t max_rows, struct exec_ctx *fc) {
    const int64_t rows = slice_rows("matmul_forward", N, C, OC, max_rows);
    if (bf16_layers(fc)) {  // the input rounded once for all its slices
        bf16_operand x = bf16_of(inp, N, C, C);
        forward_bf16(out, x, weight, bias, N, C, OC, rows, fc);
        bf16_free(x, "matmul_forward (bf16 input)");
        return;
    }
    for (int64_t r = 0; r < N; r += rows)
        gemm_counted_cuda(fc, GEMM_LAYER, false, true, min64(rows, N - r), OC, C, 1.0f, inp + r * C, C, weight, C,
                          0.0f, out + r * OC, OC);
    forward_bias(out, bias, N, OC, fc);
}

void matmul_backward_sliced_cuda(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                 const float *weight, int64_t N, int64_t C, int64_t OC, int64_t max_rows,
                                 struct exec_ctx *fc) {
    const int64_t rows = slice_rows("matmul_backward", N, C, OC, max_rows);
    if (bf16_layers(fc)) {
        bf16_operand x = bf16_of(inp, N, C, C);
        backward_bf16(dinp, dweight, dbias, dout, x, weight, N, C, OC, rows, fc);
        bf16_free(x, "matmul_backward (bf16 input)");
        return;
    }
    for (int64_t r = 0; r < N; r += rows)  // dinp rows are independent
        gemm_counted_cuda(fc, GEMM_LAYER, false, false, min64(rows, N - r), C, OC, 1.0f, dout + r * OC, OC, weight,
                          C, 0.0f, dinp + r * C, C);
    for (int64_t r = 0; r < N; r += rows)  // N is dweight's reduction: each slice adds (beta = 1)
        gemm_counted_cuda(fc, GEMM_LAYER, true, false, OC, C, min64(rows, N - r), 1.0f, dout + r * OC, OC,
                          inp + r * C, C, 1.0f, dweight, C);
    backward_bias(dbias, dout, N, OC, fc);
}

void matmul_forward_bf16_cuda(float *out, const uint16_t *inp, const float *weight, const float *bias, int64_t N,
                              int64_t C, int64_t OC, struct exec_ctx *fc) {
    need_context(fc, "matmul_forward_bf16");
    const int64_t rows = slice_rows("matmul_forward_bf16", N, C, OC, kMaxDim);
    forward_bf16(out, bf16_operand{(const __nv_bfloat16 *)inp, C}, weight, bias, N, C, OC, rows, fc);
}

void matmul_backward_bf16_cuda(float *dinp, float *dweight, float *dbias, const float *dout, const uint16_t *inp,
                               const float *weight, int64_t N, int64_t C, int64_t OC, struct exec_ctx *fc) {
    need_context(fc, "matmul_backward_bf16");
    const int64_t rows = slice_rows("matmul_backward_bf16", N, C, OC, kMaxDim);
    backward_bf16(dinp, dweight, dbias, dout, bf16_operand{(const __nv_bfloat16 *)inp, C}, weight, N, C, OC, rows,
                  fc);
}

void matmul_forward_cuda(float *out, const float *inp, const float *weight, const float *bias, int64_t N, int64_t C,
                         int64_t OC, struct exec_ctx *fc) {
    matmul_forward_sliced_cuda(out, inp, weight, bias, N, C, OC, kMaxDim, fc);
}

void matmul_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                          const float *weight, int64_t N, int64_t C, int64_t OC, struct exec_ctx *fc) {
    matmul_backward_sliced_cuda(dinp, dweight, dbias, dout, inp, weight, N, C, OC, kMaxDim, fc);
}

void bias_add_cuda(float *out, const float *bias, int64_t N, int64_t OC, struct exec_ctx *fc) {
    add_bias(out, bias, N, OC, "bias_add");
    fc->other += (double)N * OC;
}

}  // extern "C"
