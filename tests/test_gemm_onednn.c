/* The CPU's bf16 GEMMs through oneDNN (include/onednn_gemms.h), behind
 * layers.h's matmul_forward/backward with a run's context on the counter:
 *
 * - against the fp32 reference (matmul_*_cpu: sgemm on the fp32 values)
 *   on random inputs at several shapes, the forward's B transposed, the
 *   dweight GEMM's A transposed and accumulating into a non-zero dweight.
 *   Bound, normwise: each product of two values rounded to bf16 (unit
 *   roundoff u = 2^-8) is off by at most (2u + u^2) |x||w|, and the fp32
 *   sums add at most k 2^-24 sum |x||w| more; by Cauchy-Schwarz
 *   ||Y - Yref||_F <= (2^-7 + 2^-16 + k 2^-23) ||X||_F ||W||_F;
 * - against the bf16 reference forms (matmul_*_bf16_cpu: sgemm on the
 *   rounded copies): the same exact products summed in another order, so
 *   ||Y - Yref||_F <= 2 k 2^-24 ||X~||_F ||W~||_F, and dbias bit for bit;
 * - one primitive per GEMM shape, made once;
 * - the same bits on teams of 1, 2 and 3 threads (the team takes fixed
 *   blocks, each a one-thread primitive): forward with an fp32 and a bf16
 *   output, dinp, dweight and dbias, at shapes with a tail block and one
 *   whose dweight sums a long K into a small output (a primitive made for
 *   2 threads split that sum: 1,507 of its 4,096 values differed);
 * - the refusal: a CPU whose flags lack avx512_bf16/amx_bf16 (an injected
 *   flags line), and oneDNN capped below bf16 (DNNL_MAX_CPU_ISA=AVX2 on
 *   build/train, where auto falls back to fp32 and bf16 is an error);
 * - training tiny.conf with --gemm_dtype bf16 ends within 0.05 of the fp32
 *   run's loss (build/train, 100 steps; measured difference about 2e-4);
 *   so does --gemm_kernel reference, the project's reference bf16 GEMM,
 *   on every CPU (under the cap too), and where oneDNN runs it ends
 *   within 0.01 of oneDNN's (the same exact products summed in another
 *   order; measured difference below 1e-3); --gemm_kernel with fp32 GEMMs
 *   is refused by name.
 * On a CPU without bf16 instructions the GEMM tests skip and the refusal
 * test checks that the real flags are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/cpu/layers_cpu.h"
#include "gradcheck.h"
#include "layers.h"
#include "../train/measure/machine.h"
#include "onednn_gemms.h"

static char FLAGS[CPU_FLAGS_LEN];

static int group_setup(void **state) {
    (void)state;
    machine_cpu_flags(FLAGS, sizeof FLAGS);
    return 0;
}

static struct onednn_gemms *open_or_skip(void) {
    if (onednn_bf16_missing(FLAGS)) skip();
    char err[256];
    struct onednn_gemms *g = onednn_gemms_open(FLAGS, err, sizeof err);
    if (!g) fail_msg("onednn_gemms_open: %s", err);
    return g;
}

static double norm(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

static double diff_norm(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s);
}

static float *randoms(size_t n, uint64_t stream) {
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    fill_uniform(p, n, -1, 1, stream);
    return p;
}

static float *rounded_copy(const float *x, size_t n) {
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = round_to_bf16(x[i]);
    return p;
}

static const int64_t SHAPES[][3] = {{1, 1, 1}, {7, 13, 5}, {64, 32, 96}, {33, 256, 768}, {128, 768, 256}};

static double bf16_bound(int64_t k) { return ldexp(1, -7) + ldexp(1, -16) + (double)k * ldexp(1, -23); }

/* forward and backward (with bias) at every shape against the fp32 reference */
static void test_against_fp32(void **state) {
    (void)state;
    struct onednn_gemms *g = open_or_skip();
    for (size_t s = 0; s < sizeof SHAPES / sizeof *SHAPES; s++) {
        int64_t N = SHAPES[s][0], C = SHAPES[s][1], OC = SHAPES[s][2];
        size_t nx = (size_t)(N * C), nw = (size_t)(OC * C), ny = (size_t)(N * OC);
        float *x = randoms(nx, 1), *w = randoms(nw, 2), *bias = randoms((size_t)OC, 3), *dy = randoms(ny, 4);
        float *y = calloc(ny, sizeof *y), *yr = calloc(ny, sizeof *yr);
        float *dx = calloc(nx, sizeof *dx), *dxr = calloc(nx, sizeof *dxr);
        float *dw = randoms(nw, 5), *dwr = malloc(nw * sizeof *dwr), *dw0 = malloc(nw * sizeof *dw0);
        memcpy(dwr, dw, nw * sizeof *dw);
        memcpy(dw0, dw, nw * sizeof *dw);
        float *db = calloc((size_t)OC, sizeof *db), *dbr = calloc((size_t)OC, sizeof *dbr);
        struct exec_ctx fc = {.onednn = g}, ref = {0};
        matmul_forward(y, x, w, bias, N, C, OC, &fc);
        matmul_forward_cpu(yr, x, w, bias, N, C, OC, &ref);
        assert_true(diff_norm(y, yr, ny) <= bf16_bound(C) * norm(x, nx) * norm(w, nw));
        matmul_backward(dx, dw, db, dy, x, w, N, C, OC, &fc);
        matmul_backward_cpu(dxr, dwr, dbr, dy, x, w, N, C, OC, &ref);
        assert_true(diff_norm(dx, dxr, nx) <= bf16_bound(OC) * norm(dy, ny) * norm(w, nw));
        for (size_t i = 0; i < nw; i++) { /* the accumulated part: dweight - its start */
            dw[i] -= dw0[i];
            dwr[i] -= dw0[i];
        }
        assert_true(diff_norm(dw, dwr, nw) <= bf16_bound(N) * norm(dy, ny) * norm(x, nx) + 1e-6 * norm(dw0, nw));
        assert_true(diff_norm(db, dbr, (size_t)OC) <= bf16_bound(N) * norm(dy, ny) * sqrt((double)N));
        assert_true(fc.gemm == ref.gemm); /* the same FLOPs counted */
        free(x), free(w), free(bias), free(dy), free(y), free(yr), free(dx), free(dxr);
        free(dw), free(dwr), free(dw0), free(db), free(dbr);
    }
    assert_non_null(strstr(onednn_gemms_kernel(g), "bf16"));
    onednn_gemms_close(g);
}

/* the _bf16 forms (bf16 input rows) against their CPU reference forms */
static void test_against_bf16_reference(void **state) {
    (void)state;
    struct onednn_gemms *g = open_or_skip();
    for (size_t s = 0; s < sizeof SHAPES / sizeof *SHAPES; s++) {
        int64_t N = SHAPES[s][0], C = SHAPES[s][1], OC = SHAPES[s][2];
        size_t nx = (size_t)(N * C), nw = (size_t)(OC * C), ny = (size_t)(N * OC);
        float *x = randoms(nx, 11), *w = randoms(nw, 12), *bias = randoms((size_t)OC, 13), *dy = randoms(ny, 14);
        bf16 *xb = malloc(nx * sizeof *xb);
        for (size_t i = 0; i < nx; i++) xb[i] = f32_to_bf16(x[i]);
        float *xr = rounded_copy(x, nx), *wr = rounded_copy(w, nw), *dyr = rounded_copy(dy, ny);
        float *y = calloc(ny, sizeof *y), *yr = calloc(ny, sizeof *yr);
        float *dx = calloc(nx, sizeof *dx), *dxr = calloc(nx, sizeof *dxr);
        float *dw = calloc(nw, sizeof *dw), *dwr = calloc(nw, sizeof *dwr);
        float *db = calloc((size_t)OC, sizeof *db), *dbr = calloc((size_t)OC, sizeof *dbr);
        struct exec_ctx fc = {.onednn = g}, ref = {0};
        matmul_forward_bf16(y, xb, w, bias, N, C, OC, &fc);
        matmul_forward_bf16_cpu(yr, xb, w, bias, N, C, OC, &ref);
        assert_true(diff_norm(y, yr, ny) <= 2.0 * C * ldexp(1, -24) * norm(xr, nx) * norm(wr, nw) + 1e-30);
        matmul_backward_bf16(dx, dw, db, dy, xb, w, N, C, OC, &fc);
        matmul_backward_bf16_cpu(dxr, dwr, dbr, dy, xb, w, N, C, OC, &ref);
        assert_true(diff_norm(dx, dxr, nx) <= 2.0 * OC * ldexp(1, -24) * norm(dyr, ny) * norm(wr, nw) + 1e-30);
        assert_true(diff_norm(dw, dwr, nw) <= 2.0 * N * ldexp(1, -24) * norm(dyr, ny) * norm(xr, nx) + 1e-30);
        assert_memory_equal(db, dbr, (size_t)OC * sizeof *db); /* the same sums in the same order */
        free(x), free(w), free(bias), free(dy), free(xb), free(xr), free(wr), free(dyr), free(y), free(yr);
        free(dx), free(dxr), free(dw), free(dwr), free(db), free(dbr);
    }
    onednn_gemms_close(g);
}

/* Units in the last place between two bf16 values of one sign (oneDNN may
 * round its bf16 output from another fp32 sum order than its fp32 one:
 * one unit at most; the reference narrows the same sums: none). */
static int bf16_ulps(bf16 a, bf16 b) { return abs((int)a - (int)b); }

/* The mixed forms (struct operand) give the _bf16 forms' bits: a weight
 * handed over as bf16 is the fp32 weight rounded, so the GEMMs see the
 * same operands, on oneDNN and on the reference (no context) alike; the
 * embedding lookup from a bf16 table is the widened table's. A bf16
 * output is the fp32 output narrowed (oneDNN: within one unit). */
static void test_mixed_operands(void **state) {
    (void)state;
    struct onednn_gemms *g = onednn_bf16_missing(FLAGS) ? NULL : open_or_skip();
    const int64_t N = 33, C = 64, OC = 96;
    size_t nx = (size_t)(N * C), nw = (size_t)(OC * C), ny = (size_t)(N * OC);
    float *x = randoms(nx, 31), *w = randoms(nw, 32), *bias = randoms((size_t)OC, 33), *dy = randoms(ny, 34);
    bf16 *xb = malloc(nx * sizeof *xb), *wb = malloc(nw * sizeof *wb);
    for (size_t i = 0; i < nx; i++) xb[i] = f32_to_bf16(x[i]);
    for (size_t i = 0; i < nw; i++) wb[i] = f32_to_bf16(w[i]);
    for (int with_context = 0; with_context <= (g != NULL); with_context++) {
        struct exec_ctx fc = {.onednn = with_context ? g : NULL}, ref = fc;
        float *y = calloc(ny, sizeof *y), *yr = calloc(ny, sizeof *yr), *dx = calloc(nx, sizeof *dx);
        float *dxr = calloc(nx, sizeof *dxr), *dw = calloc(nw, sizeof *dw), *dwr = calloc(nw, sizeof *dwr);
        float *db = calloc((size_t)OC, sizeof *db), *dbr = calloc((size_t)OC, sizeof *dbr);
        struct operand in = operand_bf16(xb, MEM_HOST), weight = operand_bf16(wb, MEM_HOST);
        matmul_forward_mixed(act_out_f32(y, MEM_HOST), in, weight, bias, N, C, OC, &fc);
        matmul_forward_bf16(yr, xb, w, bias, N, C, OC, &ref);
        assert_memory_equal(y, yr, ny * sizeof *y);
        matmul_backward_mixed(act_out_f32(dx, MEM_HOST), dw, db, operand_f32(dy, MEM_HOST), in, weight, N, C, OC,
                              &fc);
        matmul_backward_bf16(dxr, dwr, dbr, dy, xb, w, N, C, OC, &ref);
        assert_memory_equal(dx, dxr, nx * sizeof *dx);
        assert_memory_equal(dw, dwr, nw * sizeof *dw);
        assert_memory_equal(db, dbr, (size_t)OC * sizeof *db);
        assert_true(fc.gemm == ref.gemm);
        /* an fp32 input is rounded as the saved bf16 copy would be */
        matmul_forward_mixed(act_out_f32(y, MEM_HOST), operand_f32(x, MEM_HOST), weight, bias, N, C, OC, &fc);
        assert_memory_equal(y, yr, ny * sizeof *y);
        /* bf16 outputs (the bf16 data path's qkv and FC feature gradient):
         * the fp32 outputs rounded once, the bias inside; a bf16 dout (the
         * rounded dy) gives the fp32 dout's dweight and dbias bit for bit */
        bf16 *y16 = calloc(ny, sizeof *y16), *dx16 = calloc(nx, sizeof *dx16), *dy16 = calloc(ny, sizeof *dy16);
        assert_true(y16 && dx16 && dy16);
        for (size_t i = 0; i < ny; i++) dy16[i] = f32_to_bf16(dy[i]);
        matmul_forward_mixed(act_out_bf16(y16, MEM_HOST), in, weight, bias, N, C, OC, &fc);
        for (size_t i = 0; i < ny; i++) assert_true(bf16_ulps(y16[i], f32_to_bf16(yr[i])) <= (with_context ? 1 : 0));
        memset(dw, 0, nw * sizeof *dw), memset(db, 0, (size_t)OC * sizeof *db);
        matmul_backward_mixed(act_out_bf16(dx16, MEM_HOST), dw, db, operand_bf16(dy16, MEM_HOST), in, weight, N, C,
                              OC, &fc);
        for (size_t i = 0; i < nx; i++) assert_true(bf16_ulps(dx16[i], f32_to_bf16(dxr[i])) <= (with_context ? 1 : 0));
        assert_memory_equal(dw, dwr, nw * sizeof *dw);
        assert_memory_equal(db, dbr, (size_t)OC * sizeof *db);
        free(y16), free(dx16), free(dy16);
        free(y), free(yr), free(dx), free(dxr), free(dw), free(dwr), free(db), free(dbr);
    }
    const int64_t V = 10, BT = 6, v0 = 3;
    int32_t tokens[6] = {0, 3, 5, 12, 9, 4};
    float *table = malloc((size_t)(V * C) * sizeof *table), *out = malloc((size_t)(BT * C) * sizeof *out);
    float *outr = malloc((size_t)(BT * C) * sizeof *outr);
    for (int64_t i = 0; i < V * C; i++) table[i] = bf16_to_f32(wb[i]);
    struct exec_ctx fc = {0};
    embedding_rows_forward_bf16(out, tokens, wb, v0, V, BT, C, &fc);
    embedding_rows_forward(outr, tokens, table, v0, V, BT, C, &fc);
    assert_memory_equal(out, outr, (size_t)(BT * C) * sizeof *out);
    free(table), free(out), free(outr);
    free(x), free(w), free(bias), free(dy), free(xb), free(wb);
    onednn_gemms_close(g);
}

/* a shape's primitives are made at its first call and reused after */
static void test_primitives_cached(void **state) {
    (void)state;
    struct onednn_gemms *g = open_or_skip();
    const int64_t N = 16, C = 24, OC = 40;
    float *x = randoms(N * C, 21), *w = randoms(OC * C, 22), *dy = randoms(N * OC, 23);
    float *y = malloc(N * OC * sizeof *y), *dx = malloc(N * C * sizeof *dx), *dw = calloc(OC * C, sizeof *dw);
    struct exec_ctx fc = {.onednn = g};
    int probe = onednn_gemms_cached(g);
    matmul_forward(y, x, w, NULL, N, C, OC, &fc);
    matmul_backward(dx, dw, NULL, dy, x, w, N, C, OC, &fc);
    assert_int_equal(onednn_gemms_cached(g), probe + 3); /* forward, dinp, dweight */
    for (int i = 0; i < 3; i++) {
        matmul_forward(y, x, w, NULL, N, C, OC, &fc);
        matmul_backward(dx, dw, NULL, dy, x, w, N, C, OC, &fc);
    }
    assert_int_equal(onednn_gemms_cached(g), probe + 3);
    free(x), free(w), free(dy), free(y), free(dx), free(dw);
    onednn_gemms_close(g);
}

/* One team's outputs of every GEMM form at one shape. */
struct team_outs {
    float *y, *dx, *dw, *db;
    bf16 *y16;
};

static struct team_outs run_team(struct onednn_gemms *g, int team, int64_t N, int64_t C, int64_t OC, const float *x,
                                 const float *w, const float *bias, const float *dy) {
    struct team_outs o = {malloc(N * OC * sizeof(float)), malloc(N * C * sizeof(float)), randoms(OC * C, 35),
                          calloc(OC, sizeof(float)), malloc(N * OC * sizeof(bf16))};
    assert_true(o.y && o.dx && o.db && o.y16);
    struct exec_ctx fc = {.onednn = g, .gemm_blocks = true};
    const int was = omp_get_max_threads();
    omp_set_num_threads(team);
    matmul_forward(o.y, x, w, NULL, N, C, OC, &fc);
    matmul_forward_mixed(act_out_bf16(o.y16, MEM_HOST), operand_f32(x, MEM_HOST), operand_f32(w, MEM_HOST), bias,
                         N, C, OC, &fc);
    matmul_backward(o.dx, o.dw, o.db, dy, x, w, N, C, OC, &fc);
    omp_set_num_threads(was);
    return o;
}

static void team_outs_free(struct team_outs o) { free(o.y), free(o.dx), free(o.dw), free(o.db), free(o.y16); }

/* a run's team may shrink and grow: the outputs are the same bits on any
 * team (one context throughout, as a run has) */
static void test_same_bits_on_any_team(void **state) {
    (void)state;
    struct onednn_gemms *g = open_or_skip();
    static const int64_t shapes[][3] = {{256, 256, 768}, {200, 96, 136}, {4096, 64, 64}, {33, 256, 1000}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        float *x = randoms(N * C, 31), *w = randoms(OC * C, 32), *bias = randoms(OC, 33), *dy = randoms(N * OC, 34);
        struct team_outs one = run_team(g, 1, N, C, OC, x, w, bias, dy);
        for (int team = 2; team <= 3; team++) {
            struct team_outs o = run_team(g, team, N, C, OC, x, w, bias, dy);
            assert_memory_equal(one.y, o.y, (size_t)(N * OC) * sizeof(float));
            assert_memory_equal(one.y16, o.y16, (size_t)(N * OC) * sizeof(bf16));
            assert_memory_equal(one.dx, o.dx, (size_t)(N * C) * sizeof(float));
            assert_memory_equal(one.dw, o.dw, (size_t)(OC * C) * sizeof(float));
            assert_memory_equal(one.db, o.db, (size_t)OC * sizeof(float));
            team_outs_free(o);
        }
        team_outs_free(one);
        free(x), free(w), free(bias), free(dy);
    }
    onednn_gemms_close(g);
}

/* a CPU without bf16 matrix instructions: an injected flags line */
static void test_refuses_cpu_without_bf16(void **state) {
    (void)state;
    const char *zen3 = "fpu sse2 avx avx2 fma avx512f avx512_bf16x amx_bf16_ avx512_vnni";
    const char *missing = onednn_bf16_missing(zen3);
    assert_non_null(missing);
    assert_non_null(strstr(missing, "avx512_bf16"));
    assert_non_null(strstr(missing, "amx_bf16"));
    char err[256] = "";
    assert_null(onednn_gemms_open(zen3, err, sizeof err));
    assert_string_equal(err, missing);
    if (onednn_bf16_missing(FLAGS)) { /* this CPU: refused too */
        assert_null(onednn_gemms_open(FLAGS, err, sizeof err));
        return;
    }
    assert_null(onednn_bf16_missing("fpu avx512f avx512_bf16"));
    assert_null(onednn_bf16_missing("amx_bf16 amx_tile"));
}

/* build/train's output (stdout and stderr) into out; its exit status */
static int train(const char *env, const char *args, char *out, size_t n) {
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "%s build/train --config configs/tiny.conf --threads 1 --peak_flops 1e9 --val_every 0 %s 2>&1", env,
             args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    return pclose(p);
}

static const size_t OUT_LEN = 1 << 16;

/* oneDNN capped below bf16 (DNNL_MAX_CPU_ISA): bf16 is refused by name, auto runs fp32 */
static void test_refuses_capped_isa(void **state) {
    (void)state;
    char *out = malloc(OUT_LEN);
    assert_non_null(out);
    assert_int_not_equal(train("DNNL_MAX_CPU_ISA=AVX2", "--steps 1 --warmup_steps 0 --gemm_dtype bf16", out, OUT_LEN), 0);
    assert_non_null(strstr(out, "--gemm_dtype bf16 on the cpu: "));
    /* the CPU's flags decide the reason before oneDNN's ISA (which this
     * test's own environment may cap too) */
    bool flags_have_bf16 = strstr(FLAGS, "avx512_bf16") || strstr(FLAGS, "amx_bf16");
    assert_non_null(strstr(out, flags_have_bf16 ? "avx512_core_bf16" : "bf16 matrix instructions"));
    assert_non_null(strstr(out, "--gemm_kernel reference"));
    assert_int_equal(train("DNNL_MAX_CPU_ISA=AVX2", "--steps 1 --warmup_steps 0 --gemm_dtype auto", out, OUT_LEN), 0);
    assert_non_null(strstr(out, "GEMMs: fp32 operands"));
    assert_int_not_equal(train("DNNL_MAX_CPU_ISA=AVX2", "--steps 1 --gemm_kernel onednn", out, OUT_LEN), 0);
    assert_non_null(strstr(out, "oneDNN cannot run its bf16 GEMMs here"));
    /* the reference runs under the cap: auto with a named kernel asks for bf16 GEMMs */
    assert_int_equal(train("DNNL_MAX_CPU_ISA=AVX2", "--steps 1 --warmup_steps 0 --gemm_kernel reference", out, OUT_LEN), 0);
    assert_non_null(strstr(out, "GEMMs: bf16 operands, fp32 accumulation | OpenBLAS "));
    assert_non_null(strstr(out, "kernel reference bf16 GEMM"));
    free(out);
}

/* A bf16 kernel named for fp32 GEMMs is a contradiction, refused by name. */
static void test_kernel_for_fp32_refused(void **state) {
    (void)state;
    char *out = malloc(OUT_LEN);
    assert_non_null(out);
    assert_int_not_equal(train("", "--steps 1 --gemm_dtype fp32 --gemm_kernel reference", out, OUT_LEN), 0);
    assert_non_null(strstr(out, "--gemm_kernel reference runs bf16 GEMMs, and this run's are fp32 (--gemm_dtype fp32)"));
    assert_int_not_equal(train("", "--steps 1 --param_dtype fp32 --gemm_kernel onednn", out, OUT_LEN), 0);
    assert_non_null(strstr(out, "--gemm_kernel onednn runs bf16 GEMMs, and this run's are fp32 (gemm_dtype auto with "
                                "--param_dtype fp32)"));
    free(out);
}

static double final_loss(const char *out) {
    const char *p = strstr(out, "step   100/100 | loss ");
    assert_non_null(p);
    return atof(p + strlen("step   100/100 | loss "));
}

/* bf16 GEMMs' 100 steps of tiny.conf, of the kernel kernel_args names:
 * the final loss, near the fp32 run's, after learning (byte-level uniform
 * is ln 256 = 5.5) */
static double bf16_final_loss(const char *kernel_args, const char *banner, double fp32, char *out) {
    char args[128];
    snprintf(args, sizeof args, "--steps 100 --gemm_dtype bf16 %s", kernel_args);
    assert_int_equal(train("", args, out, OUT_LEN), 0);
    assert_non_null(strstr(out, banner));
    double loss = final_loss(out);
    assert_true(fabs(loss - fp32) < 0.05);
    assert_true(loss < 3.5);
    return loss;
}

/* 100 steps of tiny.conf: bf16 GEMMs end near the fp32 run's loss, on
 * the reference on every CPU and on oneDNN where it runs; the two near
 * each other (the same exact products, summed in another order). */
static void test_training_close_to_fp32(void **state) {
    (void)state;
    char *out = malloc(OUT_LEN);
    assert_non_null(out);
    assert_int_equal(train("", "--steps 100 --gemm_dtype fp32", out, OUT_LEN), 0);
    double fp32 = final_loss(out);
    double ref = bf16_final_loss("--gemm_kernel reference", "kernel reference bf16 GEMM", fp32, out);
    printf("    100 steps: fp32 %.4f, reference bf16 %.4f", fp32, ref);
    if (!onednn_bf16_missing(FLAGS)) {
        double onednn = bf16_final_loss("", "GEMMs: bf16 operands, fp32 accumulation | oneDNN ", fp32, out);
        printf(", oneDNN bf16 %.4f", onednn);
        assert_true(fabs(ref - onednn) < 0.01);
    }
    printf("\n");
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_fp32),
        cmocka_unit_test(test_against_bf16_reference),
        cmocka_unit_test(test_mixed_operands),
        cmocka_unit_test(test_primitives_cached),
        cmocka_unit_test(test_same_bits_on_any_team),
        cmocka_unit_test(test_refuses_cpu_without_bf16),
        cmocka_unit_test(test_refuses_capped_isa),
        cmocka_unit_test(test_training_close_to_fp32),
        cmocka_unit_test(test_kernel_for_fp32_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
