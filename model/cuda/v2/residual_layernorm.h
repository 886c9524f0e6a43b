/* The residual add fused with the next LayerNorm's forward on the bf16
 * data path (issue 24, Deliver 2; --gpu_path v2, residual_layernorm.cu;
 * compiled, not run on a GPU). One pass over a row instead of two kernels
 * and a round trip of the sum through memory:
 *   x = bf16(float(a) + b)          the residual stream, stored (a bf16, b
 *                                   fp32 or bf16: residual_forward_bf16's
 *                                   one fp32 add and one rounding)
 *   mean, rstd of the stored x      fp32 (layernorm_forward_bf16's mean,
 *                                   then the variance about it, eps 1e-5)
 *   out = bf16((x - mean) rstd w + bias)
 * A warp takes a row, lane l the columns l, l + 32, ...; the lanes' sums
 * meet in the warp's butterfly (bf16_lanes.h). So x and, given the same
 * mean and rstd, out are the CPU's bits (residual_forward_bf16 then
 * layernorm_forward_bf16); mean and rstd are the same sums in another
 * order: with u = 2^-24, |mean - mean_cpu| <= (C + C/32 + 5) u mean(|x|)
 * and rstd alike within (C + C/32 + 5) u relative to the variance's terms,
 * so out may differ from the CPU's by one bf16 ulp (at most 2^-7 relative)
 * where the two fp32 values straddle a rounding boundary
 * (tests/test_bf16_rows.c measures it on random rows).
 * tests/device_replays.h's resln_row_replay is the device's order on the host: the GPU test asks for its bits.
 *
 * The same rows without the add, for a LayerNorm whose input is already
 * stored (the first layer's ln1, and the final lnf; layernorm_forward_v2:
 * layernorm_forward_bf16's bits given the same mean and rstd, the same
 * bound on them), and the add without the LayerNorm (residual_forward_v2:
 * residual_forward_bf16's bits, element for element). The model calls
 * the add and the next LayerNorm apart (its calls are the CPU's), so the
 * fused form waits for a layers.h call of its own. */
#ifndef SHARDLAB_V2_RESIDUAL_LAYERNORM_H
#define SHARDLAB_V2_RESIDUAL_LAYERNORM_H

#include "bf16_lanes.h"

#define V2_LN_EPS 1e-5f

/* Lane `lane` of a row: x[c] = bf16(a[c] + b[c]) for its columns; returns
 * its sum of the stored x. */
V2_HD float resln_lane_add(bf16 *x, const bf16 *a, const float *bf, const bf16 *bh, int64_t C, int lane) {
    float s = 0.0f;
    for (int64_t c = lane; c < C; c += V2_WARP) {
        bf16 r = v2_round(v2_widen(a[c]) + v2_load(bf, bh, c));
        x[c] = r;
        s += v2_widen(r);
    }
    return s;
}

/* The lane's sum of the stored x (the LayerNorm alone). */
V2_HD float ln_lane_sum(const bf16 *x, int64_t C, int lane) {
    float s = 0.0f;
    for (int64_t c = lane; c < C; c += V2_WARP) s += v2_widen(x[c]);
    return s;
}

/* The residual add alone: one element, residual_forward_bf16's one fp32
 * add and one rounding. */
V2_HD bf16 residual_elem(bf16 a, float b) { return v2_round(v2_widen(a) + b); }

/* The lane's sum of (x - m)^2. */
V2_HD float ln_lane_var(const bf16 *x, float m, int64_t C, int lane) {
    float s = 0.0f;
    for (int64_t c = lane; c < C; c += V2_WARP) s += (v2_widen(x[c]) - m) * (v2_widen(x[c]) - m);
    return s;
}

V2_HD float ln_rstd(float var_sum, int64_t C) { return 1.0f / sqrtf(var_sum / (float)C + V2_LN_EPS); }

V2_HD void ln_lane_out(bf16 *out, const bf16 *x, float m, float s, const float *w, const float *bias, int64_t C,
                       int lane) {
    for (int64_t c = lane; c < C; c += V2_WARP) out[c] = v2_round((v2_widen(x[c]) - m) * s * w[c] + bias[c]);
}

#ifdef __cplusplus
extern "C" {
#endif

/* N rows of C on the device, queued on the default stream: x and out
 * (N C bf16, x may be a), mean and rstd (N fp32); b is fp32 (bf) or bf16
 * (bh, bf NULL). */
void residual_layernorm_forward_v2(bf16 *x, bf16 *out, float *mean, float *rstd, const bf16 *a, const float *bf,
                                   const bf16 *bh, const float *weight, const float *bias, int64_t N, int64_t C);
/* The LayerNorm alone: out, mean, rstd of N stored rows x (C bf16). */
void layernorm_forward_v2(bf16 *out, float *mean, float *rstd, const bf16 *x, const float *weight, const float *bias,
                          int64_t N, int64_t C);
/* The residual add alone: out = bf16(a + b), n elements (out may be a). */
void residual_forward_v2(bf16 *out, const bf16 *a, const float *b, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
