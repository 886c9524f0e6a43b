/* Causal multi-head self-attention (Vaswani et al. 2017; GPT-2), the plain
 * way: the (T, T) probability matrix of every head is materialised and
 * saved for backward, which is the 5as^2b term of Korthikanti's formula
 * (2as^2b here: no dropout, only the probabilities are kept).
 *
 * Per (batch, head) the score and value products are GEMMs through
 * gemm_counted, over strided views of qkv (a head's q, k, v are hs columns
 * of a 3C-wide row), so the FLOPs counted are the ones issued:
 *   forward   S = q k^T / sqrt(hs)    P = causal_softmax(S)    out = P v
 *   backward  dP = dout v^T   dv = P^T dout   dS = softmax'(P, dP)
 *             dq = dS k / sqrt(hs)   dk = dS^T q / sqrt(hs)
 * Each GEMM covers the full T x T square, 2 T^2 hs FLOPs, although the
 * causal mask zeroes its upper half: the masked half is issued work
 * (hardware FLOPs, HFU), the causal half model FLOPs (PaLM App. B, MFU).
 * Masked entries of P and dS are exact zeros, so the GEMMs add nothing for
 * them and the results equal the causal sums up to summation order.
 *
 * Heads are independent: one OpenMP thread per (b, h), each sgemm
 * single-threaded inside (OpenBLAS's OpenMP build runs one thread within a
 * parallel region). bench/RESULTS.md compares it with heads in sequence
 * and sgemm threaded. The kernels are deterministic, which selective
 * recompute relies on (the same probabilities bit for bit). */
#include <math.h>
#include <omp.h>

#include "act_io.h"
#include "causal_softmax.h"
#include "layers_cpu.h"

/* Threads that share the heads; attention_backward_scratch's count. */
static int head_threads(int64_t B, int64_t NH) {
    int64_t heads = B * NH, max = omp_get_max_threads();
    return (int)(heads < max ? heads : max);
}

size_t attention_backward_scratch(int64_t B, int64_t T, int64_t NH) {
    return (size_t)head_threads(B, NH) * (size_t)T * (size_t)T;
}

void attention_forward_cpu(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                           struct exec_ctx *fc) {
    const int64_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for num_threads(head_threads(B, NH))
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t b = bh / NH, h = bh % NH;
        const float *q = qkv + b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
        float *p = att + bh * T * T;
        gemm_counted_cpu(fc, GEMM_ATTENTION, false, true, T, T, hs, scale, q, C3, k, C3, 0.0f, p, T);
        causal_softmax_forward(p, T);
        gemm_counted_cpu(fc, GEMM_ATTENTION, false, false, T, hs, T, 1.0f, p, T, v, C3, 0.0f, out + b * T * C + h * hs,
                     C);
    }
    fc->other += SOFTMAX_FORWARD_FLOPS * (double)B * NH * T * (T + 1) / 2; /* the causal entries */
}

void attention_backward_cpu(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                            int64_t B, int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc) {
    const int64_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for num_threads(head_threads(B, NH))
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t b = bh / NH, h = bh % NH;
        const float *q = qkv + b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
        const float *p = att + bh * T * T, *dy = dout + b * T * C + h * hs;
        float *dq = dqkv + b * T * C3 + h * hs, *dk = dq + C, *dv = dq + 2 * C;
        float *d = scratch + (int64_t)omp_get_thread_num() * T * T;
        /* beta 0: this (b, h) owns its hs columns of dq, dk, dv and overwrites them */
        gemm_counted_cpu(fc, GEMM_ATTENTION, false, true, T, T, hs, 1.0f, dy, C, v, C3, 0.0f, d, T);
        gemm_counted_cpu(fc, GEMM_ATTENTION, true, false, T, hs, T, 1.0f, p, T, dy, C, 0.0f, dv, C3);
        causal_softmax_backward(d, p, T);
        gemm_counted_cpu(fc, GEMM_ATTENTION, false, false, T, hs, T, scale, d, T, k, C3, 0.0f, dq, C3);
        gemm_counted_cpu(fc, GEMM_ATTENTION, true, false, T, hs, T, scale, d, T, q, C3, 0.0f, dk, C3);
    }
    fc->other += SOFTMAX_BACKWARD_FLOPS * (double)B * NH * T * (T + 1) / 2;
}

/* The same two on the bf16 data path (layers.h: attention_forward_bf16).
 * Each thread works in its own fp32 tiles of scratch, one head at a time:
 * the probabilities P (T x T), the score gradient dS (T x T), and the
 * head's q, k, v and output (T x hs each), packed (leading dimension hs);
 * the GEMMs and the softmax are those of the fp32 kernels above, in the
 * same order, on the same values. */
enum { TILES_TT = 2, TILES_THS = 4 };

size_t attention_bf16_scratch(int64_t B, int64_t T, int64_t C, int64_t NH) {
    size_t per_thread = TILES_TT * (size_t)T * (size_t)T + TILES_THS * (size_t)T * (size_t)(C / NH);
    return (size_t)head_threads(B, NH) * per_thread;
}

/* The rows at dst's element off, ld apart, = tile (n rows of w, packed):
 * rounded to bf16 once (nearest even), or copied into an fp32 dst (with
 * bf16_values rounded to bf16's values as they are); no dst: not stored. */
static void store_rows(struct act_out dst, int64_t off, int64_t ld, const float *tile, int64_t n, int64_t w) {
    if (!dst.data) return;
    const char *op = "attention_bf16";
    bf16 *y16 = act_out_is_bf16(dst) ? act_out_as_bf16(dst, op) : NULL;
    float *y32 = y16 ? NULL : act_out_as_f32(dst, op);
    for (int64_t t = 0; t < n; t++)
        for (int64_t d = 0; d < w; d++) {
            float x = tile[t * w + d];
            if (y16) y16[off + t * ld + d] = f32_to_bf16(x);
            else y32[off + t * ld + d] = dst.bf16_values ? round_to_bf16(x) : x;
        }
}

/* One thread's tiles: P, dS, then q, k, v and the output. */
struct head_tiles {
    float *p, *d, *q, *k, *v, *y;
};

static struct head_tiles tiles_of(float *scratch, int64_t T, int64_t hs) {
    size_t per_thread = TILES_TT * (size_t)T * (size_t)T + TILES_THS * (size_t)T * (size_t)hs;
    float *p = scratch + (size_t)omp_get_thread_num() * per_thread, *q = p + TILES_TT * T * T;
    return (struct head_tiles){.p = p, .d = p + T * T, .q = q, .k = q + T * hs, .v = q + 2 * T * hs,
                               .y = q + 3 * T * hs};
}

/* The head's q, k, v (hs columns of qkv's 3C-wide rows), widened. */
static void load_head(struct head_tiles *w, const bf16 *q, int64_t T, int64_t C, int64_t hs) {
    act_widen_qkv(w->q, w->k, w->v, q, C, T, hs);
}

void attention_forward_bf16_cpu(struct act_out out, struct act_out att, const bf16 *qkv, float *scratch, int64_t B,
                                int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc) {
    const int64_t hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for num_threads(head_threads(B, NH))
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t b = bh / NH, h = bh % NH;
        struct head_tiles w = tiles_of(scratch, T, hs);
        load_head(&w, qkv + b * T * 3 * C + h * hs, T, C, hs);
        gemm_counted_cpu(fc, GEMM_ATTENTION, false, true, T, T, hs, scale, w.q, hs, w.k, hs, 0.0f, w.p, T);
        causal_softmax_forward(w.p, T);
        gemm_counted_cpu(fc, GEMM_ATTENTION, false, false, T, hs, T, 1.0f, w.p, T, w.v, hs, 0.0f, w.y, hs);
        store_rows(out, b * T * C + h * hs, C, w.y, T, hs);
        store_rows(att, bh * T * T, T, w.p, T, T);
    }
    fc->other += SOFTMAX_FORWARD_FLOPS * (double)B * NH * T * (T + 1) / 2;
}

/* The backward's dq, dk and dv go through the tiles a product no longer
 * needs (dv into v's after dS = dout v^T, dq into the output's, dk into
 * k's after dq), each rounded once into dqkv: no tile more than the
 * forward's. */
void attention_backward_bf16_cpu(bf16 *dqkv, const float *dout, const bf16 *qkv, struct operand att, float *scratch,
                                 int64_t B, int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc) {
    const int64_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const struct act_out dst = act_out_bf16(dqkv, MEM_HOST);
    /* the stored probabilities: bf16 (widened per head) or fp32 */
    const bf16 *att16 = operand_is_bf16(att) ? operand_as_bf16(att, __func__) : NULL;
    const float *att32 = att16 ? NULL : operand_as_f32(att, __func__);
#pragma omp parallel for num_threads(head_threads(B, NH))
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t b = bh / NH, h = bh % NH;
        struct head_tiles w = tiles_of(scratch, T, hs);
        load_head(&w, qkv + b * T * C3 + h * hs, T, C, hs);
        const float *p = w.p, *dy = dout + b * T * C + h * hs;
        if (att16) act_widen_rows(w.p, att16 + bh * T * T, T, T, T);
        else p = att32 + bh * T * T;
        const int64_t dq = b * T * C3 + h * hs, dk = dq + C, dv = dq + 2 * C; /* element offsets in dqkv */
        gemm_counted_cpu(fc, GEMM_ATTENTION, false, true, T, T, hs, 1.0f, dy, C, w.v, hs, 0.0f, w.d, T);
        gemm_counted_cpu(fc, GEMM_ATTENTION, true, false, T, hs, T, 1.0f, p, T, dy, C, 0.0f, w.v, hs);
        store_rows(dst, dv, C3, w.v, T, hs);
        causal_softmax_backward(w.d, p, T);
        gemm_counted_cpu(fc, GEMM_ATTENTION, false, false, T, hs, T, scale, w.d, T, w.k, hs, 0.0f, w.y, hs);
        store_rows(dst, dq, C3, w.y, T, hs);
        gemm_counted_cpu(fc, GEMM_ATTENTION, true, false, T, hs, T, scale, w.d, T, w.q, hs, 0.0f, w.k, hs);
        store_rows(dst, dk, C3, w.k, T, hs);
    }
    fc->other += SOFTMAX_BACKWARD_FLOPS * (double)B * NH * T * (T + 1) / 2;
}
