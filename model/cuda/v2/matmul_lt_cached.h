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
void lt_cache_free(struct lt_cache *cache);

#endif
