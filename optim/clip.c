#include <math.h>

#include "optim.h"

double grad_sum_squares(const void *grad, enum dtype grad_dtype, size_t n) {
    double s = 0.0;
    if (grad_dtype == DTYPE_FP32) {
        const float *g = grad;
#pragma omp parallel for reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    } else {
        const bf16 *g = grad;
#pragma omp parallel for reduction(+ : s)
        for (size_t i = 0; i < n; i++) {
            double x = bf16_to_f32(g[i]);
            s += x * x;
        }
    }
    return s;
}

float clip_scale(double global_norm, float max_norm) {
    if (max_norm <= 0.0f || !(global_norm > max_norm)) return 1.0f;
    return (float)(max_norm / global_norm);
}
