/* Host replays of the CUDA backend's bf16 data-path kernels (model/cuda/
 * v2/): each runs a kernel's order of operations on the host, through the
 * lanes' arithmetic the device code shares (the headers below, whose
 * functions are __host__ __device__), so the tests ask for the device's
 * bits: tests/test_bf16_rows.c against the CPU's kernels, tests/cuda/ on a
 * GPU against the kernels themselves. Test code only: nothing in the
 * library replays a kernel. */
#ifndef SHARDLAB_TESTS_DEVICE_REPLAYS_H
#define SHARDLAB_TESTS_DEVICE_REPLAYS_H

#include <math.h>

#include "../model/cuda/v2/crossentropy_bf16.h"
#include "../model/cuda/v2/layernorm_backward.h"
#include "../model/cuda/v2/residual_layernorm.h"

/* ---- the device's trees that combine the lanes (model/cuda/v2/bf16_lanes.h),
 * in their order on the host (v[0..n) is changed) */

/* A warp's butterfly (__shfl_xor_sync, offsets 16..1, each lane adding its
 * partner's value to its own): every lane ends with these bits. */
static inline float v2_warp_sum_tree(float *v) {
    for (int o = V2_WARP / 2; o > 0; o /= 2) {
        float t[V2_WARP];
        for (int l = 0; l < V2_WARP; l++) t[l] = v[l] + v[l ^ o];
        for (int l = 0; l < V2_WARP; l++) v[l] = t[l];
    }
    return v[0];
}

/* block_reduce.h's halving trees over n (a power of two) threads. */
static inline float v2_block_sum_tree(float *v, int n) {
    for (int w = n / 2; w > 0; w /= 2)
        for (int t = 0; t < w; t++) v[t] += v[t + w];
    return v[0];
}

static inline float v2_block_max_tree(float *v, int n) {
    for (int w = n / 2; w > 0; w /= 2)
        for (int t = 0; t < w; t++) v[t] = v[t + w] > v[t] ? v[t + w] : v[t];
    return v[0];
}

/* One row as the device's block computes it, on the host; its loss. */
static inline float ce_row_replay(bf16 *l, int64_t target, int64_t V, int64_t Vp, float dloss) {
    float p[V2_CE_THREADS];
    for (int t = 0; t < V2_CE_THREADS; t++) p[t] = ce_lane_max(l, V, t);
    float maxv = v2_block_max_tree(p, V2_CE_THREADS), tl = v2_widen(l[target]);
    for (int t = 0; t < V2_CE_THREADS; t++) p[t] = ce_lane_sum(l, V, maxv, t);
    float sum = v2_block_sum_tree(p, V2_CE_THREADS);
    if (dloss != 0.0f)
        for (int t = 0; t < V2_CE_THREADS; t++) ce_lane_write(l, V, Vp, maxv, dloss / sum, target, dloss, t);
    return logf(sum) + maxv - tl;
}

/* One row as the device's warp computes it, on the host. */
static inline void resln_row_replay(bf16 *x, bf16 *out, float *mean, float *rstd, const bf16 *a, const float *bf,
                                    const bf16 *bh, const float *w, const float *bias, int64_t C) {
    float p[V2_WARP];
    for (int l = 0; l < V2_WARP; l++) p[l] = resln_lane_add(x, a, bf, bh, C, l);
    float m = v2_warp_sum_tree(p) / (float)C;
    for (int l = 0; l < V2_WARP; l++) p[l] = ln_lane_var(x, m, C, l);
    float s = ln_rstd(v2_warp_sum_tree(p), C);
    for (int l = 0; l < V2_WARP; l++) ln_lane_out(out, x, m, s, w, bias, C, l);
    *mean = m;
    *rstd = s;
}

/* A row of the LayerNorm alone as the device's warp computes it. */
static inline void ln_row_replay(bf16 *out, float *mean, float *rstd, const bf16 *x, const float *w,
                                 const float *bias, int64_t C) {
    float p[V2_WARP];
    for (int l = 0; l < V2_WARP; l++) p[l] = ln_lane_sum(x, C, l);
    float m = v2_warp_sum_tree(p) / (float)C;
    for (int l = 0; l < V2_WARP; l++) p[l] = ln_lane_var(x, m, C, l);
    float s = ln_rstd(v2_warp_sum_tree(p), C);
    for (int l = 0; l < V2_WARP; l++) ln_lane_out(out, x, m, s, w, bias, C, l);
    *mean = m;
    *rstd = s;
}

/* The whole backward as the device computes it, on the host (part:
 * layernorm_backward_v2_scratch(N, C) floats). */
static inline void lnb_replay(float *dxf, bf16 *dxh, float *dweight, float *dbias, float *part, const float *dyf,
                              const bf16 *dyh, const bf16 *inp, const float *w, const float *mean, const float *rstd,
                              int64_t N, int64_t C) {
    for (int64_t i = 0; i < N; i++) {
        float pa[V2_WARP], pb[V2_WARP];
        const float *dyfi = dyf ? dyf + i * C : NULL;
        const bf16 *dyhi = dyf ? NULL : dyh + i * C;
        for (int l = 0; l < V2_WARP; l++)
            lnb_lane_sums(&pa[l], &pb[l], inp + i * C, dyfi, dyhi, w, mean[i], rstd[i], C, l);
        float dm = v2_warp_sum_tree(pa) / (float)C, dx = v2_warp_sum_tree(pb) / (float)C;
        for (int l = 0; l < V2_WARP; l++)
            lnb_lane_dinp(dxf ? dxf + i * C : NULL, dxf ? NULL : dxh + i * C, inp + i * C, dyfi, dyhi, w, mean[i],
                          rstd[i], dm, dx, C, l);
    }
    int64_t nblk = lnb_blocks(N);
    for (int64_t k = 0; k < nblk; k++)
        for (int64_t c = 0; c < C; c++)
            lnb_channel_partial(&part[k * C + c], &part[(nblk + k) * C + c], inp, dyf, dyh, mean, rstd,
                                k * V2_LNB_ROWS, k * V2_LNB_ROWS + V2_LNB_ROWS < N ? k * V2_LNB_ROWS + V2_LNB_ROWS : N,
                                C, c);
    for (int64_t c = 0; c < C; c++) lnb_channel_finish(dweight, dbias, part, nblk, C, c);
}

#endif
