/* LLaMA 3's ops (issue 38): RMSNorm, rotary embeddings, SwiGLU and
 * grouped-query attention, beside include/layers.h's GPT-2 ops, whose
 * conventions (shapes, accumulation, FLOP counts, the bf16 forms' rounding
 * points) they follow. Dispatched like them (model/layer_ops.h); only the
 * host has forms yet (model/cpu/rmsnorm.c, rope.c, swiglu.c,
 * attention_gqa.c): a call on device memory stops the run, naming the op. */
#ifndef SHARDLAB_LLAMA_LAYERS_H
#define SHARDLAB_LLAMA_LAYERS_H

#include "layers.h"

/* LLaMA 3's kernels (llm.c's train_llama3.py, Meta's reference).
 * Shapes and accumulation as above; FLOPs to
 * fc->other (fc->attention for the GQA's GEMMs). The bf16 forms load the
 * bf16 stores as they are, compute in fp32 the fp32 forms' operations in
 * the same order, and round once as they store, so each equals "widen,
 * fp32 kernel, narrow" and is within half a bf16 ulp, 2^-8 |y| (bf16's
 * unit roundoff, LLAMA_BF16_ROUNDING), of the fp32 form's y on the same
 * widened inputs. Rounding points are stated with each. */
/* FLOPs per element (fc->other), each exp or division one:
 *   RMSNorm forward  x^2 summed (2), x rstd w (2);
 *   RMSNorm backward the row's mean(w dy xhat) (4), dx (6), dw (3);
 *   RoPE             a pair's 4 products and 2 sums, per element;
 *   SwiGLU forward   sigmoid (4: negate, exp, add, divide), silu, times up;
 *   SwiGLU backward  sigmoid (4), dup (2), silu' and dgate (6). */
enum { RMSNORM_FLOPS_FWD_PER_ELEM = 4, RMSNORM_FLOPS_BWD_PER_ELEM = 13, ROPE_FLOPS_PER_ELEM = 3,
       SWIGLU_FLOPS_FWD = 6, SWIGLU_FLOPS_BWD = 12 };
#define LLAMA_BF16_ROUNDING 0x1p-8 /* bf16 unit roundoff: half an ulp of its 8-bit significand, relative */

/* RMSNorm (N rows of C): out = x rstd w, rstd = 1 / sqrt(mean(x^2) + eps)
 * saved per row (fp32). No bias: the reference has none. */
void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, float eps, int64_t N,
                         int64_t C, struct exec_ctx *fc);
/* dinp ACCUMULATED (+=), like layernorm_backward's; dweight accumulated. */
void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          const float *rstd, int64_t N, int64_t C, struct exec_ctx *fc);
/* Rounding points: inp widened exactly; mean(x^2), rstd (kept fp32) and
 * x rstd w in fp32; out rounded once to bf16. Backward: inp widened; dout,
 * dweight fp32; dinp accumulated in its dtype (act_out: fp32, or bf16
 * widened, the row's term added in fp32, rounded once as stored). */
void rmsnorm_forward_bf16(bf16 *out, float *rstd, const bf16 *inp, const float *weight, float eps, int64_t N,
                              int64_t C, struct exec_ctx *fc);
void rmsnorm_backward_bf16(struct act_out dinp, float *dweight, const float *dout, const bf16 *inp,
                               const float *weight, const float *rstd, int64_t N, int64_t C, struct exec_ctx *fc);

/* RoPE's frequencies and the optional LLaMA 3.1 scaling (the reference's
 * apply_scaling: factor 8, low_freq_factor 1, high_freq_factor 4,
 * original_context 8192 in LLaMA 3.1). */
struct rope_config {
    float theta;             /* rope_theta: 10000 (LLaMA 2), 500000 (LLaMA 3) */
    bool scaled;             /* use_scaled_rope */
    double factor;           /* the low frequencies' divisor */
    double low_freq_factor;  /* wavelengths above original_context / this are divided by factor */
    double high_freq_factor; /* wavelengths below original_context / this are kept */
    double original_context; /* the pre-training context the scaling extends */
};
/* A model's RoPE: theta, and with `scaled` LLaMA 3.1's constants (the
 * reference's apply_scaling: factor 8, low 1, high 4, context 8192). */
static inline struct rope_config rope_config_llama3(float theta, bool scaled) {
    struct rope_config c; /* no designators: the CUDA build's C++ includes this too */
    c.theta = theta;
    c.scaled = scaled;
    c.factor = scaled ? 8.0 : 0.0;
    c.low_freq_factor = scaled ? 1.0 : 0.0;
    c.high_freq_factor = scaled ? 4.0 : 0.0;
    c.original_context = scaled ? 8192.0 : 0.0;
    return c;
}
/* freqs[i] = theta^(-2i/hs), i < hs/2, then scaled if cfg->scaled. */
void rope_freqs(float *freqs, int64_t hs, const struct rope_config *cfg);
/* out = inp with each of the first `heads` heads (hs values each) of each
 * of N rows (ld apart) rotated pair by pair: (x[2i], x[2i+1]) times
 * e^{i pos[r] freqs[i]}, the angle rounded to fp32 as in the reference.
 * q and k are adjacent in a GQA qkv row, so one call with heads = NH + KV
 * and ld = (NH + 2 KV) hs rotates both. pos: one position per row (global:
 * a context-parallel rank passes its rows'). out may be inp (in place);
 * what is outside the heads is not touched. Backward: the rotation by the
 * opposite angle (overwrites dinp; may be dout). */
void rope_forward(float *out, const float *inp, int64_t ld, const float *freqs, const int32_t *pos, int64_t N,
                      int64_t heads, int64_t hs, struct exec_ctx *fc);
void rope_backward(float *dinp, const float *dout, int64_t ld, const float *freqs, const int32_t *pos, int64_t N,
                       int64_t heads, int64_t hs, struct exec_ctx *fc);
/* Rounding points: each pair widened exactly, rotated in fp32, each
 * output rounded once to bf16 (forward and backward alike). */
void rope_forward_bf16(bf16 *out, const bf16 *inp, int64_t ld, const float *freqs, const int32_t *pos, int64_t N,
                           int64_t heads, int64_t hs, struct exec_ctx *fc);
void rope_backward_bf16(bf16 *dinp, const bf16 *dout, int64_t ld, const float *freqs, const int32_t *pos,
                            int64_t N, int64_t heads, int64_t hs, struct exec_ctx *fc);

/* SwiGLU's elementwise part: out = silu(gate) * up over n elements, with
 * up = c_fc's and gate = c_fc2's outputs (the GEMMs are matmul_*'s).
 * Backward: dup = dout silu(gate), dgate = dout up silu'(gate), both
 * overwritten (may alias up and gate). */
void swiglu_forward(float *out, const float *up, const float *gate, int64_t n, struct exec_ctx *fc);
void swiglu_backward(float *dup, float *dgate, const float *dout, const float *up, const float *gate, int64_t n,
                         struct exec_ctx *fc);
/* Rounding points: up and gate widened exactly; silu and the products in
 * fp32; out rounded once. Backward: up, gate (and dout in the _grads form)
 * widened; dup and dgate computed in fp32, stored as fp32 (bf16_cpu) or
 * rounded once each (bf16_grads_cpu). */
void swiglu_forward_bf16(bf16 *out, const bf16 *up, const bf16 *gate, int64_t n, struct exec_ctx *fc);
void swiglu_backward_bf16(float *dup, float *dgate, const float *dout, const bf16 *up, const bf16 *gate,
                              int64_t n, struct exec_ctx *fc);
void swiglu_backward_bf16_grads(bf16 *dup, bf16 *dgate, const bf16 *dout, const bf16 *up, const bf16 *gate,
                                    int64_t n, struct exec_ctx *fc);

/* Causal grouped-query attention, plain (att: B NH T T probabilities,
 * saved): qkv rows of (NH + 2 KV) hs (q heads, k heads, v heads, c_attn's
 * order), KV dividing NH, query head h reading KV head h / (NH / KV); out
 * (B, T, NH hs). With KV = NH it is attention_forward/backward's layout
 * and arithmetic. Backward: dqkv overwritten, dk and dv each the sum over
 * the query heads sharing them; scratch attention_gqa_backward_scratch_for
 * floats. */
void attention_gqa_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t NH,
                               int64_t KV, int64_t hs, struct exec_ctx *fc);
void attention_gqa_backward(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                                int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t hs, struct exec_ctx *fc);
/* The scratch floats for a team of `threads`: the forms above use the
 * calling thread's OpenMP team (omp_get_max_threads()); a theory prices a
 * run's threads without running them. */
size_t attention_gqa_backward_scratch_for(int64_t B, int64_t T, int64_t KV, int threads);
/* Rounding points: q, k, v widened exactly; S, P in fp32 and P stored
 * fp32 in att (not rounded); out rounded once to bf16. Backward: q, k, v
 * widened, P and dout read fp32; each dq rounded once; each dk and dv
 * summed in fp32 over its NH / KV query heads, then rounded once.
 * Scratch: the _scratch_for functions' floats. */
void attention_gqa_forward_bf16(bf16 *out, float *att, const bf16 *qkv, float *scratch, int64_t B, int64_t T,
                                    int64_t NH, int64_t KV, int64_t hs, struct exec_ctx *fc);
void attention_gqa_backward_bf16(bf16 *dqkv, const float *dout, const bf16 *qkv, const float *att, float *scratch,
                                     int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t hs,
                                     struct exec_ctx *fc);
size_t attention_gqa_forward_bf16_scratch_for(int64_t B, int64_t T, int64_t NH, int64_t hs, int threads);
size_t attention_gqa_backward_bf16_scratch_for(int64_t B, int64_t T, int64_t KV, int64_t hs, int threads);

#endif
