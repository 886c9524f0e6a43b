#include "parallel_points.h"

#include "layers.h"

/* The plain model's points (model/parallel_points.h): one rank in the tp
 * group and in the cp group. f and g are the identities, the
 * cross-entropy runs over the whole vocabulary, wpe's positions are the
 * local ones and every key is local (model/gpt.c's attention kernels). */

static const float *plain_column_input(struct gpt *m, float *ln) {
    (void)m;
    return ln;
}

static void plain_no_sum(struct gpt *m, float *d) { (void)m, (void)d; }

static void plain_row_output(struct gpt *m, float *full, float *out) { (void)m, (void)full, (void)out; }

static const float *plain_row_output_grad(struct gpt *m) { return m->dresid; }

static void plain_ln_grads_begin(struct gpt *m) { (void)m; }

static float *plain_ln_grad(struct gpt *m, float *dw_tensor, int k) {
    (void)m, (void)k;
    return dw_tensor;
}

static void plain_ln_grads_done(struct gpt *m, float *const *dw_tensors, int n) { (void)m, (void)dw_tensors, (void)n; }

static double plain_crossentropy(struct gpt *m, float *logits, float *losses, const int32_t *targets, int64_t N,
                                 float dloss, float *scratch) {
    (void)scratch; /* the fused form: the three passes' bits in one */
    return crossentropy_forward_backward(logits, losses, targets, N, m->vocab.V, m->vocab.Vl, dloss, m->flops);
}

const struct tp_points PLAIN_TP_POINTS = {plain_column_input, plain_no_sum, plain_row_output,
                                                 plain_row_output_grad, plain_ln_grads_begin, plain_ln_grad,
                                                 plain_ln_grads_done, plain_crossentropy};

static void plain_positions_add(struct gpt *m, float *out, const float *wpe, int t0, int n) {
    positions_add(out, wpe + (size_t)t0 * m->shape.C, m->B, n, m->shape.C, m->flops);
}

static void plain_embedding_backward(struct gpt *m, float *dwte, float *dwpe, struct operand dout,
                                     const int32_t *inputs, int64_t v0, int64_t rows) {
    int64_t B = m->B, T = m->shape.T, C = m->shape.C;
    const char *op = __func__;
    if (operand_is_bf16(dout))
        embedding_rows_backward_bf16(dwte, dwpe, operand_as_bf16(dout, op), inputs, v0, rows, B, T, C, m->flops);
    else embedding_rows_backward(dwte, dwpe, operand_as_f32(dout, op), inputs, v0, rows, B, T, C, m->flops);
}

static void plain_rope_positions(struct gpt *m, int32_t *pos) {
    for (int64_t i = 0; i < (int64_t)m->B * m->shape.T; i++) pos[i] = (int32_t)(i % m->shape.T);
}

const struct cp_points PLAIN_CP_POINTS = {.positions_add = plain_positions_add,
                                          .rope_positions = plain_rope_positions,
                                          .embedding_backward = plain_embedding_backward};
