/* Forward/backward pairs for every GPT-2 layer, each declared once: a call
 * runs on the backend its memory space and the run's kernels choose (the
 * CPU's, or the GPU's in the CUDA build: model/dispatch.c,
 * model/layer_ops.h), which a backend implements in its own way under the
 * contract stated here. Shapes follow llm.c: B batch, T time, C channels, OC
 * output channels, NH heads, Vp padded vocab. Activations are row-major
 * (B, T, ...). Weight and bias gradients are ACCUMULATED (+=); input
 * gradients are OVERWRITTEN unless a function says otherwise.
 *
 * Sizes: every shape parameter is int64_t, and every element count, index
 * and pointer offset inside the kernels is computed in int64_t, so a
 * tensor may hold 2^31 elements or more (B T 4C is 2^32 for B 8, T 8192,
 * C 16384). Signed, so loop counters and OpenMP loops use the same type;
 * callers holding int pass it unchanged. FLOP counts are doubles. */
#ifndef SHARDLAB_LAYERS_H
#define SHARDLAB_LAYERS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "counters.h"
#include "dtype.h"
#include "mem_space.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest m, n, k or leading dimension cblas_sgemm accepts: blasint
 * is int in Debian's OpenBLAS (built without INTERFACE64). */
#define MATMUL_MAX_DIM ((int64_t)INT_MAX)

/* The FLOPs the elementwise and row kernels count per element (fc->other). */
enum { LN_FLOPS_FWD_PER_ELEM = 7, LN_FLOPS_BWD_PER_ELEM = 12, GELU_FLOPS_FWD = 8, GELU_FLOPS_BWD = 16,
       CE_FLOPS_PER_LOGIT = 6 };

/* out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]. The two take no counter (no
 * FLOPs: the model calls the embedding_rows_* forms), so the space their
 * buffers live in is an argument. */
void encoder_forward(enum mem_space space, float *out, const int32_t *inp, const float *wte, const float *wpe,
                     int64_t B, int64_t T, int64_t C);
/* dwte[inp[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:] */
void encoder_backward(enum mem_space space, float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                      int64_t B, int64_t T, int64_t C);

/* The vocabulary-parallel embedding (Megatron-LM): this rank holds rows
 * [v0, v0 + rows) of wte (wte points at row v0). out[b,t,:] = wte[inp - v0]
 * for a token in that range, 0 otherwise; the ranks' outputs then sum
 * (over the tensor-parallel group) to the token rows, and
 * positions_add adds wpe once. With v0 = 0 and every row, the two equal
 * encoder_forward bit for bit (one fp32 add either way). */
void embedding_rows_forward(float *out, const int32_t *inp, const float *wte, int64_t v0, int64_t rows, int64_t BT,
                            int64_t C, struct exec_ctx *fc);
/* The embedding's calls and the vocabulary-parallel cross-entropy's first
 * two passes add no FLOPs themselves (the caller, or crossentropy_finish,
 * counts them); they take the run's counter all the same, so that the CUDA
 * build's dispatch can time them (include/counters.h: profile). */
/* out[b,t,:] += wpe[t,:] */
void positions_add(float *out, const float *wpe, int64_t B, int64_t T, int64_t C, struct exec_ctx *fc);
/* dwte[inp - v0,:] += dout[b,t,:] for tokens in [v0, v0 + rows) only;
 * dwpe[t,:] += dout[b,t,:] (every rank: wpe is replicated; NULL: no
 * position table, llama's; host memory only). */
void embedding_rows_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t v0,
                             int64_t rows, int64_t B, int64_t T, int64_t C, struct exec_ctx *fc);

/* LayerNorm over C with eps 1e-5; saves mean and rstd (N = B*T rows). */
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                       const float *bias, int64_t N, int64_t C, struct exec_ctx *fc);
/* dinp is ACCUMULATED (+=): the residual stream's gradient passes through. */
void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, int64_t N, int64_t C,
                        struct exec_ctx *fc);

/* Stops the run: op read a `what` (operand, output) of dtype `have` as
 * `want` (a bug). */
static inline void tensor_wrong_dtype(const char *what, enum dtype have, enum dtype want, const char *op) {
    fprintf(stderr, "error: %s: a %s %s read as %s (a bug)\n", op, dtype_name(have), what, dtype_name(want));
    abort();
}

/* Where a kernel of the bf16 data path writes a tensor, as struct operand
 * (below) gives an input: its values, their dtype and the memory space
 * they live in. bf16 (rounded once, to nearest even) or fp32 (as
 * computed, or with bf16_values rounded to bf16's values as it is stored,
 * the fp32 copy a bf16 store's widening would give); no data: not stored.
 * An accumulated output (+=) is loaded in its dtype, added to in fp32 and
 * stored back the same way (bf16: one rounding per accumulation). Made by
 * act_out_f32/act_out_bf16/act_out_bf16_values/act_out_none, read by
 * act_out_as_f32/act_out_as_bf16, which check the dtype as operand_as_*
 * do. No designated initializers here either (model/cuda/ includes it). */
struct act_out {
    void *data;
    enum dtype dtype;
    enum mem_space space;
    bool bf16_values;
};

static inline struct act_out act_out_f32(float *x, enum mem_space space) {
    struct act_out o = {x, DTYPE_FP32, space, false};
    return o;
}

static inline struct act_out act_out_bf16(bf16 *x, enum mem_space space) {
    struct act_out o = {x, DTYPE_BF16, space, false};
    return o;
}

/* fp32, each value rounded to bf16's as it is stored. */
static inline struct act_out act_out_bf16_values(float *x, enum mem_space space) {
    struct act_out o = {x, DTYPE_FP32, space, true};
    return o;
}

/* Nowhere: the kernel stores nothing (its space is then never checked). */
static inline struct act_out act_out_none(void) {
    struct act_out o = {NULL, DTYPE_FP32, MEM_HOST, false};
    return o;
}

static inline bool act_out_is_bf16(struct act_out o) { return o.dtype == DTYPE_BF16; }

static inline float *act_out_as_f32(struct act_out o, const char *op) {
    if (o.dtype != DTYPE_FP32) tensor_wrong_dtype("output", o.dtype, DTYPE_FP32, op);
    return (float *)o.data;
}

static inline bf16 *act_out_as_bf16(struct act_out o, const char *op) {
    if (o.dtype != DTYPE_BF16) tensor_wrong_dtype("output", o.dtype, DTYPE_BF16, op);
    return (bf16 *)o.data;
}

/* The bf16 data path's LayerNorm and residual add (act_dtype bf16 with
 * the GEMMs reading the saved stores, model/gpt.c; on the host, and on a
 * GPU whose backend reads bf16 (fc->device.reads_bf16: model/cuda/, whose
 * bounds against these are docs/GPU.md's). They load the saved bf16 tensors as they are and
 * compute in fp32 registers, the fp32 forms' operations in the same order,
 * so each equals "widen the bf16 inputs, run the fp32 kernel, narrow the
 * output" bit for bit, without the fp32 copies. Rounding points (the
 * numerics a GPU port is held to):
 *   layernorm_forward_bf16:  inp widened exactly; mean, rstd (kept fp32),
 *     (x - mean) rstd w + b in fp32; out rounded once to bf16 (nearest even).
 *   layernorm_backward_bf16: inp widened exactly; dout, dweight, dbias
 *     (accumulated) fp32; dinp accumulated (+=) in its dtype: fp32, or
 *     bf16 (the residual-stream gradient, model/gpt.c): widened, the row's
 *     term added in fp32, rounded once as stored (each accumulation adds
 *     one rounding, at most 2^-8 |dinp|, bf16's unit roundoff).
 *   residual_forward_bf16:   out = bf16(float(a) + b): a widened exactly,
 *     one fp32 add, one rounding to nearest even.
 * FLOPs as the fp32 forms'. */
void layernorm_forward_bf16(bf16 *out, float *mean, float *rstd, const bf16 *inp, const float *weight,
                            const float *bias, int64_t N, int64_t C, struct exec_ctx *fc);
void layernorm_backward_bf16(struct act_out dinp, float *dweight, float *dbias, const float *dout, const bf16 *inp,
                             const float *weight, const float *mean, const float *rstd, int64_t N, int64_t C,
                             struct exec_ctx *fc);
void residual_forward_bf16(bf16 *out, const bf16 *a, const float *b, int64_t n, struct exec_ctx *fc);
/* The residual add and the next LayerNorm's forward in one call: x (N C) =
 * residual_forward_bf16(a, b), then out, mean, rstd = layernorm_forward_bf16
 * of the stored x. On the host exactly those two calls (their bits, their
 * timing); on a GPU one kernel (model/cuda/: one pass over the row, the
 * same values as the two device forms apart). */
void residual_layernorm_forward_bf16(bf16 *x, bf16 *out, float *mean, float *rstd, const bf16 *a, const float *b,
                                     const float *weight, const float *bias, int64_t N, int64_t C,
                                     struct exec_ctx *fc);

/* The one place GEMMs run: C (m,n) = alpha op(A) op(B) + beta C in
 * row-major storage with leading dimensions lda, ldb, ldc (so strided
 * views, e.g. one head's q inside qkv, need no copy), op(X) = X^T when its
 * trans flag is set. Adds 2mnk to fc->gemm or fc->attention (kind) and the
 * sgemm's time to fc->gemm_seconds; safe to call from an OpenMP parallel
 * region (atomic adds). Sizes must fit MATMUL_MAX_DIM and each leading
 * dimension must hold a row; otherwise it prints the shape to stderr and
 * exits with status 1. */
void gemm_counted(struct exec_ctx *fc, enum gemm_kind kind, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                  float *c, int64_t ldc);

/* out (N,OC) = inp (N,C) . weight(OC,C)^T + bias; bias may be NULL. */
void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int64_t N, int64_t C,
                    int64_t OC, struct exec_ctx *fc);
/* dinp = dout . weight (overwritten); dweight += dout^T . inp; dbias += colsum(dout). */
void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, int64_t N, int64_t C, int64_t OC, struct exec_ctx *fc);
/* The same with the N rows cut into slices of at most max_rows, one sgemm
 * per slice; matmul_forward/backward are these with MATMUL_MAX_DIM, so N
 * itself may exceed the int range of sgemm. Slicing changes nothing in the
 * forward and in dinp (each output row is its own dot products); dweight
 * then sums its slices in order (beta = 1), a different rounding only for
 * N beyond max_rows. C and OC must fit MATMUL_MAX_DIM: otherwise the
 * kernel prints the shape to stderr and exits with status 1 (no GEMM can be
 * split along them here). Exposed so a test can force small slices. */
void matmul_forward_sliced(float *out, const float *inp, const float *weight, const float *bias, int64_t N,
                           int64_t C, int64_t OC, int64_t max_rows, struct exec_ctx *fc);
void matmul_backward_sliced(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, int64_t N, int64_t C, int64_t OC, int64_t max_rows,
                            struct exec_ctx *fc);

/* The same two with the input rows inp (N,C) given as bf16, as the model
 * keeps a saved activation (act_dtype bf16), and the weight and dout
 * rounded to bf16 (nearest even) for the products: --gemm_dtype bf16's
 * GEMMs, which round their operands anyway, read the saved copy instead of
 * rounding its fp32 view again. The bias is added in fp32, and dbias sums
 * the rounded dout in fp32: the operand the GEMMs read, which a GPU sums in
 * the dweight GEMM's epilogue (model/cuda/matmul_lt.h). FLOPs as theirs.
 * The CUDA build's device path needs the run's kernel context
 * (fc->kernels). On the host, with the run's oneDNN context (fc->onednn:
 * the CPU trainer with --gemm_dtype bf16) they run on oneDNN's bf16
 * kernels (include/onednn_gemms.h), as do matmul_forward/backward; without
 * one (a test's counter) the CPU's reference: it widens inp and rounds
 * the weight and dout into temporaries (host memory outside the tracker)
 * and runs sgemm. */
void matmul_forward_bf16(float *out, const bf16 *inp, const float *weight, const float *bias, int64_t N, int64_t C,
                         int64_t OC, struct exec_ctx *fc);
void matmul_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout, const bf16 *inp,
                          const float *weight, int64_t N, int64_t C, int64_t OC, struct exec_ctx *fc);

/* A read-only tensor operand: its values, their dtype (DTYPE_FP32 or
 * DTYPE_BF16) and the memory space they live in. A bf16 operand is read
 * as it is; an fp32 one by a bf16 GEMM is rounded per call (nearest even).
 * On the CPU with bf16 params and --gemm_dtype bf16 the engine hands the
 * model its bf16 params (parallel/engine.c), and the model its saved bf16
 * activations, so nothing is widened to fp32 only to be rounded back.
 * Made by operand_f32/operand_bf16, read by operand_as_f32/operand_as_bf16,
 * which check the dtype: a wrong one is a programming error and stops the
 * run, naming the op. No designated initializers in these helpers: the
 * CUDA build's C++ (model/cuda/) includes this header too. */
struct operand {
    const void *data;
    enum dtype dtype;
    enum mem_space space;
};

static inline struct operand operand_f32(const float *x, enum mem_space space) {
    struct operand o = {x, DTYPE_FP32, space};
    return o;
}

static inline struct operand operand_bf16(const bf16 *x, enum mem_space space) {
    struct operand o = {x, DTYPE_BF16, space};
    return o;
}

static inline bool operand_is_bf16(struct operand x) { return x.dtype == DTYPE_BF16; }

static inline const float *operand_as_f32(struct operand x, const char *op) {
    if (x.dtype != DTYPE_FP32) tensor_wrong_dtype("operand", x.dtype, DTYPE_FP32, op);
    return (const float *)x.data;
}

static inline const bf16 *operand_as_bf16(struct operand x, const char *op) {
    if (x.dtype != DTYPE_BF16) tensor_wrong_dtype("operand", x.dtype, DTYPE_BF16, op);
    return (const bf16 *)x.data;
}

/* Output o as the next kernel reads it: the same values, dtype and space. */
static inline struct operand act_out_operand(struct act_out o) {
    struct operand x = {o.data, o.dtype, o.space};
    return x;
}

/* The operand `off` elements in (a tensor within a unit's params). */
static inline struct operand operand_at(struct operand x, size_t off) {
    if (x.data) x.data = (const char *)x.data + off * dtype_size(x.dtype);
    return x;
}

/* The layer GEMMs on operands of either dtype (on a GPU whose backend
 * reads bf16, fc->device.reads_bf16: cuBLASLt; else the model keeps the
 * _bf16 forms above on widened weights): the
 * values of matmul_forward_bf16 / matmul_backward_bf16 with the same
 * rounded operands, through the run's oneDNN context (fc->onednn), or
 * without one the CPU's reference (temporaries, sgemm). dout is an
 * operand too: fp32 rounded once per call, or the bf16 data path's bf16
 * activation gradient read as it is (the same values: the GEMM reads the
 * rounded dout either way); dbias sums the rounded dout. The output (out,
 * dinp) goes to fp32, or to bf16 for a consumer that reads bf16 (the bf16
 * data path's qkv store and FC feature gradient, model/gpt.c). Rounding
 * points of a bf16 output: the fp32 accumulation (plus the bias, in fp32)
 * rounded once, to nearest even, as it is stored: the fp32 output's
 * values narrowed. */
void matmul_forward_mixed(struct act_out out, struct operand inp, struct operand weight, const float *bias, int64_t N,
                          int64_t C, int64_t OC, struct exec_ctx *fc);
void matmul_backward_mixed(struct act_out dinp, float *dweight, float *dbias, struct operand dout, struct operand inp,
                           struct operand weight, int64_t N, int64_t C, int64_t OC, struct exec_ctx *fc);
/* embedding_rows_forward from a bf16 table (exact: each row widened as it
 * is copied). Host memory, and device memory where the backend reads bf16
 * (fc->device.reads_bf16; elsewhere a device call is an error). */
void embedding_rows_forward_bf16(float *out, const int32_t *inp, const bf16 *wte, int64_t v0, int64_t rows,
                                 int64_t BT, int64_t C, struct exec_ctx *fc);
/* embedding_rows_backward from the bf16 data path's bf16 stream gradient
 * (exact: each element widened as it is added; dwte, dwpe fp32):
 * embedding_rows_backward's bits on the widened dout. Host memory, and
 * device memory where the backend reads bf16, as the forward. */
void embedding_rows_backward_bf16(float *dwte, float *dwpe, const bf16 *dout, const int32_t *inp, int64_t v0,
                                  int64_t rows, int64_t B, int64_t T, int64_t C, struct exec_ctx *fc);

/* out (N,OC) += bias: a row-parallel layer adds its (replicated) bias once,
 * after the partial outputs were summed. matmul_forward with a bias is the
 * GEMM, then exactly this loop, so the two orders give the same bits. */
void bias_add(float *out, const float *bias, int64_t N, int64_t OC, struct exec_ctx *fc);

/* Causal multi-head attention. qkv (B,T,3C) holds q, k, v; out (B,T,C);
 * att (B,NH,T,T) gets the softmax probabilities (upper triangle zero).
 * Per head, QK^T and PV are GEMMs over the full T x T square: the FLOPs
 * counted (fc->attention) are these issued ones, twice the causal half. */
void attention_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       struct exec_ctx *fc);
/* dqkv overwritten. scratch: attention_backward_scratch(B, T, NH) floats,
 * sized for the OpenMP thread count at the time of the call. */
void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                        int64_t B, int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc);
/* Floats of attention_backward's scratch: one T x T score gradient per
 * thread, for min(omp_get_max_threads(), B NH) threads (never more than
 * the B NH T^2 probabilities, so the count cannot overflow). */
size_t attention_backward_scratch(int64_t B, int64_t T, int64_t NH);

/* The plain attention on the bf16 data path (model/gpt.c: the attention
 * on acts_direct), host memory only: qkv is the saved bf16 store, read as
 * it is; the probabilities and the output go to their stores (bf16) or,
 * for selective recompute's one-layer probabilities (fp32 with
 * bf16_values: rounded as they are stored, no pass of their own) and
 * output, to fp32; probabilities with neither pointer set are not stored
 * (selective's forward, which needs only the output).
 * Per (b, h) a thread widens the head's q, k, v (and in the backward its
 * bf16 probabilities) into its own fp32 tiles and runs the fp32 kernels'
 * GEMMs and softmax on them in the same order: each equals "widen the
 * bf16 inputs, run attention_forward / attention_backward, narrow the
 * outputs" bit for bit, without a whole-layer fp32 copy. Rounding points
 * (the numerics a GPU port is held to):
 *   attention_forward_bf16:  q, k, v widened exactly; S = q k^T scale, the
 *     causal softmax P and out = P v in fp32 (out from the unrounded P);
 *     P and out each rounded once to bf16 as they are stored.
 *   attention_backward_bf16: q, k, v and P widened exactly (P as stored:
 *     rounded once in the forward); dout and dS fp32; dq, dk, dv computed
 *     in fp32 and rounded once to bf16 as they are stored in dqkv (the
 *     QKV GEMM's dout, which that GEMM would round alike).
 * scratch: attention_bf16_scratch(B, T, C, NH) floats (per thread: P and
 * dS, T x T each, and q, k, v and the output, T x hs each), garbage on
 * return. FLOPs as the fp32 forms'. */
void attention_forward_bf16(struct act_out out, struct act_out att, const bf16 *qkv, float *scratch, int64_t B,
                            int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc);
void attention_backward_bf16(bf16 *dqkv, const float *dout, const bf16 *qkv, struct operand att, float *scratch,
                             int64_t B, int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc);
size_t attention_bf16_scratch(int64_t B, int64_t T, int64_t C, int64_t NH);

/* The same causal attention keeping only each row's log-sum-exp of the
 * scaled scores instead of the probabilities (FlashAttention-2, Dao 2023;
 * --attention flash): lse (B,NH,T), lse[b][h][t] = log sum_{j<=t}
 * exp(q_t.k_j / sqrt(hs)); the backward recomputes P = exp(S - lse) from
 * qkv. No T x T matrix exists: the CPU (model/cpu/attention_lse.c) works
 * row by row in fp32, keys in tiles of ATTENTION_LSE_TILE with an online
 * softmax; the CUDA build's device path is model/cuda/flash_attention.h
 * (bf16 operands, fp32 accumulation: GPU and CPU agree to about 1e-2
 * normwise, not to fp32). Both deterministic. FLOPs, as issued:
 *   CPU  fc->attention: the causal products only, 2 hs per score and
 *        product, over the B NH T (T+1)/2 scores (key j <= query t):
 *        forward QK^T and PV, 2 B C T (T+1); backward QK^T again (the
 *        probabilities), dP = dout V^T, dV, dQ, dK, 5 B C T (T+1).
 *        fc->other: forward per score 5 (scale, max, subtract, exp, sum),
 *        per row and key tile hs + 4 (new max, the correction
 *        exp(m_old - m_new) (2), l times it, O times it), per row hs + 3
 *        (1/l, O times it, log, add); backward per score 5 (scale,
 *        subtract lse, exp, dP - D, times P), per row 4 hs (D =
 *        rowsum(dout * out), dQ's and dK's final scale by 1/sqrt(hs)).
 *   GPU  flash_attention_flops' issued numbers: whole 64 x 64 tiles
 *        (the masked half of the diagonal tiles and the rows past T
 *        included) in fc->attention, its elementwise count in fc->other.
 * Model FLOPs (MFU) are neither: PaLM's causal 6 L C T per token
 * (train/theory/theory_flops.c), whatever the attention. */
enum { ATTENTION_LSE_TILE = 64 };
void attention_lse_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                           struct exec_ctx *fc);
/* dqkv (every element) overwritten from dout (B,T,C) and the forward's
 * qkv, out and lse. scratch: attention_lse_backward_scratch(B, T, NH)
 * floats (D = rowsum(dout * out) per head and row); garbage on return. */
void attention_lse_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                            const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc);
/* The same on the bf16 data path (model/gpt.c's attention on acts_direct
 * with --attention flash), host memory (device memory: the CUDA
 * backend's FlashAttention-2 kernels): qkv and, in the backward,
 * the output are the saved bf16 stores, read as they are; the lse stays
 * fp32. Per (b, h) a thread widens the head's q, k, v (and out) into its
 * own fp32 tiles and runs the fp32 kernel's rows on them, in the same
 * order: each equals "widen the bf16 inputs, run attention_lse_forward /
 * attention_lse_backward, narrow the output" bit for bit. Rounding points:
 *   attention_lse_forward_bf16:  q, k, v widened exactly; scores, the
 *     online softmax, O and lse in fp32; out rounded once to bf16 as it is
 *     stored; lse fp32.
 *   attention_lse_backward_bf16: q, k, v and out widened exactly (out as
 *     stored: D = rowsum(dout * out) from the rounded output, as the fp32
 *     path's widened copy gave); dout fp32; dq, dk, dv accumulated and
 *     scaled in fp32, rounded once to bf16 as they are stored in dqkv
 *     (the QKV GEMM's dout, which that GEMM would round alike).
 * scratch: attention_lse_bf16_scratch(B, T, C, NH) floats (D, then per
 * thread q, k, v, out, dk and dv, T x hs each), garbage on return. FLOPs
 * as the fp32 forms'. */
void attention_lse_forward_bf16(bf16 *out, float *lse, const bf16 *qkv, float *scratch, int64_t B, int64_t T,
                                int64_t C, int64_t NH, struct exec_ctx *fc);
void attention_lse_backward_bf16(bf16 *dqkv, float *scratch, const float *dout, const bf16 *qkv, const bf16 *out,
                                 const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                                 struct exec_ctx *fc);
size_t attention_lse_bf16_scratch(int64_t B, int64_t T, int64_t C, int64_t NH);
/* The same for a team of `threads` (the theory's: a run's --threads). */
size_t attention_lse_bf16_scratch_for(int64_t B, int64_t T, int64_t C, int64_t NH, int threads);
/* Floats of attention_lse_backward_bf16's scratch in `space`: the CPU
 * form's attention_lse_bf16_scratch on the host; on device memory
 * (the CUDA backend's FlashAttention-2 kernels) their layout: D, dout in
 * bf16, the per-key-block dQ partials (model/cuda/device_scratch.h; about
 * 5 B T C floats at T = 1024). */
size_t attention_lse_bf16_scratch_in(enum mem_space space, int64_t B, int64_t T, int64_t C, int64_t NH);
/* B NH T: one definition for the CPU and the GPU (flash_attention.h's
 * flash_attention_backward_scratch is the same count). */
size_t attention_lse_backward_scratch(int64_t B, int64_t T, int64_t NH);

/* GELU, GPT-2's tanh approximation. */
void gelu_forward(float *out, const float *inp, int64_t n, struct exec_ctx *fc);
/* dinp = gelu'(inp) * dout (overwritten; may alias dout). */
void gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n, struct exec_ctx *fc);
/* The two on the saved bf16 copies (act_dtype bf16, the GEMMs reading the
 * store), in one pass each without the fp32 tensors between:
 *   forward:  pre_store = pre rounded to bf16 (nearest even), out = gelu of
 *             that rounded value, rounded to bf16: the bits of
 *             buf_round_narrow, gelu_forward and buf_narrow in turn;
 *   backward: dinp = gelu'(inp) * dout with inp the saved bf16 pre-activation:
 *             gelu_backward's bits on its widened copy (may alias dout).
 * FLOPs as gelu_forward/backward's. */
void gelu_forward_bf16(bf16 *out, bf16 *pre_store, const float *pre, int64_t n, struct exec_ctx *fc);
void gelu_backward_bf16(float *dinp, const bf16 *inp, const float *dout, int64_t n, struct exec_ctx *fc);
/* gelu_backward_bf16 on the bf16 data path's bf16 gradients (model/gpt.c:
 * the FC feature gradient; on a GPU the CUDA backend's, the same bits):
 * inp and dout widened exactly, gelu'(inp) dout in fp32 rounded once as it
 * is stored (may alias dout): gelu_backward's bits on the widened copies,
 * narrowed. FLOPs as gelu_backward's. */
void gelu_backward_bf16_grads(bf16 *dinp, const bf16 *inp, const bf16 *dout, int64_t n, struct exec_ctx *fc);

/* out = a + b */
void residual_forward(float *out, const float *a, const float *b, int64_t n, struct exec_ctx *fc);

/* Softmax cross-entropy over the first V of Vp logits per row (N rows).
 * Writes per-row losses and returns their sum. When dloss != 0, overwrites
 * logits with dlogits = (softmax - onehot) * dloss (padding columns 0). */
double crossentropy_forward_backward(float *logits, float *losses, const int32_t *targets, int64_t N,
                                     int64_t V, int64_t Vp, float dloss, struct exec_ctx *fc);

/* crossentropy_forward_backward on bf16 logits (the head at tp = 1 on a
 * GPU whose backend reads bf16, model/gpt_acts.c: acts_logits_bf16),
 * dlogits written over them in place as bf16 (padding 0): the fp32 form's
 * math on the widened logits, each dlogit rounded once (model/cuda/: the
 * order and bounds). Device memory where the backend reads bf16 only: on
 * the host (whose head keeps fp32 logits) a call stops the run. */
double crossentropy_forward_backward_bf16(bf16 *logits, float *losses, const int32_t *targets, int64_t N, int64_t V,
                                          int64_t Vp, float dloss, struct exec_ctx *fc);

/* Vocabulary-parallel cross-entropy in three local passes around two
 * collectives (model/tensor_parallel/vocab_parallel.c runs them): each of N rows holds Vl
 * logits of this rank's vocabulary slice [v0, v0 + Vl), of which the first
 * `valid` are real tokens (the rest padding: never in the softmax, dlogits
 * 0). With v0 = 0, valid = V and Vl = Vp the three give
 * crossentropy_forward_backward's values bit for bit.
 *   row_max:  maxv[i] = the max of the row's valid logits (-inf if none)
 *   exp_sum:  sum[i] = sum of exp(l - maxv) over valid logits (in place:
 *             the logits become those exponentials when dloss != 0);
 *             target[i] = the target's logit if this slice holds it, else 0
 *   finish:   losses[i] = log(sum) + maxv - target (the sums and the max
 *             global by now); with dloss != 0 the exponentials become
 *             dlogits = (softmax - onehot) dloss. Returns the losses' sum. */
void crossentropy_row_max(const float *logits, float *maxv, int64_t N, int64_t Vl, int64_t valid,
                          struct exec_ctx *fc);
void crossentropy_exp_sum(float *logits, const float *maxv, float *sum, float *target, const int32_t *targets,
                          int64_t N, int64_t Vl, int64_t v0, int64_t valid, bool in_place, struct exec_ctx *fc);
double crossentropy_finish(float *logits, float *losses, const float *maxv, const float *sum, const float *target,
                           const int32_t *targets, int64_t N, int64_t Vl, int64_t v0, int64_t valid, float dloss,
                           struct exec_ctx *fc);

#ifdef __cplusplus
}
#endif

#endif
