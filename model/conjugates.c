/* f and g, or g and g-bar, for model/gpt.c (model/conjugates.h). */
#include "conjugates.h"

#include "bufops.h"
#include "sequence_parallel.h"
#include "tensor_parallel.h"

static size_t btc(const struct gpt *m) { return (size_t)m->B * m->shape.T * m->shape.C; }

static struct seq_split seq_split(const struct gpt *m) {
    return (struct seq_split){.tp = m->tp, .B = m->B, .T = m->shape.T, .C = m->shape.C, .space = m->space};
}

const float *conj_column_input(struct gpt *m, float *ln) {
    if (!m->sp) {
        tp_f_forward(m->tp, ln, btc(m), DTYPE_FP32);
        return ln;
    }
    struct seq_split q = seq_split(m);
    sp_g_forward(&q, m->gathered, ln);
    return m->gathered;
}

void conj_column_grad(struct gpt *m, float *d) {
    if (!m->sp) {
        tp_f_backward(m->tp, d, btc(m), DTYPE_FP32);
        return;
    }
    struct seq_split q = seq_split(m);
    sp_g_backward(&q, d, d);
}

void conj_row_output(struct gpt *m, float *full, float *out) {
    if (!m->sp) {
        tp_g_forward(m->tp, out, btc(m), DTYPE_FP32);
        return;
    }
    struct seq_split q = seq_split(m);
    sp_gbar_forward(&q, full, out);
}

const float *conj_row_output_grad(struct gpt *m) {
    if (!m->sp) {
        tp_g_backward(m->tp, m->dresid, btc(m), DTYPE_FP32);
        return m->dresid;
    }
    struct seq_split q = seq_split(m);
    sp_gbar_backward(&q, m->gathered, m->dresid);
    return m->gathered;
}

void conj_ln_grads_begin(struct gpt *m) {
    if (m->sp) buf_zero(m->space, m->ln_grads, 4 * (size_t)m->shape.C * sizeof(float));
}

float *conj_ln_grad(struct gpt *m, float *dw_tensor, int k) {
    return m->sp ? m->ln_grads + (size_t)k * m->shape.C : dw_tensor;
}

void conj_ln_grads_done(struct gpt *m, float *const *dw_tensors, int n) {
    if (!m->sp) return;
    size_t C = (size_t)m->shape.C;
    tp_all_reduce(m->tp, m->ln_grads, (size_t)n * C, DTYPE_FP32);
    for (int k = 0; k < n; k++) buf_add(m->space, dw_tensors[k], m->ln_grads + (size_t)k * C, DTYPE_FP32, C);
}
