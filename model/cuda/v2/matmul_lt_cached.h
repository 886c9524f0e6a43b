// v1's cuBLASLt bias GEMMs (model/cuda/matmul_lt.h) with their descriptors,
// layouts and algorithm cached per shape (lt_plan_cache.h). --gpu_path v2
// only; compiled, not run on a GPU. The cache is its owner's (a v2 kernel
// context, once v2 has one), freed with lt_cache_free.
#ifndef SHARDLAB_MATMUL_LT_CACHED_H
#define SHARDLAB_MATMUL_LT_CACHED_H

#include "../matmul_lt.h"
#include "lt_plan_cache.h"

bool lt_gemm_bf16_cached(struct lt_cache *cache, struct kernel_context *kc, enum lt_epilogue e, bool trans_a,
                         bool trans_b, int64_t m, int64_t n, int64_t k, const __nv_bfloat16 *a, int64_t lda,
                         const __nv_bfloat16 *b, int64_t ldb, float beta, float *d, int64_t ldd, float *bias);

// v2's cached GEMMs beyond v1's two epilogues (the bf16 data path's
// matmul_*_mixed, matmul_mixed.cu): also without an epilogue (LT_PLAIN,
// bias NULL), and with a bf16 D (d_bf16: the fp32 accumulator, plus the
// fp32 bias, rounded once to nearest even as it is stored; beta must be
// 0 then, and ldd a multiple of 8). False, nothing done, where cuBLASLt
// cannot (alignment, no algorithm, a full cache): the caller's own way.
enum { LT_PLAIN = LT_BIAS_GRAD + 1 };
struct lt_call {
    int epilogue; /* LT_BIAS, LT_BIAS_GRAD or LT_PLAIN */
    bool trans_a, trans_b, d_bf16;
    int64_t m, n, k, lda, ldb, ldd;
    const __nv_bfloat16 *a, *b;
    float beta;
    void *d;
    float *bias;
};
bool lt_matmul_cached(struct lt_cache *cache, struct kernel_context *kc, const struct lt_call *c);
void lt_cache_free(struct lt_cache *cache);

#endif
