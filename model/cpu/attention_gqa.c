/* Causal grouped-query attention (Ainslie et al. 2023, GQA) as LLaMA 3 uses
 * it (llm.c's train_llama3.py, Meta's reference), the plain way of
 * model/cpu/attention.c: each head's (T, T) probabilities are materialised
 * and saved for backward, and every product is a GEMM through
 * gemm_counted over strided views, so the FLOPs counted are those issued.
 *
 * A row of qkv holds NH query heads, then KV key heads, then KV value
 * heads, hs values each (c_attn's rows q, k, v at GQA width: (NH + 2 KV) hs
 * wide). Query head h reads key and value head h / rep, rep = NH / KV (the
 * reference's repeat_kv: each KV head serves rep consecutive query heads).
 *   forward   S = q_h k_j^T / sqrt(hs)   P = causal_softmax(S)   out_h = P v_j
 *   backward  per query head as attention.c's, with dk_j and dv_j the sums
 *             over the rep query heads that read k_j and v_j.
 * The forward runs one OpenMP thread per (b, query head), the backward one
 * per (b, KV head), which owns dk_j and dv_j and adds its rep heads' terms
 * in order (beta 0 for the first, 1 after): no atomics, deterministic. With
 * KV = NH every step is attention.c's, in its order. */
#include <math.h>
#include <omp.h>

#include "act_io.h"
#include "causal_softmax.h"
#include "layers_cpu.h"
#include "llama_layers.h"

/* The shape of one call, and where head h's q, k and v start in a row. */
struct gqa_shape {
    int64_t B, T, NH, KV, hs, width, rep;
};

static struct gqa_shape gqa_shape_of(int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t hs) {
    return (struct gqa_shape){.B = B, .T = T, .NH = NH, .KV = KV, .hs = hs, .width = (NH + 2 * KV) * hs,
                              .rep = NH / KV};
}

static int64_t q_col(const struct gqa_shape *s, int64_t h) { return h * s->hs; }
static int64_t k_col(const struct gqa_shape *s, int64_t j) { return (s->NH + j) * s->hs; }
static int64_t v_col(const struct gqa_shape *s, int64_t j) { return (s->NH + s->KV + j) * s->hs; }

/* Threads over n independent units (heads or head groups). */
static int64_t team(int64_t n, int threads) { return n < threads ? n : threads; }
static int unit_threads(int64_t n) { return (int)team(n, omp_get_max_threads()); }

size_t attention_gqa_backward_scratch_for(int64_t B, int64_t T, int64_t KV, int threads) {
    return (size_t)team(B * KV, threads) * (size_t)T * (size_t)T;
}

static void count_softmax(struct exec_ctx *fc, const struct gqa_shape *s, int flops_per_entry) {
    fc->other += flops_per_entry * (double)s->B * s->NH * s->T * (s->T + 1) / 2; /* the causal entries */
}

void attention_gqa_forward_cpu(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t NH,
                               int64_t KV, int64_t hs, struct exec_ctx *fc) {
    const struct gqa_shape s = gqa_shape_of(B, T, NH, KV, hs);
    const int64_t C = NH * hs;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for num_threads(unit_threads(B * NH))
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t b = bh / NH, h = bh % NH, j = h / s.rep;
        const float *row = qkv + b * T * s.width;
        float *p = att + bh * T * T;
        gemm_counted_cpu(fc, GEMM_ATTENTION, false, true, T, T, hs, scale, row + q_col(&s, h), s.width,
                         row + k_col(&s, j), s.width, 0.0f, p, T);
        causal_softmax_forward(p, T);
        gemm_counted_cpu(fc, GEMM_ATTENTION, false, false, T, hs, T, 1.0f, p, T, row + v_col(&s, j), s.width, 0.0f,
                         out + b * T * C + h * hs, C);
    }
    count_softmax(fc, &s, SOFTMAX_FORWARD_FLOPS);
}

/* One query head's backward over fp32 operands (each with its leading
 * dimension): d (T x T) scratch, dq overwritten; dk and dv overwritten
 * when first (the group's first head), else added to. */
struct head_grads {
    const float *q, *k, *v, *p, *dy;
    int64_t ldq, ldk, ldv, lddy;
    float *dq, *dk, *dv;
    int64_t lddq, lddk, lddv;
};

static void head_backward(struct exec_ctx *fc, const struct head_grads *g, float *d, int64_t T, int64_t hs,
                          bool first) {
    const float scale = 1.0f / sqrtf((float)hs), beta = first ? 0.0f : 1.0f;
    gemm_counted_cpu(fc, GEMM_ATTENTION, false, true, T, T, hs, 1.0f, g->dy, g->lddy, g->v, g->ldv, 0.0f, d, T);
    gemm_counted_cpu(fc, GEMM_ATTENTION, true, false, T, hs, T, 1.0f, g->p, T, g->dy, g->lddy, beta, g->dv, g->lddv);
    causal_softmax_backward(d, g->p, T);
    gemm_counted_cpu(fc, GEMM_ATTENTION, false, false, T, hs, T, scale, d, T, g->k, g->ldk, 0.0f, g->dq, g->lddq);
    gemm_counted_cpu(fc, GEMM_ATTENTION, true, false, T, hs, T, scale, d, T, g->q, g->ldq, beta, g->dk, g->lddk);
}

void attention_gqa_backward_cpu(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                                int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t hs, struct exec_ctx *fc) {
    const struct gqa_shape s = gqa_shape_of(B, T, NH, KV, hs);
    const int64_t C = NH * hs, W = s.width;
#pragma omp parallel for num_threads(unit_threads(B * KV))
    for (int64_t bj = 0; bj < B * KV; bj++) {
        const int64_t b = bj / KV, j = bj % KV;
        const float *row = qkv + b * T * W;
        float *drow = dqkv + b * T * W, *d = scratch + (int64_t)omp_get_thread_num() * T * T;
        for (int64_t g = 0; g < s.rep; g++) {
            const int64_t h = j * s.rep + g;
            const struct head_grads hg = {
                .q = row + q_col(&s, h), .k = row + k_col(&s, j), .v = row + v_col(&s, j),
                .p = att + (b * NH + h) * T * T, .dy = dout + b * T * C + h * hs, .ldq = W, .ldk = W, .ldv = W,
                .lddy = C, .dq = drow + q_col(&s, h), .dk = drow + k_col(&s, j), .dv = drow + v_col(&s, j),
                .lddq = W, .lddk = W, .lddv = W};
            head_backward(fc, &hg, d, T, hs, g == 0);
        }
    }
    count_softmax(fc, &s, SOFTMAX_BACKWARD_FLOPS);
}

/* The bf16 data path. Each thread widens the operands it reads into fp32
 * tiles of its part of scratch (packed, leading dimension hs) and runs the
 * fp32 kernels' steps on them in the same order; results are rounded once
 * as they are stored. Forward tiles: q, k, v, out; backward: dS (T x T),
 * then q, k, v, dq, dk, dv (the group's fp32 sums). */
enum { GQA_FWD_TILES_THS = 4, GQA_BWD_TILES_TT = 1, GQA_BWD_TILES_THS = 6 };

size_t attention_gqa_forward_bf16_scratch_for(int64_t B, int64_t T, int64_t NH, int64_t hs, int threads) {
    return (size_t)team(B * NH, threads) * GQA_FWD_TILES_THS * (size_t)T * (size_t)hs;
}

size_t attention_gqa_backward_bf16_scratch_for(int64_t B, int64_t T, int64_t KV, int64_t hs, int threads) {
    size_t per_thread = GQA_BWD_TILES_TT * (size_t)T * (size_t)T + GQA_BWD_TILES_THS * (size_t)T * (size_t)hs;
    return (size_t)team(B * KV, threads) * per_thread;
}

/* bf16 rows at dst, ld apart = tile (n rows of w, packed), each rounded
 * once to nearest even. */
static void narrow_rows(bf16 *dst, int64_t ld, const float *tile, int64_t n, int64_t w) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t d = 0; d < w; d++) dst[t * ld + d] = f32_to_bf16(tile[t * w + d]);
}

void attention_gqa_forward_bf16_cpu(bf16 *out, float *att, const bf16 *qkv, float *scratch, int64_t B, int64_t T,
                                    int64_t NH, int64_t KV, int64_t hs, struct exec_ctx *fc) {
    const struct gqa_shape s = gqa_shape_of(B, T, NH, KV, hs);
    const int64_t C = NH * hs, th = T * hs;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for num_threads(unit_threads(B * NH))
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t b = bh / NH, h = bh % NH, j = h / s.rep;
        const bf16 *row = qkv + b * T * s.width;
        float *q = scratch + (int64_t)omp_get_thread_num() * GQA_FWD_TILES_THS * th, *k = q + th, *v = k + th,
              *y = v + th, *p = att + bh * T * T;
        act_widen_rows(q, row + q_col(&s, h), s.width, T, hs);
        act_widen_rows(k, row + k_col(&s, j), s.width, T, hs);
        act_widen_rows(v, row + v_col(&s, j), s.width, T, hs);
        gemm_counted_cpu(fc, GEMM_ATTENTION, false, true, T, T, hs, scale, q, hs, k, hs, 0.0f, p, T);
        causal_softmax_forward(p, T);
        gemm_counted_cpu(fc, GEMM_ATTENTION, false, false, T, hs, T, 1.0f, p, T, v, hs, 0.0f, y, hs);
        narrow_rows(out + b * T * C + h * hs, C, y, T, hs);
    }
    count_softmax(fc, &s, SOFTMAX_FORWARD_FLOPS);
}

/* One KV head group of the bf16 backward: widen k_j, v_j, then per query
 * head widen q_h, run head_backward on the tiles, round dq_h once; dk_j and
 * dv_j are summed in fp32 tiles over the group and rounded once at the end. */
static void group_backward_bf16(struct exec_ctx *fc, const struct gqa_shape *s, float *tiles, bf16 *drow,
                                const bf16 *row, const float *dout_b, const float *att_b, int64_t j) {
    const int64_t T = s->T, hs = s->hs, th = T * hs, C = s->NH * hs;
    float *d = tiles, *q = d + T * T, *k = q + th, *v = k + th, *dq = v + th, *dk = dq + th, *dv = dk + th;
    act_widen_rows(k, row + k_col(s, j), s->width, T, hs);
    act_widen_rows(v, row + v_col(s, j), s->width, T, hs);
    for (int64_t g = 0; g < s->rep; g++) {
        const int64_t h = j * s->rep + g;
        act_widen_rows(q, row + q_col(s, h), s->width, T, hs);
        const struct head_grads hg = {.q = q, .k = k, .v = v, .p = att_b + h * T * T, .dy = dout_b + h * hs,
                                      .ldq = hs, .ldk = hs, .ldv = hs, .lddy = C, .dq = dq, .dk = dk, .dv = dv,
                                      .lddq = hs, .lddk = hs, .lddv = hs};
        head_backward(fc, &hg, d, T, hs, g == 0);
        narrow_rows(drow + q_col(s, h), s->width, dq, T, hs);
    }
    narrow_rows(drow + k_col(s, j), s->width, dk, T, hs);
    narrow_rows(drow + v_col(s, j), s->width, dv, T, hs);
}

void attention_gqa_backward_bf16_cpu(bf16 *dqkv, const float *dout, const bf16 *qkv, const float *att, float *scratch,
                                     int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t hs,
                                     struct exec_ctx *fc) {
    const struct gqa_shape s = gqa_shape_of(B, T, NH, KV, hs);
    const size_t per_thread = GQA_BWD_TILES_TT * (size_t)T * (size_t)T + GQA_BWD_TILES_THS * (size_t)T * (size_t)hs;
#pragma omp parallel for num_threads(unit_threads(B * KV))
    for (int64_t bj = 0; bj < B * KV; bj++) {
        const int64_t b = bj / KV, j = bj % KV;
        float *tiles = scratch + (size_t)omp_get_thread_num() * per_thread;
        group_backward_bf16(fc, &s, tiles, dqkv + b * T * s.width, qkv + b * T * s.width, dout + b * T * NH * hs,
                            att + b * NH * T * T, j);
    }
    count_softmax(fc, &s, SOFTMAX_BACKWARD_FLOPS);
}
