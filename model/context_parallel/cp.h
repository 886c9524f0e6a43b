/* Context parallelism for model/ (the room model/context_parallel/; what
 * other folders need of it, the split of a sequence, is
 * include/context_parallel.h, split.c). Private to model/: model/gpt.c
 * meets its context-parallel group only here, through the group's
 * collectives (include/collectives.h: function pointers, never MPI, never
 * parallel/). With one rank in the group (or no group: cp NULL) every call
 * is what gpt.c ran before cp existed, on the same buffers.
 *
 * A rank holds T/cp positions of every sequence (the load-balanced split:
 * chunks r and 2 cp - 1 - r of 2 cp). Everything in a layer works token
 * by token except two things, which this room supplies:
 *
 * positions.c: the position embedding at each local position's global
 *   position (wpe rows r c.. and (2 cp - 1 - r) c..), forward and backward.
 *
 * ring.c: ring attention (Liu et al. 2023, "Ring Attention with Blockwise
 *   Transformers"; the load-balanced split as in Megatron-LM's context
 *   parallelism and LLaMA 3, Dubey et al. 2024, section 3.3.2). Forward,
 *   per layer, cp steps: at step i this rank's queries attend to the keys
 *   and values of cp rank (rank - i) mod cp, while that block is passed on
 *   to rank + 1 and the next one arrives from rank - 1 (isend/irecv posted
 *   before the block is computed, waited after). A block's visible keys
 *   for a query are a prefix of the block (cp_visible_keys): none (a fully
 *   masked block: skipped), all, or the causal diagonal. Each block gives
 *   every query row a normalised partial output o_b and its log-sum-exp
 *   lse_b (the flash attention's row, model/cpu/attention_rows.h), merged
 *   into the running (out, lse) by
 *       lse' = log(exp(lse) + exp(lse_b))
 *       out' = out exp(lse - lse') + o_b exp(lse_b - lse')
 *   which is the softmax over the union of the keys: the saved lse is the
 *   whole row's, as the single-rank flash attention's. Backward, cp steps
 *   again: the keys and values go round once more (the next in flight),
 *   and each block's dK, dV accumulator travels with it, collecting every
 *   rank's contribution, then one last hop home: dQ stays local.
 *
 * On the bf16 data path (acts_direct) the ring reads and writes the
 * bf16 stores as the single-rank bf16 flash attention does
 * (attention_lse_*_bf16, include/layers.h): each thread widens its head's
 * q and the block's k, v into its fp32 tiles and runs the fp32 rows on
 * them, so every value equals the fp32 ring's on the widened stores. K
 * and V travel in bf16, as stored (a copy, no rounding); the lse, the
 * running output, dQ and the dK, dV accumulators stay fp32 (an accumulator
 * gathers every rank's part: rounding it on the way would round cp
 * times). Rounding points: the output once, after the last block, as it
 * is stored; dQ, dK (each times 1/sqrt(hs)) and dV once, as they are
 * stored in the bf16 dqkv (the QKV GEMM's dout).
 *
 * Bytes each rank sends per layer per micro-batch (the cp group's
 * counters; KV = B (T/cp) 2 (C/tp) x the stores' element size, 4 or 2,
 * and KV32 the same in fp32, the accumulators' size):
 *   forward   (cp - 1) KV
 *   backward  (cp - 1) KV (keys and values) + cp KV32 (their gradients)
 * and full recompute adds one forward's. Host memory only: a device run
 * with cp > 1 is refused (train/run/run_device_grid.c). */
#ifndef SHARDLAB_MODEL_CP_H
#define SHARDLAB_MODEL_CP_H

#include <stdbool.h>
#include <stdint.h>

#include "context_parallel.h"
#include "../parallel_points.h"
#include "gpt.h"

/* Whether m runs ring attention (a cp group of 2 or more). */
static inline bool cp_ring_on(const struct gpt *m) { return m->cp && m->cp->size > 1; }
/* This rank's split of the whole sequence (T = m->shape.T x cp). */
struct cp_split cp_model_split(const struct gpt *m);

/* out (B, n, C) holds local positions [t0, t0 + n) of each sequence:
 * out[b,t,:] += wpe[global position of t,:]. */
void cp_positions_add(struct gpt *m, float *out, const float *wpe, int t0, int n);
/* pos (B, T/cp) <- each local row's global position (RoPE's angle). */
void cp_rope_positions(struct gpt *m, int32_t *pos);
/* The embedding's backward over every local position (dout (B, T/cp, C),
 * fp32 or, on the bf16 data path, bf16; inputs (B, T/cp)): dwte's rows [v0, v0 + rows) and dwpe at the global
 * positions (embedding_rows_backward, run by run). */
void cp_embedding_backward(struct gpt *m, float *dwte, float *dwpe, struct operand dout, const int32_t *inputs,
                           int64_t v0, int64_t rows);

/* Ring attention (above) over this rank's heads: qkv (B, T/cp, 3 Cl),
 * out (B, T/cp, Cl), lse (B, NHl, T/cp); the backward writes dqkv (B, T/cp,
 * 3 Cl) from dout, using D (B NHl T/cp floats of scratch). The _bf16
 * forms on the bf16 data path: qkv, out and dqkv the bf16 stores (dout
 * fp32), scratch attention_lse_bf16_scratch(B, T/cp, Cl, NHl) floats (D,
 * then each thread's tiles), garbage on return. */
void cp_ring_attention_forward(struct gpt *m, float *out, float *lse, const float *qkv);
void cp_ring_attention_backward(struct gpt *m, float *dqkv, float *D, const float *dout, const float *qkv,
                                const float *out, const float *lse);
void cp_ring_attention_forward_bf16(struct gpt *m, bf16 *out, float *lse, const bf16 *qkv, float *scratch);
void cp_ring_attention_backward_bf16(struct gpt *m, bf16 *dqkv, float *scratch, const float *dout, const bf16 *qkv,
                                     const bf16 *out, const float *lse);

#endif
