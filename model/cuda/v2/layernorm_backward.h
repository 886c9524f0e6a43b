/* LayerNorm's backward in one launch on the bf16 data path (issue 24,
 * Deliver 2; --gpu_path v2, layernorm_backward.cu; compiled, not run on a
 * GPU), with the weight and bias gradients deterministic and without
 * atomics. The arithmetic is layernorm_backward_bf16's (include/layers.h):
 * inp (bf16) widened exactly; dout fp32 or bf16 (widened); per row
 *   dx += rstd (dnorm - mean(dnorm) - xhat mean(dnorm xhat)),
 *   dnorm = w dy, xhat = (x - mean) rstd,
 * dinp accumulated in fp32, or into a bf16 residual gradient: widened,
 * the fp32 update added, rounded once (the CPU kernel on the widened copy,
 * then narrowed). A warp takes a row (its two sums meet in the warp's
 * butterfly); block b also sums its rows [b R, b R + R) of w's and b's
 * gradient terms per channel in row order into a partial, and a second
 * launch adds each channel's partials in block order and then to dweight
 * and dbias (+=). The order depends on N and C only, never on the GPU.
 *
 * Against the CPU: dinp's two row sums are the same terms in another order
 * (with u = 2^-24, each within (C/32 + 5 + C) u of the terms' absolute sum
 * of the CPU's), so dinp agrees to about C u |rstd| max|dnorm| normwise
 * and bit for bit where the sums agree; dweight and dbias are the CPU's
 * column sums cut into R-row pieces: bit for bit when N <= R (one piece),
 * else within (R + N/R) u of the terms' absolute sum (the CPU's own
 * sequential sum carries N u). tests/device_replays.h's lnb_replay runs the
 * device's order on the host (the GPU test asks for its bits). */
#ifndef SHARDLAB_V2_LAYERNORM_BACKWARD_H
#define SHARDLAB_V2_LAYERNORM_BACKWARD_H

#include "bf16_lanes.h"

/* Rows a block's partial sums: fixed, so the order is every GPU's. */
#define V2_LNB_ROWS 64

static inline int64_t lnb_blocks(int64_t N) { return (N + V2_LNB_ROWS - 1) / V2_LNB_ROWS; }
/* floats of scratch the call needs: a dweight and a dbias partial (C
 * each) per block. */
static inline int64_t layernorm_backward_v2_scratch(int64_t N, int64_t C) { return 2 * lnb_blocks(N) * C; }

/* The lane's sums of dnorm and dnorm xhat over its columns of row x, dy. */
V2_HD void lnb_lane_sums(float *p_dnorm, float *p_xhat, const bf16 *x, const float *dyf, const bf16 *dyh,
                         const float *w, float m, float s, int64_t C, int lane) {
    float a = 0.0f, b = 0.0f;
    for (int64_t c = lane; c < C; c += V2_WARP) {
        float xhat = (v2_widen(x[c]) - m) * s;
        float dnorm = w[c] * v2_load(dyf, dyh, c);
        a += dnorm;
        b += dnorm * xhat;
    }
    *p_dnorm = a;
    *p_xhat = b;
}

/* dx (fp32 dxf, or bf16 dxh) += the row's gradient, the lane's columns;
 * dnorm_mean and dnorm_xhat_mean are the row's sums divided by C. */
V2_HD void lnb_lane_dinp(float *dxf, bf16 *dxh, const bf16 *x, const float *dyf, const bf16 *dyh, const float *w,
                         float m, float s, float dnorm_mean, float dnorm_xhat_mean, int64_t C, int lane) {
    for (int64_t c = lane; c < C; c += V2_WARP) {
        float xhat = (v2_widen(x[c]) - m) * s;
        float dnorm = w[c] * v2_load(dyf, dyh, c);
        float g = s * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean);
        if (dxf)
            dxf[c] += g;
        else
            dxh[c] = v2_round(v2_widen(dxh[c]) + g);
    }
}

/* Channel c's dweight and dbias terms over rows [r0, r1), in row order. */
V2_HD void lnb_channel_partial(float *dw, float *db, const bf16 *inp, const float *dyf, const bf16 *dyh,
                               const float *mean, const float *rstd, int64_t r0, int64_t r1, int64_t C, int64_t c) {
    float a = 0.0f, b = 0.0f;
    for (int64_t i = r0; i < r1; i++) {
        float dy = v2_load(dyf, dyh, i * C + c);
        a += (v2_widen(inp[i * C + c]) - mean[i]) * rstd[i] * dy;
        b += dy;
    }
    *dw = a;
    *db = b;
}

/* Channel c's partials (nblk of them, C apart) in block order, then added. */
V2_HD void lnb_channel_finish(float *dweight, float *dbias, const float *part, int64_t nblk, int64_t C, int64_t c) {
    float a = 0.0f, b = 0.0f;
    for (int64_t k = 0; k < nblk; k++) {
        a += part[k * C + c];
        b += part[(nblk + k) * C + c];
    }
    dweight[c] += a;
    dbias[c] += b;
}

#ifdef __cplusplus
extern "C" {
#endif

/* On the device, queued on the default stream: dinp fp32 (dxf) or bf16
 * (dxh, dxf NULL) accumulated; dout fp32 (dyf) or bf16 (dyh, dyf NULL);
 * dweight, dbias fp32 accumulated; scratch layernorm_backward_v2_scratch
 * floats. */
void layernorm_backward_v2(float *dxf, bf16 *dxh, float *dweight, float *dbias, float *scratch, const float *dyf,
                           const bf16 *dyh, const bf16 *inp, const float *weight, const float *mean, const float *rstd,
                           int64_t N, int64_t C);

#ifdef __cplusplus
}
#endif

#endif
