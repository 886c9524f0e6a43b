/* FlashAttention-2-class attention on the bf16 data path (issue 24,
 * Deliver 3; --gpu_path v2 only): the device forms of layers.h's
 * attention_lse_forward_bf16 / attention_lse_backward_bf16, with their
 * contracts (shapes and layout as model/cpu/attention.c's: qkv (B,T,3C)
 * bf16, out (B,T,C) bf16, lse (B,NH,T) fp32, dout (B,T,C) fp32, dqkv
 * (B,T,3C) bf16; every pointer device memory). As Dao 2023 does it
 * (flash2_schedule.h lists the tiles):
 *   forward   128-row query blocks of 8 warps (16 rows a warp), key tiles
 *             of 64 loaded with cp.async into double-buffered shared memory
 *             while the current one is multiplied, mma m16n8k16 bf16 with
 *             fp32 accumulation, causal tiles skipped per warp, an online
 *             softmax in fp32 (exp2 of log2e-scaled scores), the row sum l
 *             adding the bf16-rounded probabilities P V uses (as v1);
 *             out rounded once to bf16 as it is stored, lse fp32.
 *   backward  D = rowsum(dout * out) in fp32 (out widened) and dout rounded
 *             to bf16 in one pass; then key-block-major: a block of 8
 *             warps holds 128 keys (16 a warp) and walks the query tiles of
 *             64 (Q, dO, lse, D double-buffered with cp.async), the paper's
 *             5 products per tile pair: S^T = K Q^T, dP^T = V dO^T, dV +=
 *             P^T dO, dK += dS^T Q in each warp's registers, and dQ = dS K
 *             for the tile's 64 rows from dS^T in shared memory, stored as
 *             this key block's fp32 partial (no atomics); a last pass adds
 *             each row's partials in key-block order, scales and rounds dq
 *             once to bf16. dK (scaled) and dV rounded once as stored.
 * Why partials and not a dQ kernel that recomputes S and dP (v1's way):
 * that costs 7 products per tile pair instead of 5, and the fp32 atomics
 * FlashAttention-2 uses change the bits from run to run. The price is
 * scratch: about 4.5 T hs floats per (batch, head) of partials at T =
 * 1024 (flash2_scratch_layout), written and read once.
 *
 * Head sizes 32, 64 and 128; T >= 1 any (tails masked); qkv, out, dout, dqkv
 * 16-byte aligned (cp.async and 4-byte bf16 pair stores). Anything else:
 * a message on stderr naming the value, a non-zero return, nothing
 * launched. Calls return with the kernels queued (not finished). */
#ifndef SHARDLAB_FLASH2_H
#define SHARDLAB_FLASH2_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

/* How far the kernels may be from the CPU's bf16 forms on the same bf16
 * inputs (tests/cuda/test_flash2_cuda.c on a GPU; tests/test_flash2_replay.c
 * replays the kernels' rounding points on the CPU against the same bounds).
 * The GPU rounds P (forward and backward), dout and dS to bf16 as mma
 * operands (each at most 2^-9 relative); both sides round out and dqkv
 * once as stored (two nearby values may round one bf16 ulp, 2^-7 of the
 * element, apart); the fp32 sums differ in order. These are v1's rounding
 * points (flash_attention.h), whose test held them to 1e-2 normwise
 * (measured at most 3e-3 with bf16 inputs on an H100); the stored rounding
 * adds at most 2^-8 of the largest element:
 *   out, dq, dk, dv  normwise: max |gpu - cpu| <= 1e-2 + 2^-8 of max |cpu|
 *   lse              absolute: l sums the rounded P, a log of a sum of
 *                    terms each within 2^-9 (1.95e-3), plus fp32's order
 * dq and dk are measured against the larger of max |cpu| and the size of
 * their terms (tests/flash2_terms.h): rounding dout moves dP by 2^-9 of
 * its own size, and where dP - D cancels (peaked softmax; at T = 1 exactly,
 * where the CPU's dq and dk are 0) that error is not small against dS. */
#define FLASH2_REL_BOUND 1.4e-2
#define FLASH2_LSE_BOUND 2.1e-3

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when the kernels take this shape and these pointers (names[i] names
 * ptrs[i] in the message; a NULL pointer is not checked); else non-zero
 * with the reason on stderr, prefixed by `who`. B == 0 or T == 0 is a
 * valid, empty call. */
int flash2_check(const char *who, int64_t B, int64_t T, int64_t C, int64_t NH, const void *const *ptrs,
                 const char *const *names, int nptrs);

/* out (B,T,C) bf16 and lse (B,NH,T) overwritten from qkv (B,T,3C) bf16. */
int flash2_forward(bf16 *out, float *lse, const bf16 *qkv, int64_t B, int64_t T, int64_t C, int64_t NH);

/* Floats of device scratch flash2_backward needs (flash2_schedule.h's
 * flash2_scratch_layout().total); garbage on return. */
size_t flash2_backward_scratch(int64_t B, int64_t T, int64_t C, int64_t NH);

/* dqkv (B,T,3C) bf16, every element, from dout (B,T,C) fp32 and the
 * forward's qkv, out (bf16) and lse (fp32). */
int flash2_backward(bf16 *dqkv, float *scratch, const float *dout, const bf16 *qkv, const bf16 *out,
                    const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH);

/* The tensor-core FLOPs the two issue (flash2_schedule.h), for the
 * counter's fc->attention; 0 for a shape they do not take. */
double flash2_forward_flops(int64_t B, int64_t T, int64_t C, int64_t NH);
double flash2_backward_flops(int64_t B, int64_t T, int64_t C, int64_t NH);

#ifdef __cplusplus
}
#endif

#endif
