/* Causal multi-head self-attention that saves each row's log-sum-exp
 * instead of its probabilities (FlashAttention-2's algorithm, Dao 2023,
 * in plain fp32 C; --attention flash on the CPU). Per (batch, head), for
 * query row t with scores s_j = q_t.k_j / sqrt(hs), j <= t:
 *   forward   keys in tiles of ATTENTION_LSE_TILE, an online softmax: the
 *             running max m and sum l, and the output row O, are rescaled
 *             by exp(m_old - m_new) when a tile raises the max; then
 *             out_t = O / l and lse_t = m + log l
 *   backward  D_t = dout_t . out_t (= sum_j P_tj dP_tj), then for every
 *             j <= t: P = exp(s_j - lse_t), dP = dout_t . v_j,
 *             dv_j += P dout_t, dS = P (dP - D_t), dq_t += dS k_j,
 *             dk_j += dS q_t; dq and dk scaled by 1/sqrt(hs) at the end
 * so no T x T matrix exists: the forward keeps one tile of scores per
 * thread (on the stack), the backward one float per score in flight.
 * Only the causal scores are computed, so every product counted in
 * fc->attention is a causal one (layers.h lists the counts).
 *
 * One OpenMP thread per (b, h), each head's sums in a fixed order: the
 * results do not depend on the thread count, and repeat bit for bit. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "act_io.h"
#include "attention_rows.h"
#include "layers_cpu.h"

/* fc->other per score, per row and tile, per row (layers.h); the row
 * terms add hs (forward) and 4 hs (backward). */
enum { FWD_PER_SCORE = 5, FWD_PER_TILE = 4, FWD_PER_ROW = 3, BWD_PER_SCORE = 5, BWD_PER_ROW_HS = 4 };

int attention_lse_threads(int64_t B, int64_t NH) {
    int64_t heads = B * NH, max = omp_get_max_threads();
    return (int)(heads < max ? heads : max);
}

size_t attention_lse_backward_scratch(int64_t B, int64_t T, int64_t NH) { return (size_t)(B * NH * T); }

float attention_dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}

/* y += a x */
static void axpy(float *y, float a, const float *x, int64_t n) {
    for (int64_t d = 0; d < n; d++) y[d] += a * x[d];
}

void attention_scale_row(float *y, float a, int64_t n) {
    for (int64_t d = 0; d < n; d++) y[d] *= a;
}

void attention_lse_forward_row(float *o, float *lse, const float *q, const float *k, const float *v, int64_t n,
                               int64_t hs, int64_t kv_stride, float scale) {
    float s[ATTENTION_LSE_TILE], m = -INFINITY, l = 0.0f;
    memset(o, 0, (size_t)hs * sizeof *o);
    for (int64_t j0 = 0; j0 < n; j0 += ATTENTION_LSE_TILE) {
        int64_t nt = n - j0 < ATTENTION_LSE_TILE ? n - j0 : ATTENTION_LSE_TILE;
        float tile_max = -INFINITY;
        for (int64_t j = 0; j < nt; j++) {
            s[j] = attention_dot(q, k + (j0 + j) * kv_stride, hs) * scale;
            tile_max = s[j] > tile_max ? s[j] : tile_max;
        }
        float m_new = tile_max > m ? tile_max : m;
        float correction = expf(m - m_new); /* 0 on the first tile: m = -inf, and l, o are 0 */
        l *= correction;
        attention_scale_row(o, correction, hs);
        for (int64_t j = 0; j < nt; j++) {
            float p = expf(s[j] - m_new);
            l += p;
            axpy(o, p, v + (j0 + j) * kv_stride, hs);
        }
        m = m_new;
    }
    attention_scale_row(o, 1.0f / l, hs);
    *lse = m + logf(l);
}

void attention_lse_backward_row(float *dq, float *dk, float *dv, const float *q, const float *dy, const float *k,
                                const float *v, float lse, float D, int64_t n, int64_t hs, int64_t kv_stride,
                                float scale) {
    for (int64_t j = 0; j < n; j++) {
        float p = expf(attention_dot(q, k + j * kv_stride, hs) * scale - lse);
        float dp = attention_dot(dy, v + j * kv_stride, hs);
        axpy(dv + j * kv_stride, p, dy, hs);
        float ds = p * (dp - D);
        axpy(dq, ds, k + j * kv_stride, hs);
        axpy(dk + j * kv_stride, ds, q, hs);
    }
}

/* Row t's tiles of keys: ceil((t + 1) / tile). */
static int64_t key_tiles(int64_t t) { return t / ATTENTION_LSE_TILE + 1; }

/* The FLOPs of a forward and of a backward (layers.h lists them). */
static void count_forward(struct exec_ctx *fc, int64_t B, int64_t T, int64_t NH, int64_t hs) {
    double heads = (double)B * NH, scores = (double)T * (T + 1) / 2, tiles = 0;
    for (int64_t t = 0; t < T; t++) tiles += (double)key_tiles(t);
    fc->attention += heads * scores * 2 * 2 * hs; /* QK^T and PV */
    fc->other += heads * (scores * FWD_PER_SCORE + tiles * (hs + FWD_PER_TILE) + (double)T * (hs + FWD_PER_ROW));
}

static void count_backward(struct exec_ctx *fc, int64_t B, int64_t T, int64_t NH, int64_t hs) {
    double heads = (double)B * NH, scores = (double)T * (T + 1) / 2;
    fc->attention += heads * scores * 5 * 2 * hs; /* QK^T, dP, dV, dQ, dK */
    fc->other += heads * (scores * BWD_PER_SCORE + (double)T * BWD_PER_ROW_HS * hs);
}

void attention_lse_forward_cpu(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                               struct exec_ctx *fc) {
    const int64_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for num_threads(attention_lse_threads(B, NH))
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t b = bh / NH, h = bh % NH;
        const float *q = qkv + b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
        for (int64_t t = 0; t < T; t++)
            attention_lse_forward_row(out + (b * T + t) * C + h * hs, lse + bh * T + t, q + t * C3, k, v, t + 1, hs,
                                      C3, scale);
    }
    count_forward(fc, B, T, NH, hs);
}

void attention_lse_backward_cpu(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                                const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc) {
    const int64_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for num_threads(attention_lse_threads(B, NH))
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t b = bh / NH, h = bh % NH;
        const float *q = qkv + b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C, *l = lse + bh * T;
        const float *dy = dout + b * T * C + h * hs, *y = out + b * T * C + h * hs;
        float *dq = dqkv + b * T * C3 + h * hs, *dk = dq + C, *dv = dq + 2 * C, *D = scratch + bh * T;
        for (int64_t t = 0; t < T; t++) {
            D[t] = attention_dot(dy + t * C, y + t * C, hs);
            memset(dq + t * C3, 0, (size_t)hs * sizeof *dq);
            memset(dk + t * C3, 0, (size_t)hs * sizeof *dk);
            memset(dv + t * C3, 0, (size_t)hs * sizeof *dv);
        }
        for (int64_t t = 0; t < T; t++) {
            float *dqt = dq + t * C3;
            attention_lse_backward_row(dqt, dk, dv, q + t * C3, dy + t * C, k, v, l[t], D[t], t + 1, hs, C3, scale);
            attention_scale_row(dqt, scale, hs);
        }
        for (int64_t j = 0; j < T; j++) attention_scale_row(dk + j * C3, scale, hs);
    }
    count_backward(fc, B, T, NH, hs);
}

/* The same two on the bf16 data path (layers.h: attention_lse_forward_bf16).
 * Each thread widens one head's q, k, v (and in the backward its output)
 * into its own packed fp32 tiles (T x hs each, after the B NH T of D) and
 * runs the rows above on them; the backward's dk and dv gather in two more
 * tiles (the rows step through k, v and dk, dv alike), each row's dq in
 * the output's tile (free once D is), and each is rounded once into the
 * bf16 dqkv when whole. The rows' sums do not depend on the strides: the values are
 * the fp32 kernels' bit for bit. */
enum { LSE_TILES = 6 };

size_t attention_lse_bf16_scratch_for(int64_t B, int64_t T, int64_t C, int64_t NH, int threads) {
    size_t per_thread = LSE_TILES * (size_t)T * (size_t)(C / NH);
    int64_t team = B * NH < threads ? B * NH : threads;
    return attention_lse_backward_scratch(B, T, NH) + (size_t)team * per_thread;
}

size_t attention_lse_bf16_scratch(int64_t B, int64_t T, int64_t C, int64_t NH) {
    return attention_lse_bf16_scratch_for(B, T, C, NH, omp_get_max_threads());
}

float *attention_lse_tiles(float *scratch, int64_t B, int64_t T, int64_t NH, int64_t hs) {
    return scratch + attention_lse_backward_scratch(B, T, NH) +
           (size_t)omp_get_thread_num() * LSE_TILES * (size_t)T * (size_t)hs;
}

/* The row's hs values of tile row src rounded once into dst (bf16). */
static void narrow_row(bf16 *dst, const float *src, int64_t hs) {
    for (int64_t d = 0; d < hs; d++) dst[d] = f32_to_bf16(src[d]);
}

void attention_lse_forward_bf16_cpu(bf16 *out, float *lse, const bf16 *qkv, float *scratch, int64_t B, int64_t T,
                                    int64_t C, int64_t NH, struct exec_ctx *fc) {
    const int64_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for num_threads(attention_lse_threads(B, NH))
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t b = bh / NH, h = bh % NH;
        float *q = attention_lse_tiles(scratch, B, T, NH, hs), *k = q + T * hs, *v = k + T * hs, *y = v + T * hs;
        const bf16 *q16 = qkv + b * T * C3 + h * hs;
        act_widen_qkv(q, k, v, q16, C, T, hs);
        for (int64_t t = 0; t < T; t++)
            attention_lse_forward_row(y + t * hs, lse + bh * T + t, q + t * hs, k, v, t + 1, hs, hs, scale);
        for (int64_t t = 0; t < T; t++) narrow_row(out + (b * T + t) * C + h * hs, y + t * hs, hs);
    }
    count_forward(fc, B, T, NH, hs);
}

void attention_lse_backward_bf16_cpu(bf16 *dqkv, float *scratch, const float *dout, const bf16 *qkv, const bf16 *out,
                                     const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                                     struct exec_ctx *fc) {
    const int64_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for num_threads(attention_lse_threads(B, NH))
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t b = bh / NH, h = bh % NH;
        float *q = attention_lse_tiles(scratch, B, T, NH, hs), *k = q + T * hs, *v = k + T * hs, *y = v + T * hs;
        float *dk = y + T * hs, *dv = dk + T * hs, *D = scratch + bh * T;
        const bf16 *q16 = qkv + b * T * C3 + h * hs;
        act_widen_qkv(q, k, v, q16, C, T, hs);
        act_widen_rows(y, out + b * T * C + h * hs, C, T, hs);
        const float *dy = dout + b * T * C + h * hs, *l = lse + bh * T;
        bf16 *dq = dqkv + b * T * C3 + h * hs;
        memset(dk, 0, (size_t)(2 * T * hs) * sizeof *dk);
        for (int64_t t = 0; t < T; t++) D[t] = attention_dot(dy + t * C, y + t * hs, hs);
        /* the output's tile is free once D is: row t's dq gathers there in fp32 */
        for (int64_t t = 0; t < T; t++) {
            float *dqt = y + t * hs;
            memset(dqt, 0, (size_t)hs * sizeof *dqt);
            attention_lse_backward_row(dqt, dk, dv, q + t * hs, dy + t * C, k, v, l[t], D[t], t + 1, hs, hs, scale);
            attention_scale_row(dqt, scale, hs);
            narrow_row(dq + t * C3, dqt, hs);
        }
        for (int64_t j = 0; j < T; j++) {
            attention_scale_row(dk + j * hs, scale, hs);
            narrow_row(dq + j * C3 + C, dk + j * hs, hs);
            narrow_row(dq + j * C3 + 2 * C, dv + j * hs, hs);
        }
    }
    count_backward(fc, B, T, NH, hs);
}
