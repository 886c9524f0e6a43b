/* The conjugate operators f and g (include/tensor_parallel.h). */
#include "tensor_parallel.h"

static void all_reduce(struct collectives *tp, void *buf, size_t n, enum dtype dt) {
    if (tp->size > 1) tp->all_reduce_sum(tp, buf, n, dt);
}

void tp_f_forward(struct collectives *tp, void *x, size_t n, enum dtype dt) {
    (void)tp, (void)x, (void)n, (void)dt; /* identity: every rank already holds x whole */
}

void tp_f_backward(struct collectives *tp, void *dx, size_t n, enum dtype dt) { all_reduce(tp, dx, n, dt); }

void tp_g_forward(struct collectives *tp, void *x, size_t n, enum dtype dt) { all_reduce(tp, x, n, dt); }

void tp_g_backward(struct collectives *tp, void *dx, size_t n, enum dtype dt) {
    (void)tp, (void)dx, (void)n, (void)dt; /* identity: the sum's gradient reaches each part unchanged */
}
