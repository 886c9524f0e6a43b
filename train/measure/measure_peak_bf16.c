/* The bf16 GEMM peak (train/measure/peak.h: peak_measure_bf16_gemm): MFU's
 * ceiling when the layer GEMMs run on oneDNN in bf16. The ceiling is the
 * GEMM library's own best rate, not a microbenchmark's: bf16 dot-product
 * instructions (AVX512-BF16) and tile units (AMX) are reached only through
 * their blocked kernels. A GEMM's rate depends on its shape (a product
 * whose operands stay in cache runs faster than 2048^3 on AMX), so each
 * trial runs every probe shape and keeps the fastest: the trainer's own
 * GEMMs, whose shapes lie between them, cannot beat the printed peak
 * unless the machine was busier during the probe (the spread says how
 * noisy it was). */
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "layers.h"
#include "onednn_gemms.h"
#include "peak.h"

/* (N, C, OC) of out (N,OC) = x (N,C) . W^T: layer shapes whose operands
 * stay in cache (bench-small's and GPT-2's) and a large square; about
 * 5 GFLOP a trial, so the probe costs what the FMA probe does (~0.3 s). */
static const int64_t PROBE_SHAPES[][3] = {{256, 256, 256}, {256, 256, 768}, {256, 768, 3072}, {1024, 1024, 1024}};
enum { N_SHAPES = sizeof PROBE_SHAPES / sizeof PROBE_SHAPES[0] };

struct probe {
    struct onednn_gemms *g;
    bf16 *x, *w;
    float *out;
    int best_shape; /* of the last trial */
};

static double bf16_trial(void *ctx, int threads) {
    struct probe *p = ctx;
    double best = 0.0;
    for (int s = 0; s < N_SHAPES; s++) {
        int64_t N = PROBE_SHAPES[s][0], C = PROBE_SHAPES[s][1], OC = PROBE_SHAPES[s][2];
        /* as the run issues them: on more than one thread in the fixed
         * blocks the team takes (model/cpu/matmul_onednn.c), else whole */
        struct exec_ctx fc = {.onednn = p->g, .gemm_blocks = threads > 1};
        double t0 = monotonic_seconds();
        matmul_forward_mixed(act_out_f32(p->out, MEM_HOST), operand_bf16(p->x, MEM_HOST),
                             operand_bf16(p->w, MEM_HOST), NULL, N, C, OC, &fc);
        double rate = fc.gemm / (monotonic_seconds() - t0);
        if (rate > best) best = rate, p->best_shape = s;
    }
    return best;
}

int peak_measure_bf16_gemm(struct peak_result *r, struct onednn_gemms *g, int threads, int min_trials,
                           double seconds) {
    if (!g) return -1;
    size_t nx = 0, nw = 0, nout = 0; /* the largest x (N,C), W (OC,C) and out (N,OC) */
    for (int s = 0; s < N_SHAPES; s++) {
        size_t N = (size_t)PROBE_SHAPES[s][0], C = (size_t)PROBE_SHAPES[s][1], OC = (size_t)PROBE_SHAPES[s][2];
        nx = N * C > nx ? N * C : nx;
        nw = OC * C > nw ? OC * C : nw;
        nout = N * OC > nout ? N * OC : nout;
    }
    struct probe p = {.g = g, .x = malloc(nx * sizeof(bf16)), .w = malloc(nw * sizeof(bf16)),
                      .out = malloc(nout * sizeof(float))};
    int rc = -1;
    if (p.x && p.w && p.out) {
        /* small values of several exponents: no denormals, no infinities */
        for (size_t i = 0; i < nx; i++) p.x[i] = f32_to_bf16((float)((int)(i % 13) - 6) * 0.0625f);
        for (size_t i = 0; i < nw; i++) p.w[i] = f32_to_bf16((float)((int)(i % 7) - 3) * 0.125f);
        rc = peak_measure_with(r, "", bf16_trial, &p, threads, min_trials, seconds);
        if (rc == 0) {
            const int64_t *s = PROBE_SHAPES[p.best_shape];
            snprintf(r->kernel, sizeof r->kernel, "oneDNN %s GEMM m %lld n %lld k %lld", onednn_gemms_kernel(g),
                     (long long)s[0], (long long)s[2], (long long)s[1]); /* out (m,n) = x (m,k) . W^T */
        }
    }
    free(p.x);
    free(p.w);
    free(p.out);
    return rc;
}
