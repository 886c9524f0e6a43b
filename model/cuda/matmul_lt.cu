// cuBLASLt GEMMs with a bias epilogue (matmul_lt.h). As in matmul.cu, the
// row-major D = op(A) op(B) is the column-major D^T = op(B)^T op(A)^T:
// cuBLASLt's first operand is our B, its second our A, its D (n, m). So
// the forward's bias (one per row-major column, n of them) is cuBLASLt's
// per-row CUBLASLT_EPILOGUE_BIAS, and dbias (our A's column sums, m of
// them, reduced over k) is CUBLASLT_EPILOGUE_BGRADB, the bias gradient of
// its second operand. Descriptors are made per call (host work, queued
// ahead of the GPU like the rest); the workspace is the kernel context's.
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>

#include "matmul_lt.h"

namespace {

void lt_check(cublasStatus_t st, const char *what) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "error: cuBLASLt %s: %s (status %d)\n", what, cublasGetStatusString(st), (int)st);
    exit(EXIT_FAILURE);
}

bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

// A column-major layout of `rows` x `cols` elements of type t, ld apart.
cublasLtMatrixLayout_t layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld) {
    cublasLtMatrixLayout_t l;
    lt_check(cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, ld), "cublasLtMatrixLayoutCreate");
    return l;
}

void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void *v, size_t size) {
    lt_check(cublasLtMatmulDescSetAttribute(desc, attr, v, size), "cublasLtMatmulDescSetAttribute");
}

}  // namespace

bool lt_gemm_bf16(struct kernel_context *kc, enum lt_epilogue e, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, const __nv_bfloat16 *a, int64_t lda, const __nv_bfloat16 *b, int64_t ldb, float beta,
                  float *d, int64_t ldd, float *bias) {
    if (!kc->cublaslt || m <= 0 || n <= 0 || k <= 0 || lda % 8 || ldb % 8 || ldd % 4 || !aligned16(a) ||
        !aligned16(b) || !aligned16(d) || !aligned16(bias))
        return false;
    cublasLtHandle_t lt = (cublasLtHandle_t)kc->cublaslt;
    cublasLtMatmulDesc_t desc;
    lt_check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = e == LT_BIAS ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADB;
    set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first);
    set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second);
    set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    // stored as row-major, read as column-major: our B is (n, k) after its op, our A (k, m) after its op
    cublasLtMatrixLayout_t first = layout(CUDA_R_16BF, trans_b ? k : n, trans_b ? n : k, ldb);
    cublasLtMatrixLayout_t second = layout(CUDA_R_16BF, trans_a ? m : k, trans_a ? k : m, lda);
    cublasLtMatrixLayout_t out = layout(CUDA_R_32F, n, m, ldd);
    cublasLtMatmulPreference_t pref;
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    size_t ws = kc->lt_workspace_bytes;
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
             "cublasLtMatmulPreferenceSetAttribute");
    cublasLtMatmulHeuristicResult_t found;
    int count = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, first, second, out, out, pref, 1, &found, &count);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) lt_check(st, "cublasLtMatmulAlgoGetHeuristic");
    bool ok = st == CUBLAS_STATUS_SUCCESS && count > 0;  // NOT_SUPPORTED or none found: the caller's way
    if (ok) {
        const float alpha = 1.0f;
        lt_check(cublasLtMatmul(lt, desc, &alpha, b, first, a, second, &beta, d, out, d, out, &found.algo,
                                kc->lt_workspace, ws, 0),
                 e == LT_BIAS ? "cublasLtMatmul (bias epilogue)" : "cublasLtMatmul (bias-gradient epilogue)");
        kc->bias_epilogues++;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(out);
    cublasLtMatrixLayoutDestroy(second);
    cublasLtMatrixLayoutDestroy(first);
    cublasLtMatmulDescDestroy(desc);
    return ok;
}
