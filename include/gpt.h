/* The GPT-2 model as math plus activation memory. It owns no parameters:
 * every per-unit function takes fp32 views of that unit's weights (and
 * gradient accumulators), which the engine provides (widened from bf16,
 * gathered from shards, or the fp32 params themselves). That keeps this file
 * free of precision plumbing and of any parallel code.
 *
 * One step, for units u = 0 (embeddings + head) and 1..L (layers):
 *   gpt_embed_forward(w0), gpt_layer_forward(l, w[1+l]) for l = 0..L-1,
 *   gpt_head_forward(w0) -> loss, gpt_head_backward(w0, dw0),
 *   gpt_layer_backward(l, w, dw) for l = L-1..0, gpt_embed_backward(dw0). */
#ifndef SHARDLAB_GPT_H
#define SHARDLAB_GPT_H

#include <stdint.h>

#include "config.h"
#include "counters.h"
#include "dtype.h"
#include "layout.h"
#include "mem.h"

/* Tensors one layer saves for its backward (Korthikanti-style itemisation;
 * no dropout). All are stored in act_dtype. */
enum layer_act {
    ACT_LN1,        /* (B,T,C)    ln1 output, input of the QKV GEMM */
    ACT_QKV,        /* (B,T,3C)   q, k, v */
    ACT_ATT,        /* (B,NH,T,T) softmax probabilities */
    ACT_ATTY,       /* (B,T,C)    attention output, input of the projection */
    ACT_RES2,       /* (B,T,C)    residual after attention, input of ln2 */
    ACT_LN2,        /* (B,T,C)    ln2 output, input of the FC GEMM */
    ACT_FCH,        /* (B,T,4C)   FC output, input of GELU */
    ACT_FCH_GELU,   /* (B,T,4C)   GELU output, input of the FC projection */
    ACT_NUM
};

/* LayerNorm statistics, kept in fp32 whatever act_dtype is. */
enum layer_stat { STAT_LN1_MEAN, STAT_LN1_RSTD, STAT_LN2_MEAN, STAT_LN2_RSTD, STAT_NUM };

/* fp32 pointers to one layer's saved tensors. */
struct layer_view {
    float *act[ACT_NUM];
    float *stat[STAT_NUM];
};

/* Activation checkpointing (Korthikanti et al. 2022):
 *  none       every layer keeps all ACT_* tensors;
 *  selective  the attention probabilities (the s^2 term) are not kept: the
 *             backward recomputes them from q and k;
 *  full       a layer keeps only its input (the residual stream); the
 *             backward re-runs the layer's forward into a one-layer fp32
 *             buffer first. */
struct gpt {
    struct model_shape shape;
    const struct model_layout *lay;
    int B;
    enum dtype act_dtype;
    enum recompute_mode recompute;
    struct flop_counter *flops;

    /* saved activations (act_dtype unless noted) */
    void *resid;          /* (L+1) x (B,T,C): the residual stream entering each layer, then the last output */
    void *layer_acts;     /* L x the kept ACT_* tensors (none and selective) */
    float *layer_stats;   /* L (full: 1) x STAT_NUM x (B,T), fp32 */
    float *att_recompute; /* selective: one layer's probabilities, fp32 */
    void *lnf;            /* (B,T,C) */
    float *lnf_stats;     /* 2 x (B,T): mean, rstd */
    float *logits;        /* (B,T,Vp) fp32; becomes dlogits in place */
    float *losses;        /* (B,T) fp32 */
    int32_t *inputs, *targets;

    /* fp32 working copies of one layer's tensors when act_dtype is bf16;
     * with full recompute, work_acts is the recompute buffer (always) */
    float *work_acts, *work_resid_in, *work_resid_out, *work_lnf;

    /* backward scratch, fp32 */
    float *dresid;        /* (B,T,C) gradient of the residual stream */
    float *dbig;          /* (B,T,4C) */
    float *dqkv;          /* (B,T,3C) */
    float *dmid;          /* (B,T,C) */
    float *att_scratch;   /* T per OpenMP thread */
};

/* GPT-2 random init of a full fp32 parameter buffer (model/init.c). */
void gpt_init_weights(const struct model_layout *lay, float *w, float std, uint64_t seed);

size_t gpt_layer_act_numel(const struct model_shape *s, int B, enum layer_act a);

/* Allocates activations and scratch for micro-batch B through the tracker. */
void gpt_init(struct gpt *m, const struct model_layout *lay, int B, enum dtype act_dtype,
              enum recompute_mode recompute, struct mem_tracker *mem, struct flop_counter *flops);
void gpt_free(struct gpt *m, struct mem_tracker *mem);

/* inputs, targets: (B,T) token ids, copied in. */
void gpt_embed_forward(struct gpt *m, const float *w0, const int32_t *inputs);
void gpt_layer_forward(struct gpt *m, int l, const float *w);
/* Final LayerNorm, tied LM head, cross-entropy. Returns the mean loss over
 * B*T tokens. With dloss != 0 the logits become dlogits (scaled by dloss). */
float gpt_head_forward(struct gpt *m, const float *w0, const int32_t *targets, float dloss);
void gpt_head_backward(struct gpt *m, const float *w0, float *dw0);
void gpt_layer_backward(struct gpt *m, int l, const float *w, float *dw);
void gpt_embed_backward(struct gpt *m, float *dw0);

/* After gpt_head_forward with dloss = 0: the logits (Vp floats, V valid) of
 * sequence b at position t, for sampling. */
const float *gpt_logits_at(const struct gpt *m, int b, int t);

#endif
