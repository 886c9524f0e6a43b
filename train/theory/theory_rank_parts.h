/* What train/theory/'s trainer theory shares between its files: a rank's
 * layout and positions at its grid place (theory_place.c), and the
 * model's path as the config decides it (theory_acts.c: the predicates
 * model/gpt_acts.c decides at run time). train/theory/accounting.h holds the
 * theory the trainer reports; these are its parts. */
#ifndef SHARDLAB_THEORY_RANK_PARTS_H
#define SHARDLAB_THEORY_RANK_PARTS_H

#include <stdbool.h>

#include "accounting.h"
#include "../config/config.h"
#include "layout.h"

/* ---- train/theory/theory_place.c */
/* The rank's layout at grid place p (rank_place_layout). */
struct model_layout theory_layout_of(const struct config *c, struct rank_place p);
/* A cp rank holds T/cp positions of every sequence, and its model runs on
 * those alone (parallel/engine.c): what it saves, and its working buffers
 * but the ring's, are those of the model at seq_len T/cp. */
struct config theory_at_rank_positions(const struct config *c, struct rank_place p);
/* Sequence parallelism where it acts: gpt_init_chunks ignores it at tp = 1. */
bool theory_sp_on(const struct config *c, struct rank_place p);

/* ---- train/theory/theory_acts.c */
static inline bool theory_flash(const struct config *c) { return c->attention == ATTENTION_FLASH; }
/* Whether the layer GEMMs read bf16 operands as they are: bf16 GEMMs on
 * the CPU (oneDNN) or on a GPU under --gpu_path v2 (cuBLASLt); with bf16
 * params the engine then hands them over unwidened (parallel/engine.c:
 * params_direct). */
bool theory_direct_gemms(const struct config *c);
/* Whether model/gpt.c runs its bf16 data path (acts_direct: the kernels
 * read and write the bf16 stores): bf16 activations and bf16 GEMMs on the
 * CPU, or on a GPU under --gpu_path v2, without full recompute or
 * sequence parallelism. */
bool theory_acts_direct(const struct config *c, bool sp);
/* Whether the kernels read the bf16 stores as they are, the attention's
 * (the ring's) included (model/gpt_acts.c's acts_stores_direct): GPT-2's
 * theory_acts_direct; LLaMA's whenever its activations are bf16. The ring
 * keeps and sends K and V in bf16 then. */
bool theory_stores_direct(const struct config *c, bool sp);
/* Whether the head writes its logits (and dlogits) in bf16 (model/
 * gpt_acts.c's acts_logits_bf16): the bf16 data path on device memory (a
 * GPU's is --gpu_path v2's) at tp = 1, else fp32 logits. */
bool theory_logits_bf16(const struct config *c, bool sp, int tp);
/* Elements per token of model/gpt.c's one-layer fp32 working buffer with
 * bf16 activations (not full recompute's: that is an activation): the
 * whole block, or on the bf16 data path only what a kernel still reads or
 * writes in fp32: the FC output 4C/t (flash's fp32 lse is never in it). */
double theory_work_block_per_token(const struct config *c, int tp, bool sp, bool att);

#endif
