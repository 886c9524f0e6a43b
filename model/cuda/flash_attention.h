/* Fused causal multi-head attention on the GPU, FlashAttention-2 style
 * (Dao 2023): tiled, an online softmax, bf16 tensor-core products (mma
 * m16n8k16) with fp32 accumulation; no T x T matrix is ever stored, only
 * one 64 x 64 tile of scores per thread block, in the warps' registers
 * (model/cuda/flash_attention.cu: these entry points; flash_forward.cu,
 * flash_backward.cu: the kernels; flash_attention_mma.h: their tiles).
 *
 * Shapes and layout are model/cpu/attention.c's: qkv (B,T,3C), each row
 * holding q, k, v as C-wide thirds, head h at columns h*hs of each third;
 * out (B,T,C), head h at columns h*hs; hs = C/NH; the scores are
 * q.k / sqrt(hs), causal (key j <= query i). Every pointer is device
 * memory, fp32; the kernels round q, k, v and dout to bf16 as they load
 * them into shared memory, the probabilities P and dS = P (dP - D) to bf16
 * in registers as the operands of the next product, and accumulate in fp32.
 * The forward's row sum l adds the rounded probabilities, the ones P V
 * uses, so that out = O / l is a weighted mean of the rows of V.
 *
 * Head sizes: 32, 64 and 128; any T >= 1 (the tiles past T are masked);
 * anything else is an error: a message on stderr naming the value, and a
 * non-zero return, nothing launched. A failed CUDA call prints the function
 * and CUDA's reason and exits (model/cuda/cuda_check.h, as every X_cuda
 * kernel does). Each call returns with its kernels queued on the default
 * stream (model/kernel_timing.h), not finished.
 *
 * Deterministic: no atomics; every sum has a fixed order, so a run repeats
 * bit for bit on the same GPU model and build. dq has its own kernel
 * (one thread block per query tile walks the key tiles in order) instead
 * of FlashAttention-2's atomic adds from the key-tile blocks.
 *
 * Shared memory per block: 15 to 21 KB (hs 32), 27 to 37 KB (hs 64), 51
 * to 69 KB (hs 128), forward to backward (bf16 operand tiles only), which
 * every GPU from sm_80 on gives. Only in the CUDA build (make cuda). */
#ifndef SHARDLAB_FLASH_ATTENTION_H
#define SHARDLAB_FLASH_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Rows and columns of one tile: queries per block, keys per step. */
enum { FLASH_ATTENTION_TILE = 64 };

/* 0 when flash attention takes this shape; else non-zero with the reason
 * on stderr, prefixed by `who` (an unsupported head size names it, and the
 * supported ones). B == 0 or T == 0 is a valid, empty call. */
int flash_attention_check(const char *who, int64_t B, int64_t T, int64_t C, int64_t NH);

/* out (B,T,C) and lse (B,NH,T) overwritten from qkv (B,T,3C).
 * lse[b][h][t] = log sum_{j<=t} exp(q_t.k_j / sqrt(hs)), the row's
 * log-sum-exp of the scaled scores, kept for the backward pass.
 * 0, or non-zero (flash_attention_check's message) with nothing written. */
int flash_attention_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH);

/* Floats of device scratch flash_attention_backward needs: B NH T
 * (D = rowsum(dout * out) per head and row). Its contents on entry do not
 * matter; they are garbage on return. */
size_t flash_attention_backward_scratch(int64_t B, int64_t T, int64_t NH);

/* dqkv (B,T,3C) overwritten (every element) with the gradient of the loss
 * with respect to qkv, from dout (B,T,C) and the forward's qkv, out and
 * lse. scratch: flash_attention_backward_scratch(B, T, NH) floats of device
 * memory. The probabilities are recomputed tile by tile from qkv and lse.
 * 0, or non-zero (flash_attention_check's message) with nothing written. */
int flash_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                             const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH);

/* What the two calls compute, for struct exec_ctx (include/counters.h).
 * The kernels count nothing themselves: the caller adds
 *   fc->attention += forward_mma (+ backward_mma),
 *   fc->other     += forward_other (+ backward_other).
 * With nt = ceil(T/64) tiles and P = nt (nt+1)/2 causal tile pairs (query
 * tile i meets key tiles 0..i) per (batch, head), G = 2 * 64 * 64 * hs the
 * FLOPs of one 64 x 64 x hs tile product:
 *   forward_mma   = B NH P 2 G     S = Q K^T, O += P V
 *   backward_mma  = B NH P 7 G     dK/dV kernel: S^T = K Q^T, dP^T = V dO^T,
 *                                  dV += P^T dO, dK += dS^T Q; dQ kernel:
 *                                  S = Q K^T, dP = dO V^T, dQ += dS K
 *   forward_other = B NH (P 64 64 5 + P 64 (hs + 5) + T (hs + 3))
 *       per score: scale, max, subtract, exp, sum; per row and tile pair:
 *       new max, the correction exp(m_old - m_new) (2), l's multiply-add
 *       (2), O's rescale (hs); per output row: 1/l, O times it (hs), log,
 *       add (lse)
 *   backward_other = B NH (P 64 64 10 + 2 nt 64 hs + T 2 hs)
 *       per score in each of the two kernels: scale, subtract lse, exp,
 *       dP - D, times P; dK's and dQ's final scale by 1/sqrt(hs) on whole
 *       tiles; D = rowsum(dout * out), a multiply and an add per element
 * Issued work: the masked half of the diagonal tiles and the rows and
 * columns past T in the last tile count, as computed; the mask's
 * comparisons do not. The model FLOPs are PaLM's (Chowdhery et al. 2022,
 * App. B; train/theory/theory_flops.c): the non-causal QK^T and PV products,
 *   forward_model  = 4 B NH T^2 hs,   backward_model = 8 B NH T^2 hs,
 * which is also what model/cpu/attention.c adds to fc->attention (its
 * issued full squares). 0 for an unsupported shape (after the message). */
struct flash_attention_flops {
    double forward_mma, backward_mma;     /* tensor-core products issued */
    double forward_other, backward_other; /* the elementwise work issued */
    double forward_model, backward_model; /* PaLM's model FLOPs */
};
struct flash_attention_flops flash_attention_flops(int64_t B, int64_t T, int64_t C, int64_t NH);

#ifdef __cplusplus
}
#endif

#endif
