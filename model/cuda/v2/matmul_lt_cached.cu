// v1's lt_gemm_bf16 (model/cuda/matmul_lt.h: the same operands, epilogues,
// alignment rules and fall-back) with cuBLASLt's descriptor, layouts and
// algorithm made once per shape (lt_plan_cache.h says why). The bias
// pointer is the call's: set on the cached descriptor before each
// cublasLtMatmul (the descriptor is read when the call is queued).
// --gpu_path v2 only; compiled, not run on a GPU.
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>

#include "matmul_lt_cached.h"

static_assert(sizeof(cublasLtMatmulAlgo_t) <= LT_ALGO_BYTES, "a slot holds cuBLASLt's algorithm");

namespace {

void lt_check(cublasStatus_t st, const char *what) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "error: cuBLASLt %s: %s (status %d)\n", what, cublasGetStatusString(st), (int)st);
    exit(EXIT_FAILURE);
}

bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

cublasLtMatrixLayout_t layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld) {
    cublasLtMatrixLayout_t l;
    lt_check(cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, ld), "cublasLtMatrixLayoutCreate");
    return l;
}

cublasLtEpilogue_t epilogue_of(int e) {
    return e == LT_BIAS ? CUBLASLT_EPILOGUE_BIAS : e == LT_BIAS_GRAD ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
}

// The plan of a new shape: v1's descriptor, layouts and heuristic call,
// with this call's bias pointer set first as v1 sets it (every bias is
// 16-byte aligned, so the heuristic sees what it would see on any call).
// A bf16 D keeps the bias fp32 (cuBLASLt's default would be D's type);
// LT_PLAIN sets no bias.
void make_plan(struct kernel_context *kc, lt_plan *p, float *bias) {
    const lt_shape &s = p->shape;
    bool trans_a = s.trans & 1, trans_b = s.trans & 2;
    cublasLtMatmulDesc_t desc;
    lt_check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = epilogue_of(s.epilogue);
    lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first), "transa");
    lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second), "transb");
    lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue), "epilogue");
    if (s.epilogue != LT_PLAIN)
        lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), "bias");
    if (s.epilogue != LT_PLAIN && s.d_bf16) {
        cudaDataType_t bias_type = CUDA_R_32F;
        lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof bias_type),
                 "bias data type");
    }
    cublasLtMatrixLayout_t first = layout(CUDA_R_16BF, trans_b ? s.k : s.n, trans_b ? s.n : s.k, s.ldb);
    cublasLtMatrixLayout_t second = layout(CUDA_R_16BF, trans_a ? s.m : s.k, trans_a ? s.k : s.m, s.lda);
    cublasLtMatrixLayout_t out = layout(s.d_bf16 ? CUDA_R_16BF : CUDA_R_32F, s.n, s.m, s.ldd);
    cublasLtMatmulPreference_t pref;
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    size_t ws = kc->lt_workspace_bytes;
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
             "cublasLtMatmulPreferenceSetAttribute");
    cublasLtMatmulHeuristicResult_t found;
    int count = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)kc->cublaslt, desc, first, second, out, out,
                                                       pref, 1, &found, &count);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) lt_check(st, "cublasLtMatmulAlgoGetHeuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    p->found = st == CUBLAS_STATUS_SUCCESS && count > 0;
    memcpy(p->algo, &found.algo, sizeof found.algo);
    p->desc = desc, p->first = first, p->second = second, p->out = out;
}

}  // namespace

bool lt_gemm_bf16_cached(struct lt_cache *cache, struct kernel_context *kc, enum lt_epilogue e, bool trans_a,
                         bool trans_b, int64_t m, int64_t n, int64_t k, const __nv_bfloat16 *a, int64_t lda,
                         const __nv_bfloat16 *b, int64_t ldb, float beta, float *d, int64_t ldd, float *bias) {
    lt_call c = {e, trans_a, trans_b, false, m, n, k, lda, ldb, ldd, a, b, beta, d, bias};
    return lt_matmul_cached(cache, kc, &c);
}

bool lt_matmul_cached(struct lt_cache *cache, struct kernel_context *kc, const struct lt_call *c) {
    const int64_t d_align = c->d_bf16 ? 8 : 4; /* 16 bytes of D's elements */
    bool plain = c->epilogue == LT_PLAIN;
    if (!kc->cublaslt || c->m <= 0 || c->n <= 0 || c->k <= 0 || c->lda % 8 || c->ldb % 8 || c->ldd % d_align ||
        !aligned16(c->a) || !aligned16(c->b) || !aligned16(c->d) || (!plain && !aligned16(c->bias)) ||
        (plain && c->bias) || (c->d_bf16 && c->beta != 0.0f))
        return false;
    lt_shape s = lt_shape_of(c->epilogue, c->trans_a, c->trans_b, c->m, c->n, c->k, c->lda, c->ldb, c->ldd);
    s.d_bf16 = c->d_bf16;
    bool hit;
    int i = lt_cache_slot(cache, &s, &hit);
    if (i < 0) /* a full cache: v1's per-call way where it has one */
        return !plain && !c->d_bf16 &&
               lt_gemm_bf16(kc, (enum lt_epilogue)c->epilogue, c->trans_a, c->trans_b, c->m, c->n, c->k, c->a, c->lda,
                            c->b, c->ldb, c->beta, (float *)c->d, c->ldd, c->bias);
    const __nv_bfloat16 *a = c->a, *b = c->b;
    void *d = c->d;
    float *bias = c->bias;
    const float beta = c->beta;
    const int e = c->epilogue;
    lt_plan *p = &cache->slot[i];
    if (!hit) make_plan(kc, p, bias);
    if (!p->found) return false;
    cublasLtMatmulDesc_t desc = (cublasLtMatmulDesc_t)p->desc;
    if (e != LT_PLAIN)
        lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), "bias");
    cublasLtMatrixLayout_t first = (cublasLtMatrixLayout_t)p->first, second = (cublasLtMatrixLayout_t)p->second,
                           out = (cublasLtMatrixLayout_t)p->out;
    cublasLtMatmulAlgo_t algo;
    memcpy(&algo, p->algo, sizeof algo);
    const float alpha = 1.0f;
    lt_check(cublasLtMatmul((cublasLtHandle_t)kc->cublaslt, desc, &alpha, b, first, a, second, &beta, d, out, d, out,
                            &algo, kc->lt_workspace, kc->lt_workspace_bytes, 0),
             e == LT_BIAS        ? "cublasLtMatmul (bias epilogue, cached)"
             : e == LT_PLAIN ? "cublasLtMatmul (cached)"
                             : "cublasLtMatmul (bias-gradient epilogue, cached)");
    if (e != LT_PLAIN) kc->bias_epilogues++;
    return true;
}

void lt_cache_free(struct lt_cache *cache) {
    for (int i = 0; i < LT_CACHE_SLOTS; i++) {
        lt_plan *p = &cache->slot[i];
        if (!p->used || !p->desc) continue;
        cublasLtMatrixLayoutDestroy((cublasLtMatrixLayout_t)p->out);
        cublasLtMatrixLayoutDestroy((cublasLtMatrixLayout_t)p->second);
        cublasLtMatrixLayoutDestroy((cublasLtMatrixLayout_t)p->first);
        cublasLtMatmulDescDestroy((cublasLtMatmulDesc_t)p->desc);
    }
    memset(cache, 0, sizeof *cache);
}
