// bf16 GEMMs with a fused bias through cuBLASLt's epilogues (matmul_lt.cu;
// used by matmul.cu): the "fused bias where the library allows".
//
// Row-major D (m, n) = op(A) op(B) + beta D, bf16 operands, fp32
// accumulation and an fp32 D, with one of two epilogues:
//   LT_BIAS:       D[i][j] += bias[j] in the GEMM's own epilogue (the fp32
//                  accumulator plus the fp32 bias, one rounding, as the
//                  separate bias kernel adds them), no pass of its own;
//   LT_BIAS_GRAD:  dbias[j] = sum over the k rows of A (the row-major A is
//                  transposed: A^T is (m, k), so j runs over m) of A's
//                  column j: the bias gradient from the GEMM's own reads of
//                  dout, in fp32 from its bf16 values. It overwrites
//                  dbias (the caller adds it where it accumulates).
// The call returns false when the epilogue cannot run: operands, D or the
// bias not 16-byte aligned (a leading dimension not a multiple of 8 bf16 or
// 4 floats), or no cuBLASLt algorithm for the shape; the caller then runs
// the plain GEMM and its own bias kernel on the same values (the model's
// shapes are aligned; the tests' odd shapes take both ways).
#ifndef SHARDLAB_MATMUL_LT_H
#define SHARDLAB_MATMUL_LT_H

#include <cuda_bf16.h>
#include <stdint.h>

#include "kernel_context.h"

enum lt_epilogue { LT_BIAS, LT_BIAS_GRAD };

bool lt_gemm_bf16(struct kernel_context *kc, enum lt_epilogue e, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, const __nv_bfloat16 *a, int64_t lda, const __nv_bfloat16 *b, int64_t ldb, float beta,
                  float *d, int64_t ldd, float *bias);

#endif
