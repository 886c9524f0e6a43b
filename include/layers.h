/* Forward/backward pairs for every GPT-2 layer, in plain fp32 C (GEMMs via
 * OpenBLAS sgemm). Shapes follow llm.c: B batch, T time, C channels, OC
 * output channels, NH heads, Vp padded vocab. Activations are row-major
 * (B, T, ...). Weight and bias gradients are ACCUMULATED (+=); input
 * gradients are OVERWRITTEN unless a function says otherwise. */
#ifndef SHARDLAB_LAYERS_H
#define SHARDLAB_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "counters.h"

/* out[b,t,:] = wte[inp[b,t],:] + wpe[t,:] */
void encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T, int C);
/* dwte[inp[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:] */
void encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T, int C);

/* LayerNorm over C with eps 1e-5; saves mean and rstd (N = B*T rows). */
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                       const float *bias, int N, int C, struct flop_counter *fc);
/* dinp is ACCUMULATED (+=): the residual stream's gradient passes through. */
void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, int N, int C,
                        struct flop_counter *fc);

/* out (N,OC) = inp (N,C) . weight(OC,C)^T + bias; bias may be NULL. */
void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C, int OC,
                    struct flop_counter *fc);
/* dinp = dout . weight (overwritten); dweight += dout^T . inp; dbias += colsum(dout). */
void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, int N, int C, int OC, struct flop_counter *fc);

/* Causal multi-head attention. qkv (B,T,3C) holds q, k, v; out (B,T,C);
 * att (B,NH,T,T) gets the softmax probabilities (upper triangle zero). */
void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                       struct flop_counter *fc);
/* dqkv overwritten. scratch: T floats per OpenMP thread. */
void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                        int B, int T, int C, int NH, struct flop_counter *fc);

/* GELU, GPT-2's tanh approximation. */
void gelu_forward(float *out, const float *inp, int n, struct flop_counter *fc);
/* dinp = gelu'(inp) * dout (overwritten; may alias dout). */
void gelu_backward(float *dinp, const float *inp, const float *dout, int n, struct flop_counter *fc);

/* out = a + b */
void residual_forward(float *out, const float *a, const float *b, int n, struct flop_counter *fc);

/* Softmax cross-entropy over the first V of Vp logits per row (N rows).
 * Writes per-row losses and returns their sum. When dloss != 0, overwrites
 * logits with dlogits = (softmax - onehot) * dloss (padding columns 0). */
double crossentropy_forward_backward(float *logits, float *losses, const int32_t *targets, int N, int V,
                                     int Vp, float dloss, struct flop_counter *fc);

#endif
