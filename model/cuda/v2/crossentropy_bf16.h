/* Softmax cross-entropy on bf16 logits, dlogits written in place as bf16
 * (issue 24, Deliver 2; --gpu_path v2, crossentropy_bf16.cu; compiled, not
 * run on a GPU). v1 reads fp32 logits and holds a row in shared memory (V
 * floats: one block per SM at GPT-2's vocabulary); here a block of
 * V2_CE_THREADS takes a row with no more shared memory than its trees, so
 * the rows spread over every SM at full occupancy, and the row is read
 * three times (max, sum of exponentials, dlogits), the last two mostly
 * from L2.
 *
 * The arithmetic is crossentropy_forward_backward's (model/cpu/
 * crossentropy.c) on the widened logits, in fp32: the max, the target's
 * logit, sum = sum exp(l - max) (fastmath.h's exp), loss = logf(sum) + max
 * - target (fp32, one a row), and with dloss != 0, dlogits = bf16(exp(l -
 * max) (dloss / sum) - dloss [at the target]), padding columns 0: the CPU
 * kernel on the widened row, then narrowed. Thread t takes the columns t,
 * t + V2_CE_THREADS, ...; the partials meet in block_reduce.h's trees. The
 * max is exact in any order; the sum is the CPU's terms in another order
 * (all positive: with u = 2^-24, within (V/V2_CE_THREADS + 8 + V) u sum of
 * the CPU's, about 1e-4 relative worst case at V 50,257, far less in
 * practice), which moves the loss by at most that (absolute) and a dlogit
 * by that relative, so one bf16 ulp (at most 2^-7 relative) where it crosses
 * a boundary. The device's logf is within 1 ulp of glibc's.
 * tests/device_replays.h's ce_row_replay is the device's order on the host: the GPU test asks for its bits (the
 * loss within logf's ulp of log V). */
#ifndef SHARDLAB_V2_CROSSENTROPY_BF16_H
#define SHARDLAB_V2_CROSSENTROPY_BF16_H

#include "bf16_lanes.h"

/* Threads a row: block_reduce.h's LAYER_BLOCK, whose trees join them. */
#define V2_CE_THREADS 256

V2_HD float ce_lane_max(const bf16 *l, int64_t V, int t) {
    float m = -INFINITY;
    for (int64_t v = t; v < V; v += V2_CE_THREADS) {
        float x = v2_widen(l[v]);
        m = x > m ? x : m;
    }
    return m;
}

V2_HD float ce_lane_sum(const bf16 *l, int64_t V, float maxv, int t) {
    float s = 0.0f;
    for (int64_t v = t; v < V; v += V2_CE_THREADS) s += v2_expf(v2_widen(l[v]) - maxv);
    return s;
}

/* The lane's dlogits in place: k = dloss / sum. */
V2_HD void ce_lane_write(bf16 *l, int64_t V, int64_t Vp, float maxv, float k, int64_t target, float dloss, int t) {
    for (int64_t v = t; v < V; v += V2_CE_THREADS) {
        float d = v2_expf(v2_widen(l[v]) - maxv) * k;
        if (v == target) d -= dloss;
        l[v] = v2_round(d);
    }
    for (int64_t v = V + t; v < Vp; v += V2_CE_THREADS) l[v] = 0; /* bf16 +0 */
}

#ifdef __cplusplus
extern "C" {
#endif

struct kernel_context;

/* N rows of Vp bf16 logits (V real) on the device, queued on the default
 * stream: losses[i] (device, fp32); with dloss != 0 the logits become
 * dlogits. targets on the device, each in [0, V). The grid (the SM count
 * times the blocks a SM holds) is asked of the device once a run and kept
 * in kc (kernel_context.h: ce_v2_grid); kc NULL: asked each call. */
void crossentropy_v2(struct kernel_context *kc, bf16 *logits, float *losses, const int32_t *targets, int64_t N, int64_t V, int64_t Vp,
                     float dloss);

#ifdef __cplusplus
}
#endif

#endif
