/* v2's FlashAttention-2 kernels (model/cuda/v2/flash2_forward.cu,
 * flash2_backward.cu; compiled, never run on a GPU) replayed on the CPU
 * at their algorithm's level: the same tile schedule and masks
 * (flash2_schedule.h), the online softmax in the log2 domain with l
 * summing the bf16-rounded P, lse = (m + log2 l) ln 2, the backward's D
 * from fp32 dout, dout, P and dS rounded to bf16 as the mma operands, dK
 * and dV per key block, dQ as per-key-block partials in their packed
 * rows (flash2_dq_row) added in key-block order. What it cannot replay is
 * the fragment-level code (ldmatrix, mma layouts, cp.async): only a GPU
 * checks that (tests/cuda/test_flash2_cuda.c). The sums inside a product
 * go in index order here, in the tensor cores' order there: both fp32.
 *
 * Against attention_lse_forward_bf16_cpu / attention_lse_backward_bf16_cpu
 * on random bf16 inputs from a fixed seed, at the CUDA test's
 * shapes, within flash2.h's bounds (FLASH2_REL_BOUND, FLASH2_LSE_BOUND),
 * each error printed: the bounds the GPU test will hold the kernels to are
 * met by their rounding points. And two mistakes the replay must catch:
 * lse in log2 units (not times ln 2), and a dQ partial from the wrong key
 * block, each fail the bounds. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../model/cpu/layers_cpu.h"
#include "counters.h"
#include "dtype.h"
#include "layers.h"
#include "rng.h"
#include "../model/cuda/v2/flash2.h"
#include "../model/cuda/v2/flash2_schedule.h"
#include "flash2_terms.h"

/* Fixed, so that a failure reproduces and CI's verdict does not depend on
 * the clock; the bounds' margin over many seeds is in flash2_terms.h. */
static const uint64_t SEED = 1;
static const float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;

/* A deliberate mistake, to show the comparison catches it. */
enum mistake { NONE, LSE_LOG2, DQ_WRONG_BLOCK };

static float r16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

/* One (batch, head): q, k, v, dout16 (T x hs, widened bf16), dout fp32. */
struct head {
    const float *q, *k, *v;
    int64_t T, hs;
};

static float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}

/* flash2_fwd_kernel for one head: out (T x hs, fp32 before the store), lse. */
static void replay_forward(const struct head *x, float *out, float *lse, enum mistake err) {
    const int64_t T = x->T, hs = x->hs;
    const float scale_log2 = LOG2E / sqrtf((float)hs);
    float *o = calloc((size_t)(FLASH2_WARP_ROWS * hs), sizeof *o);
    float s[FLASH2_FWD_KEYS];
    for (int64_t qb = 0; qb < flash2_fwd_blocks(T); qb++)
        for (int w = 0; w < FLASH2_WARPS; w++) {
            const int64_t r0 = qb * FLASH2_FWD_ROWS + w * FLASH2_WARP_ROWS;
            float m[FLASH2_WARP_ROWS], l[FLASH2_WARP_ROWS];
            for (int r = 0; r < FLASH2_WARP_ROWS; r++) m[r] = -INFINITY, l[r] = 0.0f;
            memset(o, 0, (size_t)(FLASH2_WARP_ROWS * hs) * sizeof *o);
            for (int64_t kt = 0; kt < flash2_fwd_key_tiles(qb, T); kt++) {
                if (!flash2_fwd_warp_active(qb, w, kt, T)) continue;
                const int mask = flash2_fwd_needs_mask(qb, w, kt);
                for (int r = 0; r < FLASH2_WARP_ROWS; r++) {
                    const int64_t row = r0 + r;
                    if (row >= T) continue; /* computed on the GPU, never stored */
                    float tmax = -INFINITY;
                    for (int j = 0; j < FLASH2_FWD_KEYS; j++) {
                        const int64_t key = kt * FLASH2_FWD_KEYS + j;
                        float xs = key < T ? dot(x->q + row * hs, x->k + key * hs, hs) * scale_log2 : 0.0f;
                        if (mask && key > row) xs = -INFINITY;
                        s[j] = xs;
                        tmax = fmaxf(tmax, xs);
                    }
                    const float m_new = fmaxf(m[r], tmax), corr = exp2f(m[r] - m_new);
                    m[r] = m_new;
                    l[r] *= corr;
                    for (int64_t d = 0; d < hs; d++) o[r * hs + d] *= corr;
                    for (int j = 0; j < FLASH2_FWD_KEYS; j++) {
                        const int64_t key = kt * FLASH2_FWD_KEYS + j;
                        const float p = r16(exp2f(s[j] - m_new));
                        l[r] += p;
                        if (p != 0.0f)
                            for (int64_t d = 0; d < hs; d++) o[r * hs + d] += p * x->v[key * hs + d];
                    }
                }
            }
            for (int r = 0; r < FLASH2_WARP_ROWS && r0 + r < T; r++) {
                const float inv = 1.0f / l[r];
                for (int64_t d = 0; d < hs; d++) out[(r0 + r) * hs + d] = o[r * hs + d] * inv;
                lse[r0 + r] = err == LSE_LOG2 ? m[r] + log2f(l[r]) : (m[r] + log2f(l[r])) * LN2;
            }
        }
    free(o);
}

/* flash2_bwd_prep, flash2_bwd_kv, flash2_bwd_dq for one head: dq, dk, dv
 * (T x hs, fp32 before the store). y: the stored out (widened). */
static void replay_backward(const struct head *x, const float *dout, const float *y, const float *lse, float *dq,
                            float *dk, float *dv, enum mistake err) {
    const int64_t T = x->T, hs = x->hs, rows = flash2_dq_rows(T);
    const float scale = 1.0f / sqrtf((float)hs), scale_log2 = scale * LOG2E;
    float *D = malloc((size_t)T * sizeof *D), *dy = malloc((size_t)(T * hs) * sizeof *dy);
    float *part = malloc((size_t)(rows * hs) * sizeof *part);
    float *dsT = malloc((size_t)(FLASH2_BWD_KEYS * FLASH2_BWD_QUERIES) * sizeof *dsT);
    for (int64_t t = 0; t < T; t++) {
        D[t] = dot(dout + t * hs, y + t * hs, hs);
        for (int64_t d = 0; d < hs; d++) dy[t * hs + d] = r16(dout[t * hs + d]);
    }
    memset(dk, 0, (size_t)(T * hs) * sizeof *dk);
    memset(dv, 0, (size_t)(T * hs) * sizeof *dv);
    for (int64_t kb = 0; kb < flash2_bwd_blocks(T); kb++)
        for (int64_t qt = flash2_bwd_first_tile(kb); qt < flash2_bwd_tiles(T); qt++) {
            memset(dsT, 0, (size_t)(FLASH2_BWD_KEYS * FLASH2_BWD_QUERIES) * sizeof *dsT);
            for (int w = 0; w < FLASH2_WARPS; w++) {
                if (!flash2_bwd_warp_active(kb, w, qt, T)) continue;
                for (int kr = 0; kr < FLASH2_WARP_ROWS; kr++) {
                    const int64_t key = kb * FLASH2_BWD_KEYS + w * FLASH2_WARP_ROWS + kr;
                    if (key >= T) continue; /* its P is masked to 0 for every valid query */
                    for (int c = 0; c < FLASH2_BWD_QUERIES; c++) {
                        const int64_t query = qt * FLASH2_BWD_QUERIES + c;
                        if (query >= T || query < key) continue; /* P = 0 */
                        const float p = exp2f(dot(x->k + key * hs, x->q + query * hs, hs) * scale_log2 -
                                              lse[query] * LOG2E);
                        const float dp = dot(x->v + key * hs, dy + query * hs, hs);
                        const float pr = r16(p), ds = r16(p * (dp - D[query]));
                        for (int64_t d = 0; d < hs; d++) {
                            dv[key * hs + d] += pr * dy[query * hs + d];
                            dk[key * hs + d] += ds * x->q[query * hs + d];
                        }
                        dsT[(w * FLASH2_WARP_ROWS + kr) * FLASH2_BWD_QUERIES + c] = ds;
                    }
                }
            }
            for (int c = 0; c < FLASH2_BWD_QUERIES; c++) { /* the tile's dQ partial: dS K over the 128 keys */
                const int64_t query = qt * FLASH2_BWD_QUERIES + c;
                if (query >= T) continue;
                float *dst = part + flash2_dq_row(kb, query, T) * hs;
                for (int64_t d = 0; d < hs; d++) {
                    float a = 0.0f;
                    for (int kr = 0; kr < FLASH2_BWD_KEYS; kr++) {
                        const int64_t key = kb * FLASH2_BWD_KEYS + kr;
                        if (key < T) a += dsT[kr * FLASH2_BWD_QUERIES + c] * x->k[key * hs + d];
                    }
                    dst[d] = a;
                }
            }
        }
    for (int64_t t = 0; t < T; t++)
        for (int64_t d = 0; d < hs; d++) {
            float sum = 0.0f;
            for (int64_t kb = 0; kb <= t / FLASH2_BWD_KEYS; kb++) {
                const int64_t src = err == DQ_WRONG_BLOCK && kb > 0 ? kb - 1 : kb;
                sum += part[flash2_dq_row(src, t, T) * hs + d];
            }
            dq[t * hs + d] = sum * scale;
        }
    for (int64_t i = 0; i < T * hs; i++) dk[i] *= scale;
    free(D), free(dy), free(part), free(dsT);
}

/* Normwise error of got against want (n values), over max(max |want|, at_least). */
static double normwise(const float *want, const float *got, int64_t n, double at_least) {
    double worst = 0.0, sc = at_least;
    for (int64_t i = 0; i < n; i++) sc = fmax(sc, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        if (isnan(d)) return NAN;
        worst = fmax(worst, d);
    }
    return sc > 0.0 ? worst / sc : worst;
}

/* The worst of the five errors over ratios to their bounds (<= 1: within). */
static double replay_vs_cpu(int64_t B, int64_t T, int64_t NH, int64_t hs, float amp, uint64_t stream, enum mistake err) {
    const int64_t C = NH * hs, BT = B * T;
    bf16 *qkv = malloc((size_t)(BT * 3 * C) * sizeof *qkv), *out = malloc((size_t)(BT * C) * sizeof *out);
    bf16 *dqkv = malloc((size_t)(BT * 3 * C) * sizeof *dqkv);
    float *dout = malloc((size_t)(BT * C) * sizeof *dout), *lse = malloc((size_t)(B * NH * T) * sizeof *lse);
    float *scratch = malloc(attention_lse_bf16_scratch(B, T, C, NH) * sizeof *scratch);
    for (int64_t i = 0; i < BT * 3 * C; i++) qkv[i] = f32_to_bf16((rng_uniform(SEED, stream, (uint64_t)i) * 2 - 1) * amp);
    for (int64_t i = 0; i < BT * C; i++) dout[i] = rng_uniform(SEED, stream + 1, (uint64_t)i) * 2 - 1;
    struct exec_ctx fc = {0};
    attention_lse_forward_bf16_cpu(out, lse, qkv, scratch, B, T, C, NH, &fc);
    attention_lse_backward_bf16_cpu(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, &fc);
    const struct flash2_terms terms = flash2_term_sizes(qkv, dout, out, lse, B, T, C, NH);
    /* per head: the replay's values, the CPU's widened, side by side */
    const size_t th = (size_t)(T * hs);
    float *buf = malloc(20 * th * sizeof *buf), *mine_lse = malloc((size_t)T * sizeof *mine_lse);
    float *q = buf, *k = q + th, *v = k + th, *dy = v + th, *y = dy + th, *yc = y + th, *dq = yc + th, *dk = dq + th,
          *dv = dk + th, *want[3] = {dv + th, dv + 2 * th, dv + 3 * th};
    double worst = 0.0, e_out = 0, e_lse = 0, e_d[3] = {0, 0, 0};
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++) {
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < hs; d++) {
                    const int64_t r = (b * T + t) * 3 * C + h * hs + d, o = (b * T + t) * C + h * hs + d;
                    q[t * hs + d] = bf16_to_f32(qkv[r]), k[t * hs + d] = bf16_to_f32(qkv[r + C]);
                    v[t * hs + d] = bf16_to_f32(qkv[r + 2 * C]), dy[t * hs + d] = dout[o];
                    yc[t * hs + d] = bf16_to_f32(out[o]);
                    for (int p = 0; p < 3; p++) want[p][t * hs + d] = bf16_to_f32(dqkv[r + p * C]);
                }
            const struct head x = {q, k, v, T, hs};
            replay_forward(&x, y, mine_lse, err);
            for (size_t i = 0; i < th; i++) y[i] = r16(y[i]); /* stored */
            e_out = fmax(e_out, normwise(yc, y, (int64_t)th, 0.0));
            for (int64_t t = 0; t < T; t++) e_lse = fmax(e_lse, fabs((double)mine_lse[t] - lse[(b * NH + h) * T + t]));
            replay_backward(&x, dy, y, mine_lse, dq, dk, dv, err);
            float *got[3] = {dq, dk, dv};
            /* dq and dk against their terms' size (flash2_terms.h) */
            const double at_least[3] = {terms.dq, terms.dk, 0.0};
            for (int p = 0; p < 3; p++) {
                for (size_t i = 0; i < th; i++) got[p][i] = r16(got[p][i]);
                e_d[p] = fmax(e_d[p], normwise(want[p], got[p], (int64_t)th, at_least[p]));
            }
        }
    printf("  B %lld T %lld NH %lld hs %lld amp %.0f: out %.3g, lse %.3g, dq %.3g, dk %.3g, dv %.3g\n", (long long)B,
           (long long)T, (long long)NH, (long long)hs, (double)amp, e_out, e_lse, e_d[0], e_d[1], e_d[2]);
    worst = fmax(e_out / FLASH2_REL_BOUND, e_lse / FLASH2_LSE_BOUND);
    for (int p = 0; p < 3; p++) worst = fmax(worst, e_d[p] / FLASH2_REL_BOUND);
    free(qkv), free(out), free(dqkv), free(dout), free(lse), free(scratch), free(buf), free(mine_lse);
    return isnan(worst) ? INFINITY : worst;
}

/* B, T, NH, hs, amplitude: test_flash2_cuda's shapes */
static const int64_t SHAPES[][5] = {{1, 1, 1, 64, 1},   {2, 17, 3, 64, 1},   {1, 127, 2, 64, 3}, {2, 128, 2, 64, 1},
                                    {1, 129, 4, 64, 3},  {2, 300, 2, 64, 1},  {1, 1, 2, 128, 1}, {3, 17, 1, 128, 3},
                                    {1, 127, 2, 128, 1}, {1, 128, 1, 128, 1}, {2, 129, 2, 128, 1}, {1, 300, 3, 128, 3},
                                    {2, 129, 3, 32, 1},  {1, 300, 2, 32, 3}};

static void test_replay_within_bounds(void **state) {
    (void)state;
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        const int64_t *x = SHAPES[s];
        const double r = replay_vs_cpu(x[0], x[1], x[2], x[3], (float)x[4], 100 + 2 * s, NONE);
        if (!(r <= 1.0)) fail_msg("shape %zu: an error %.3g times its bound", s, r);
    }
}

static void test_replay_catches_mistakes(void **state) {
    (void)state;
    assert_true(replay_vs_cpu(1, 129, 2, 64, 1.0f, 900, LSE_LOG2) > 1.0);
    assert_true(replay_vs_cpu(1, 300, 2, 64, 1.0f, 902, DQ_WRONG_BLOCK) > 1.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_within_bounds),
        cmocka_unit_test(test_replay_catches_mistakes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
