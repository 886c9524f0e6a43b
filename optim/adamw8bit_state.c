/* 8-bit AdamW's states to and from fp32 (include/optim.h), for checkpoints
 * that store m and v as fp32: the host's version. The CUDA build has a
 * device version of both (optim/cuda/) and runs each call where the states
 * live, so these loops see host memory only. */
#include <math.h>

#include "optim.h"

void adamw8bit_dequantize_cpu(const float map[QMAP_SIZE], const uint8_t *q, const float *absmax, size_t n, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = map[q[i]] * absmax[i / ADAMW8BIT_BLOCK];
}

void adamw8bit_quantize_cpu(const float map[QMAP_SIZE], const struct qmap_index *ix, const float *x, size_t n,
                            uint8_t *q, float *absmax) {
    for (size_t b0 = 0; b0 < n; b0 += ADAMW8BIT_BLOCK) {
        size_t b1 = b0 + ADAMW8BIT_BLOCK < n ? b0 + ADAMW8BIT_BLOCK : n;
        float mx = 0.0f;
        for (size_t i = b0; i < b1; i++) mx = fabsf(x[i]) > mx ? fabsf(x[i]) : mx;
        absmax[b0 / ADAMW8BIT_BLOCK] = mx;
        for (size_t i = b0; i < b1; i++) {
            float r = mx > 0.0f ? x[i] / mx : 0.0f;
            q[i] = ix ? qmap_nearest_indexed(map, ix, r) : qmap_nearest(map, r);
        }
    }
}
