/* The position embedding at global positions (model/context_parallel/cp.h):
 * a rank's local positions are at most two runs of consecutive global ones
 * (its two chunks), each one call of the embedding kernels per sequence. */
#include "cp.h"

#include "layers.h"

struct cp_split cp_model_split(const struct gpt *m) {
    int cp = m->cp ? m->cp->size : 1, rank = m->cp ? m->cp->rank : 0;
    return (struct cp_split){.T = m->shape.T * cp, .cp = cp, .rank = rank};
}

void cp_positions_add(struct gpt *m, float *out, const float *wpe, int t0, int n) {
    int64_t C = m->shape.C;
    if (!cp_ring_on(m)) {
        positions_add(out, wpe + (size_t)t0 * C, m->B, n, C, m->flops);
        return;
    }
    struct cp_run runs[CP_MAX_RUNS];
    int k = cp_position_runs(cp_model_split(m), t0, n, runs);
    for (int b = 0; b < m->B; b++)
        for (int i = 0; i < k; i++)
            positions_add(out + ((size_t)b * n + (size_t)(runs[i].local0 - t0)) * C, wpe + (size_t)runs[i].global0 * C,
                          1, runs[i].n, C, m->flops);
}

void cp_rope_positions(struct gpt *m, int32_t *pos) {
    struct cp_split s = cp_model_split(m);
    for (int64_t i = 0; i < (int64_t)m->B * m->shape.T; i++)
        pos[i] = (int32_t)cp_global_position(s, (int)(i % m->shape.T));
}

/* The embedding's backward of b sequences of n positions whose gradient
 * rows start at row `at` of dout (either dtype). */
static void rows_backward(struct gpt *m, float *dwte, float *dwpe, struct operand dout, size_t at,
                          const int32_t *inputs, int64_t v0, int64_t rows, int64_t b, int64_t n) {
    int64_t C = m->shape.C;
    struct operand d = operand_at(dout, at * (size_t)C);
    if (operand_is_bf16(d))
        embedding_rows_backward_bf16(dwte, dwpe, operand_as_bf16(d, __func__), inputs, v0, rows, b, n, C, m->flops);
    else embedding_rows_backward(dwte, dwpe, operand_as_f32(d, __func__), inputs, v0, rows, b, n, C, m->flops);
}

void cp_embedding_backward(struct gpt *m, float *dwte, float *dwpe, struct operand dout, const int32_t *inputs,
                           int64_t v0, int64_t rows) {
    int64_t C = m->shape.C, T = m->shape.T;
    if (!cp_ring_on(m)) {
        rows_backward(m, dwte, dwpe, dout, 0, inputs, v0, rows, m->B, T);
        return;
    }
    struct cp_run runs[CP_MAX_RUNS];
    int k = cp_position_runs(cp_model_split(m), 0, (int)T, runs);
    for (int b = 0; b < m->B; b++)
        for (int i = 0; i < k; i++) {
            size_t at = (size_t)b * T + (size_t)runs[i].local0;
            rows_backward(m, dwte, dwpe + (size_t)runs[i].global0 * C, dout, at, inputs + at, v0, rows, 1, runs[i].n);
        }
}
