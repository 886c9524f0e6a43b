/* The GPT-2 model as math plus activation memory, for the units one rank
 * holds (include/layout.h). It owns no parameters: every per-unit function
 * takes that unit's weights (and fp32 gradient accumulators), which the
 * engine provides (gathered from shards): fp32 views (widened from bf16,
 * or the fp32 params themselves), or on the CPU with bf16 params and bf16
 * GEMMs the bf16 params as they are beside an fp32 view of the unit's
 * vectors only, packed (include/layout.h: *_vec_offset) (struct
 * unit_weights, below: the GEMM weights and the embedding table are read
 * as bf16, nothing widened only to be rounded back). That keeps this file
 * free of parallel code.
 *
 * Saved activations live in micro-batch slots: a slot holds everything one
 * micro-batch's forward leaves for its backward, so a pipeline schedule can
 * keep several micro-batches in flight. Scratch is shared by all slots.
 *
 * Under the interleaved schedule a rank holds several model chunks
 * (include/layout.h); every slot belongs to one chunk and holds one
 * micro-batch of that chunk's layers (gpt_init_chunks), so the functions
 * below work on the slot's chunk: its layers [l0, l1), the embedding only
 * in chunk 0, the head only in the last chunk.
 *
 * One micro-batch in slot s, of a chunk holding layers [l0, l1):
 *   first stage: gpt_embed_forward(s, w_embed, inputs)
 *   other stages: the incoming activation is written to gpt_stage_input(s)
 *   gpt_layer_forward(s, l, w) for l = l0..l1-1
 *   last stage: gpt_head_forward(s, w_head, wte, targets) -> loss
 *   other stages: gpt_stage_output(s) is the outgoing activation
 * and backward:
 *   last stage: gpt_head_backward(s, w_head, wte, dw_head, dwte)
 *   other stages: the incoming gradient is set by gpt_stage_grad_in
 *   gpt_layer_backward(s, l, w, dw) for l = l1-1..l0
 *   first stage: gpt_embed_backward(s, dw_embed)
 *   other stages: gpt_stage_grad_out gives the outgoing gradient
 *
 * Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): with the layout's
 * tp > 1 the model runs this rank's slice of every layer (tp_rank_slice,
 * include/tensor_parallel.h: NH/tp heads, 4C/tp FC features, Vp/tp
 * vocabulary rows) and meets the other ranks of its group through m->tp, the group's collectives, with
 * Megatron's f and g (model/tensor_parallel/tp.h). Saved tensors of the
 * split layers are local (qkv 3C/tp, att NH/tp T T, atty C/tp, fch and
 * fch_gelu 4C/tp, logits Vp/tp); ln1, ln2, res2 and the residual stream
 * are whole on every rank, unless sequence parallelism (Korthikanti et al.
 * 2022; gpt_init_chunks' sequence_parallel, a no-op at tp = 1) keeps them, the
 * final LayerNorm's output and the stage boundary activation to this
 * rank's slice of the sequence, (B, T/tp, C), with g and g-bar
 * (model/tensor_parallel/tp.h) at the column- and row-parallel GEMMs. */
#ifndef SHARDLAB_GPT_H
#define SHARDLAB_GPT_H

#include <stdint.h>

#include "collectives.h"
#include "counters.h"
#include "device.h"
#include "dtype.h"
#include "layers.h"
#include "layout.h"
#include "mem.h"
#include "tensor_parallel.h"

/* In the order of what it drops: nothing, the attention probabilities
 * (selective), all but each layer's input (full). The trainer's model and
 * the planner's formulas (train/theory/theory.h) share it. */
enum recompute_mode { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL };

/* The attention kernels (include/layers.h; --attention):
 *  plain  attention_forward/backward: ACT_ATT holds the (B,NH,T,T)
 *         probabilities, in act_dtype
 *  flash  attention_lse_forward/backward: ACT_ATT holds each row's
 *         log-sum-exp, (B,NH,T), always fp32 (a bf16 lse would be off by
 *         up to |lse| 2^-9 in every probability the backward rebuilds):
 *         beside the act_dtype block per layer (slot.layer_lse), or in
 *         full recompute's fp32 one-layer buffer. The backward recomputes
 *         the probabilities itself, so selective recompute has nothing
 *         left to drop: with flash it keeps what none keeps and
 *         recomputes nothing (the same memory, FLOPs and results). */
enum attention_kind { ATTENTION_PLAIN, ATTENTION_FLASH };

/* Tensors one layer saves for its backward (Korthikanti-style itemisation;
 * no dropout). All are stored in act_dtype. */
enum layer_act {
    ACT_LN1,        /* (B,T,C)    ln1 output, input of the QKV GEMM (sizes: tp = 1) */
    ACT_QKV,        /* (B,T,3C)   q, k, v */
    ACT_ATT,        /* (B,NH,T,T) softmax probabilities; flash: (B,NH,T) lse, fp32 */
    ACT_ATTY,       /* (B,T,C)    attention output, input of the projection */
    ACT_RES2,       /* (B,T,C)    residual after attention, input of ln2 */
    ACT_LN2,        /* (B,T,C)    ln2 output, input of the FC GEMM */
    ACT_FCH,        /* (B,T,4C)   FC output, input of GELU */
    ACT_FCH_GELU,   /* (B,T,4C)   GELU output, input of the FC projection */
    ACT_NUM
};

/* LayerNorm statistics, kept in fp32 whatever act_dtype is. */
enum layer_stat { STAT_LN1_MEAN, STAT_LN1_RSTD, STAT_LN2_MEAN, STAT_LN2_RSTD, STAT_NUM };

/* fp32 pointers to one layer's saved tensors (NULL for those the bf16
 * data path keeps only as bf16: gpt_init_chunks). */
struct layer_view {
    float *act[ACT_NUM];
    float *stat[STAT_NUM];
    /* where each tensor is kept as bf16 (act_dtype bf16 without full
     * recompute, for the tensors of the per-layer block), else NULL */
    bf16 *store[ACT_NUM];
};

/* Activation checkpointing (Korthikanti et al. 2022):
 *  none       every layer keeps all ACT_* tensors;
 *  selective  the attention probabilities (the s^2 term) are not kept: the
 *             backward recomputes them from q and k (with flash attention
 *             there are none to drop: selective is none, attention_kind);
 *  full       a layer keeps only its input (the residual stream); the
 *             backward re-runs the layer's forward into a one-layer fp32
 *             buffer first. */
/* What one micro-batch's forward saves (act_dtype unless noted). */
struct gpt_slot {
    void *resid;          /* (n+1) x (B,T,C): the residual stream entering each of the n layers, then the last output */
    void *layer_acts;     /* n x the kept ACT_* tensors (none and selective) */
    float *layer_stats;   /* n x STAT_NUM x (B,T), fp32 (none and selective) */
    float *layer_lse;     /* flash attention: n x (B,NH,T) lse, fp32 (none and selective); llama: n x its
                           * attention's fp32 tensor (the probabilities, or the ring's lse) */
    void *lnf;            /* last stage: (B,T,C) */
    float *lnf_stats;     /* last stage: 2 x (B,T): mean, rstd */
    void *logits;         /* last stage: (B,T,Vp) fp32, or bf16 where model/gpt_acts.c's acts_logits_bf16 says
                           * (device memory whose backend reads bf16, tp = 1); becomes dlogits in place */
    float *losses;        /* last stage: (B,T) fp32 */
    int32_t *inputs;      /* first stage: (B,T) token ids, for the embedding's backward */
    int32_t *targets;     /* last stage: (B,T) */
    int chunk;            /* the model chunk whose micro-batch this slot holds */
    int l0, n_layers;     /* that chunk's first layer and layer count */
};

enum { GPT_MAX_SLOTS = 64 };

struct gpt {
    struct model_shape shape;
    const struct model_layout *lay;
    int B;
    struct collectives *tp; /* the tensor-parallel group (f, g); NULL: no group (lay->rank.tp must be 1) */
    bool sp;              /* sequence parallelism over tp (> 1) ranks */
    /* the context-parallel group (ring attention, model/context_parallel/cp.h;
     * gpt_set_context_parallel); NULL or one rank: none. With cp ranks the
     * model's shape.T is this rank's T/cp positions of every sequence
     * (include/context_parallel.h), and every size below is of those. */
    struct collectives *cp;
    float *ring;          /* cp > 1: the ring's buffers (gpt_ring_bytes) */
    /* where the model meets tp and cp (model/parallel_points.h): the plain
     * model's own points, or the rooms' */
    const struct tp_points *tpp;
    const struct cp_points *cpp;
    struct vocab_slice vocab; /* this rank's rows of the vocabulary (the whole at tp 1) */
    int position0;        /* its first position of the sequence (with sp; else 0) */
    int Ts;               /* positions per rank's sequence slice: T/tp with sp, else T */
    int NHl, Cl, Fl;      /* this rank's heads, attention width C/tp, FC width 4C/tp */
    int n_layers;         /* this rank's layers over all its chunks */
    enum dtype act_dtype;
    enum recompute_mode recompute;
    enum attention_kind attention;
    int cp_size;           /* the context-parallel group's size (gpt_init_chunks' cp) */
    enum dtype gemm_dtype; /* the layer GEMMs' operands (gpt_init_chunks) */
    enum mem_space space; /* where its buffers live: its buffer operations run there (bufops.h) */
    struct exec_ctx *flops;
    int n_slots;
    struct gpt_slot slot[GPT_MAX_SLOTS];
    int chunk_slot0[RANK_MAX_CHUNKS], chunk_slots[RANK_MAX_CHUNKS]; /* chunk c: slots [slot0, slot0 + slots) */

    float *full_stats;    /* full recompute: one layer's STAT_NUM x (B,T), fp32 */
    float *att_recompute; /* selective, plain attention: one layer's probabilities, fp32 */

    /* fp32 working copies of one layer's tensors when act_dtype is bf16;
     * with full recompute, work_acts is the recompute buffer (always) */
    float *work_acts, *work_resid_in, *work_resid_out, *work_lnf;

    /* backward scratch, fp32; on the bf16 data path with its attention
     * (gpt_acts.c's acts_direct) the three activation gradients passed between
     * kernels are bf16 instead (the *16 members; the fp32 ones NULL) */
    float *dresid;        /* (B,T,C) gradient of the residual stream */
    float *dfc;           /* (B,T,F/tp): the gradient at the FC features (fch, fch_gelu) */
    float *dqkv;          /* (B,T,3C) */
    bf16 *dresid16, *dfc16, *dqkv16;
    float *dtemp_btc;     /* (B,T,C) whole: a GEMM input's gradient (dln1, dln2, datty) before its
                           * LayerNorm or attention backward; the head's cross-entropy sums */
    float *att_scratch;   /* attention_backward_scratch() floats: T x T per thread;
                           * flash: attention_lse_backward_scratch(), B NH T; the bf16
                           * data path: attention_bf16_scratch(), attention_lse_bf16_scratch() */
    /* llama only (model/llama.c; else NULL) */
    float *dtemp2_btc;    /* (B,T,C): the gate's share of d ln2, added to dtemp_btc */
    float *rope_freqs;    /* hs/2 RoPE frequencies */
    float *gemm_in, *gemm_out; /* bf16 stores with fp32 GEMMs: an operand widened, an output (or a bf16
                                * dout) in fp32 before it is stored */
    int32_t *rope_pos;    /* (B,T) each token's position */
    /* the architecture's blocks (gpt_init_chunks, from the layout's shape) */
    const struct model_blocks *blocks;
    /* sequence parallelism only (else NULL) */
    float *gathered;      /* (B,T,C): a gathered LayerNorm output, or the gathered gradient of the stream */
    float *ln_grads;      /* 4C: one micro-batch's LayerNorm weight and bias gradients of this slice,
                           * all-reduced over the group before they join the accumulator */
};

/* A unit's weights as the engine hands them over (parallel/engine.c:
 * all_gather): two tensors, since bf16 params read as they are leave the
 * unit's vectors (LayerNorms, biases, wpe) to an fp32 copy of their own.
 *   params: the whole unit, bf16 (read as it is) or fp32 (the fp32 params,
 *           or the bf16 ones widened); its GEMM weights are operands.
 *   vec:    the fp32 vectors: packed at the layout's *_vec_offset beside
 *           bf16 params, else params' own values at *_offset
 *           (model/unit_tensors.h picks the offsets). */
struct unit_weights {
    struct operand params;
    const float *vec;
};

/* An architecture's per-unit functions, which the engine calls (the
 * gpt_* forms below are GPT-2's; model/llama.c has LLaMA 3's). wte: the
 * head's GEMM weight (GPT-2's tied wte; LLaMA's own lm_head), dwte its
 * gradient accumulator. */
struct model_blocks {
    void (*embed_forward)(struct gpt *m, int slot, struct unit_weights w_embed, const int32_t *inputs);
    void (*layer_forward)(struct gpt *m, int slot, int l, struct unit_weights w);
    float (*head_forward)(struct gpt *m, int slot, struct unit_weights w_head, struct operand wte,
                          const int32_t *targets, float dloss);
    void (*head_backward)(struct gpt *m, int slot, struct unit_weights w_head, struct operand wte, float *dw_head,
                          float *dwte);
    void (*layer_backward)(struct gpt *m, int slot, int l, struct unit_weights w, float *dw);
    void (*embed_backward)(struct gpt *m, int slot, float *dw_embed);
};
extern const struct model_blocks GPT2_BLOCKS, LLAMA_BLOCKS;

/* Floats of LLaMA's attention scratch for micro-batch B, T positions, this
 * rank's NH query and KV key/value heads of hs, a team of `threads`
 * (model/llama.c: the OpenMP team's at allocation): the plain backward's
 * dS, or with bf16 stores the bf16 forms' tiles. The theory prices it by
 * the same function, at the run's threads. */
size_t llama_attention_scratch(int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t hs, bool bf16_stores,
                               int threads);

/* GPT-2 initial values of elements [lo, hi) of unit `unit` into dst
 * (model/init.c): drawn by reference index, so they do not depend on the
 * layout or the rank count. */
void gpt_init_unit(const struct model_layout *lay, int unit, size_t lo, size_t hi, float *dst, float std,
                   uint64_t seed);

/* Elements of saved tensor a of one layer for micro-batch B on one rank of
 * a tensor-parallel group of tp (local sizes; tp = 1: the whole layer);
 * with sequence parallelism (sp) ln1, res2 and ln2 are (B,T/tp,C). */
size_t gpt_layer_act_numel(const struct model_shape *s, int B, int tp, bool sp, enum layer_act a);

/* Allocates chunk_slots[c] slots of activations for each of the layout's
 * chunks (their sum at most GPT_MAX_SLOTS) and the scratch for micro-batch
 * B in memory space `space` through the tracker (model/gpt.c; the buffers
 * and gpt_free: model/gpt_acts.c): a slot holds its chunk's layers, and
 * only the last chunk's (on the last stage) the head's tensors, only chunk
 * 0's (on the first) the token ids. sequence_parallel:
 * the layout's tp must divide T (the caller checks); ignored at tp = 1. On
 * an allocation failure the tracker records it (mem_failed) and the model
 * must only be freed. cp: the context-parallel group's size (the ring
 * attention, gpt_set_context_parallel; on the bf16 data path it reads
 * and writes the bf16 stores as the single-rank attention does). flops:
 * the run's counter, which also says whether a GPU's backend reads bf16
 * (flops->device.reads_bf16: the bf16 data path on device memory too). */
void gpt_init_chunks(struct gpt *m, const struct model_layout *lay, int B, const int *chunk_slots,
                     enum dtype act_dtype, enum dtype gemm_dtype, enum recompute_mode recompute,
                     enum attention_kind attention, bool sequence_parallel, int cp, struct mem_tracker *mem,
                     enum mem_space space, struct exec_ctx *flops);
/* gemm_dtype above: the run's GEMM operands (config key gemm_dtype as the
 * run resolved it). With bf16 GEMMs and bf16 activations (no full
 * recompute, no sequence parallelism) the model runs its bf16 data path:
 * the layer GEMMs read their saved inputs (ln1, the attention output, ln2,
 * the GELU output) from the bf16 store (matmul_*_bf16, matmul_*_mixed)
 * instead of fp32 views, and on the host (on a GPU whose backend reads
 * bf16: flops->device.reads_bf16) the LayerNorms and residual adds
 * read and write the stores too (layernorm_*_bf16, residual_forward_bf16):
 * the residual stream, ln1, res2, ln2 and the GELU output then have no fp32
 * copy at all; the attention (the ring of cp > 1 included) reads and
 * writes its stores too, and the one-layer fp32 working buffer holds only
 * the FC output. The forward's values are those of the fp32 copies
 * rounded alike (every kernel computes in fp32 and rounds once where it
 * stores). The activation gradients passed
 * between kernels (dresid, dfc, dqkv) are bf16 too, each rounded once
 * where a kernel or GEMM stores it (layers.h states where). */
void gpt_free(struct gpt *m, struct mem_tracker *mem);
/* Context parallelism (model/context_parallel/cp.h): attention runs as a
 * ring over cp (needs --attention flash: the log-sum-exp form), and the
 * position embedding at global positions. The model must have been made
 * with shape.T = T/cp (the engine does: parallel/engine.c), on host
 * memory. With cp > 1 it allocates the ring's buffers through mem (a
 * failure is the tracker's, mem_failed). */
void gpt_set_context_parallel(struct gpt *m, struct collectives *cp, struct mem_tracker *mem);
/* Bytes of those buffers for micro-batch B, T_local = T/cp positions, this
 * tp rank's attention width Cl, key/value width KVw (Cl without GQA) and
 * heads NHl: two K,V blocks (one computed, one arriving), three dK,dV
 * blocks (one filled, one in flight, one arriving), each B T_local 2 KVw,
 * and a block's partial output (the bf16
 * path: the running output, then dQ) and lse; the K,V blocks in kv_bytes
 * per element (the stores' dtype: 2 on the bf16 data path, else 4), the
 * rest fp32. */
size_t gpt_ring_bytes(int B, int T_local, int Cl, int KVw, int NHl, size_t kv_bytes);
/* The slot of micro-batch k of chunk c: slot0 + k mod slots. */
int gpt_chunk_slot(const struct gpt *m, int chunk, int k);

/* inputs: (B,T) token ids, copied into the slot. */
void gpt_embed_forward(struct gpt *m, int slot, struct unit_weights w_embed, const int32_t *inputs);
/* The slot's incoming / outgoing activation: gpt_stage_numel values in
 * act_dtype, (B,T,C), or this rank's (B,T/tp,C) with sequence parallelism. */
size_t gpt_stage_numel(const struct gpt *m);
void *gpt_stage_input(struct gpt *m, int slot);
void *gpt_stage_output(struct gpt *m, int slot);
void gpt_layer_forward(struct gpt *m, int slot, int l, struct unit_weights w);
/* targets: (B,T) token ids copied into the slot, with the batch: the
 * engine's way where the backend queues the step (device.targets_with_batch:
 * before the micro-batch's kernels, so no host copy waits on the forward
 * mid-step). */
void gpt_upload_targets(struct gpt *m, int slot, const int32_t *targets);
/* Final LayerNorm, tied LM head (wte: the embedding's or the head's copy),
 * cross-entropy. Returns the mean loss over B*T tokens. With dloss != 0
 * the logits become dlogits (scaled by dloss). targets NULL: the slot's,
 * uploaded with the batch (gpt_upload_targets); else copied in here. */
float gpt_head_forward(struct gpt *m, int slot, struct unit_weights w_head, struct operand wte,
                       const int32_t *targets, float dloss);
/* dwte: where wte's gradient accumulates (the embedding's or the copy's). */
void gpt_head_backward(struct gpt *m, int slot, struct unit_weights w_head, struct operand wte, float *dw_head,
                       float *dwte);
/* The gradient of the residual stream, gpt_stage_numel values in act_dtype
 * (as the pipeline passes it): gpt_stage_grad_in sets it from the incoming
 * gradient of a stage that is not the last, gpt_stage_grad_out writes the
 * outgoing one after its first layer's backward (a copy where the model
 * keeps it bf16, else a conversion from fp32). */
void gpt_stage_grad_in(struct gpt *m, const void *src);
void gpt_stage_grad_out(struct gpt *m, void *dst);
void gpt_layer_backward(struct gpt *m, int slot, int l, struct unit_weights w, float *dw);
void gpt_embed_backward(struct gpt *m, int slot, float *dw_embed);

/* After gpt_head_forward with dloss = 0: the first n logits (of Vp, V
 * valid) of sequence b at position t, copied out of the model's memory into
 * the host's row as fp32 (bf16 logits widened, exactly), for sampling.
 * tp = 1 only: a rank of a larger group holds its vocabulary slice. */
void gpt_logits_row(const struct gpt *m, int slot, int b, int t, float *row, int64_t n);

#endif
