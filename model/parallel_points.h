/* Where the model meets tensor and context parallelism, as data: two
 * tables of the points model/gpt.c calls, each chosen once per model by
 * its grid (gpt_init_chunks, gpt_set_context_parallel). With one rank in a
 * group the model takes its own plain table (model/gpt.c: the identities
 * and the one-rank kernels), so a run without tp or cp enters neither
 * room; with more it takes the room's (model/tensor_parallel/tp.h,
 * model/context_parallel/cp.h), whose points at one rank would give the
 * same bits.
 *
 * Tensor parallelism's points (Shoeybi et al. 2019, Figure 3: f before a
 * column-parallel GEMM, g after a row-parallel one; with sequence
 * parallelism, Korthikanti et al. 2022, g and g-bar; tp.h says each):
 *   column_input     before a column-parallel GEMM: its whole input from
 *                    the LayerNorm output this rank holds (f's forward);
 *   column_grad      after its backward: the input gradient summed (f's
 *                    backward);
 *   row_output       after a row-parallel GEMM: the partial outputs summed
 *                    (g's forward);
 *   row_output_grad  before its backward: the output gradient whole (g's
 *                    backward);
 *   ln_grad*         where a LayerNorm's weight and bias gradients go
 *                    (with sp: this slice's partial sums, all-reduced at
 *                    done);
 *   crossentropy     the loss over this rank's vocabulary slice.
 * Context parallelism's (docs/CP.md): wpe's rows and gradient at each
 * local position's global one, RoPE's positions likewise, and ring attention (NULL: the model's own
 * attention kernels, every key local). */
#ifndef SHARDLAB_MODEL_PARALLEL_POINTS_H
#define SHARDLAB_MODEL_PARALLEL_POINTS_H

#include <stdint.h>

#include "gpt.h"
#include "tensor_parallel.h"

struct tp_points {
    const float *(*column_input)(struct gpt *m, float *ln);
    void (*column_grad)(struct gpt *m, float *d);
    void (*row_output)(struct gpt *m, float *full, float *out);
    const float *(*row_output_grad)(struct gpt *m);
    void (*ln_grads_begin)(struct gpt *m);
    float *(*ln_grad)(struct gpt *m, float *dw_tensor, int k);
    void (*ln_grads_done)(struct gpt *m, float *const *dw_tensors, int n);
    /* logits (N, Vl) become dlogits when dloss != 0; returns the sum of the
     * N losses; scratch: 2N floats */
    double (*crossentropy)(struct gpt *m, float *logits, float *losses, const int32_t *targets, int64_t N,
                           float dloss, float *scratch);
};

struct cp_points {
    void (*positions_add)(struct gpt *m, float *out, const float *wpe, int t0, int n);
    /* pos (B, T local) <- each local row's global position (llama's RoPE) */
    void (*rope_positions)(struct gpt *m, int32_t *pos);
    void (*embedding_backward)(struct gpt *m, float *dwte, float *dwpe, struct operand dout, const int32_t *inputs,
                               int64_t v0, int64_t rows);
    /* ring attention over the cp group (flash only); NULL: local attention */
    void (*attention_forward)(struct gpt *m, float *out, float *lse, const float *qkv);
    void (*attention_backward)(struct gpt *m, float *dqkv, float *D, const float *dout, const float *qkv,
                               const float *out, const float *lse);
    void (*attention_forward_bf16)(struct gpt *m, bf16 *out, float *lse, const bf16 *qkv, float *scratch);
    void (*attention_backward_bf16)(struct gpt *m, bf16 *dqkv, float *scratch, const float *dout, const bf16 *qkv,
                                    const bf16 *out, const float *lse);
};

/* The plain model's tables (model/gpt.c) and the rooms'
 * (model/tensor_parallel/conjugates.c, model/context_parallel/ring.c). */
extern const struct tp_points PLAIN_TP_POINTS;
extern const struct cp_points PLAIN_CP_POINTS;
extern const struct tp_points TENSOR_PARALLEL_POINTS;
extern const struct cp_points CONTEXT_PARALLEL_POINTS;

#endif
