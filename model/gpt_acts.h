/* The activation-storage policy of model/gpt.c, private to model/
 * (implemented in model/gpt_acts.c): which saved tensors a layer keeps,
 * where and in which dtype, and which of the bf16 data path's forms run
 * (include/gpt.h, gpt_init_chunks). */
#ifndef SHARDLAB_MODEL_GPT_ACTS_H
#define SHARDLAB_MODEL_GPT_ACTS_H

#include <stdbool.h>
#include <stddef.h>

#include "gpt.h"

static inline size_t btc(const struct gpt *m) { return (size_t)m->B * m->shape.T * m->shape.C; }
static inline size_t bt(const struct gpt *m) { return (size_t)m->B * m->shape.T; }
/* This rank's part of the stream: (B,T,C), or (B,T/tp,C) with sp. */
static inline size_t btc_l(const struct gpt *m) { return (size_t)m->B * m->Ts * m->shape.C; }
static inline size_t bt_l(const struct gpt *m) { return (size_t)m->B * m->Ts; }
static inline size_t head_size(const struct gpt *m) { return (size_t)(m->shape.C / m->shape.NH); }
static inline bool flash(const struct gpt *m) { return m->attention == ATTENTION_FLASH; }
static inline bool acts_bf16(const struct gpt *m) { return m->act_dtype == DTYPE_BF16; }

/* This rank's size of saved tensor a (flash: ACT_ATT is the lse, B NH/tp T). */
size_t acts_numel(const struct gpt *m, enum layer_act a);
/* Whether tensor a is in the per-layer block, and the block's elements. */
bool acts_in_block(const struct gpt *m, enum layer_act a);
size_t acts_block_total(const struct gpt *m);
/* Elements of the one-layer fp32 working buffer (work_acts) with bf16
 * activations (not full recompute's). */
size_t acts_work_total(const struct gpt *m);

/* The path: the layer GEMMs read the bf16 stores (gemm_reads_store); on
 * the host every kernel does, the attention (the ring's included) and the
 * activation gradients too (acts_direct). gpt_acts.c says why each. */
bool acts_gemm_reads_store(const struct gpt *m);
bool acts_direct(const struct gpt *m);
/* Whether the kernels read and write the bf16 stores as they are, the
 * attention's (the ring's) included: GPT-2's acts_direct; LLaMA's whenever
 * its activations are bf16 (model/llama.c: its kernels always do, on fp32
 * GEMMs too). The ring (model/context_parallel/ring.c) keeps and sends K
 * and V in the stores' dtype by it. */
bool acts_stores_direct(const struct gpt *m);
/* The head's logits (and dlogits) bf16: acts_direct on device memory at tp = 1. */
bool acts_logits_bf16(const struct gpt *m);

/* A just-computed saved tensor rounded to what act_dtype holds (and
 * stored); acts_round: layer tensor a of view v, as the view keeps it. */
void acts_round_saved(const struct gpt *m, float *p, size_t n, bf16 *store);
void acts_round(const struct gpt *m, struct layer_view *v, enum layer_act a, size_t n);

/* Residual-stream entry i of slot s (act_dtype); its fp32 view (`work`
 * serves when bf16, widened when `load`); its bf16 store (NULL when fp32);
 * as the layer reads it (the store as it is under acts_direct). */
void *acts_resid_at(struct gpt *m, int s, int i);
float *acts_resid_view(struct gpt *m, int s, int i, float *work, bool load);
bf16 *acts_resid_store(struct gpt *m, int s, int i);
struct operand acts_stream_in(struct gpt *m, int s, int i, float *work);
/* A tensor of the model's, in its memory space, as an operand. */
static inline struct operand acts_op_f32(const struct gpt *m, const float *x) { return operand_f32(x, m->space); }
static inline struct operand acts_op_bf16(const struct gpt *m, const bf16 *x) { return operand_bf16(x, m->space); }
/* The same as a kernel's output. */
static inline struct act_out acts_out_f32(const struct gpt *m, float *x) { return act_out_f32(x, m->space); }
static inline struct act_out acts_out_bf16(const struct gpt *m, bf16 *x) { return act_out_bf16(x, m->space); }
/* Local layer i's saved tensors in slot s (widened from the stores where
 * the path reads fp32 copies, when `load`); the final LayerNorm's output. */
struct layer_view acts_layer_view(struct gpt *m, int s, int i, bool load);
float *acts_lnf_view(struct gpt *m, int s, bool load);

/* Which slots hold a kind of saved tensor: all, or only one chunk's. */
enum { GPT_EVERY_CHUNK = -1 };
/* One tracked buffer holding a kind of saved tensor for every slot that
 * has it (only_chunk's, or GPT_EVERY_CHUNK): per_layer bytes per layer of
 * the slot's chunk plus `fixed`; each slot's member at slot_member (an
 * offsetof in struct gpt_slot) points at its part. */
void *gpt_per_slot(struct gpt *m, struct mem_tracker *mem, enum mem_category c, const char *name, size_t per_layer,
                   size_t fixed, int only_chunk, size_t slot_member);

/* GPT-2's activations and scratch (model/gpt_acts.c) and LLaMA's
 * (model/llama.c), for gpt_init_chunks: m's sizes and slots are set. */
void gpt2_init_chunks(struct gpt *m, struct mem_tracker *mem);
void llama_init_chunks(struct gpt *m, struct mem_tracker *mem);

#endif
