/* --gpu_path v2's device forms of the bf16 data path's kernels
 * (include/layers.h's public names on device memory, as the model calls
 * them under v2: model/cuda/v2/rows_v2.cu, matmul_mixed.cu) against the
 * CPU's X_cpu forms on the same inputs:
 *   layernorm_forward_bf16   the host replay (ln_row_replay) bit for bit;
 *                            the CPU's out within one bf16 rounding, mean
 *                            and rstd within 1e-5 normwise (the warp's
 *                            tree against the CPU's sequential sums:
 *                            residual_layernorm.h's bound)
 *   residual_forward_bf16    the CPU's bits
 *   residual_layernorm_forward_bf16 (one kernel on the device) the two
 *                            device forms' bits, so the bounds above
 *   layernorm_backward_bf16  dinp (fp32 and bf16, accumulated) and
 *                            dweight, dbias as test_bf16_rows_cuda.c holds
 *                            layernorm_backward_v2 (the same kernel)
 *   gelu_backward_bf16_grads the CPU's bits (NaN payloads excepted), dinp
 *                            aliasing dout as the model calls it
 *   matmul_*_mixed           fp32 outputs within 1e-5 normwise (the same
 *                            rounded operands, products exact, sums in
 *                            another order: test_gemm_cuda.c's bound);
 *                            bf16 outputs within one rounding of that;
 *                            the FLOPs the CPU counts; an aligned shape
 *                            takes the bias epilogues and its second call
 *                            finds its cached plan; unaligned shapes the
 *                            fall-back (cublasGemmEx and passes)
 *   attention_*_bf16 (plain) v1's fp32 kernels on the widened inputs: the
 *                            CPU's bf16 forms within one bf16 rounding plus
 *                            test_attention_cuda.c's 1e-5 normwise, the
 *                            probabilities stored bf16, as fp32 rounded to
 *                            bf16's values (selective recompute), or not
 * Fresh random inputs each run (the seed is printed), shapes off the warp,
 * the blocks and the 16-byte alignment, every written output poisoned with
 * a guard past its end (accumulated ones start random). Compiled, not run:
 * without a GPU every test says "skipped: no CUDA device". */
#include <cuda_runtime.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../model/cpu/layers_cpu.h"
#include "layers.h"
#include "dtype.h"
#include "cuda_fixture.h"
#include "layers_fixture.h"
#include "bf16_fixture.h"
#include "../../model/cuda/kernel_context.h"
#include "../../model/cuda/v2/gelu_bf16.h"
#include "../../model/cuda/v2/lt_plan_cache.h"
#include "../../model/cuda/v2/residual_layernorm.h"
#include "../device_replays.h"

static void expect_same_bf16(const char *what, const bf16 *want, const bf16 *got, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (want[i] != got[i]) fail_msg("%s: element %zu of %zu: cpu 0x%04x, gpu 0x%04x", what, i, n, want[i], got[i]);
}

/* A counter on device memory, as the trainer's (no kernel context unless given). */
static struct exec_ctx on_device(struct kernel_context *kc) {
    return (struct exec_ctx){.space = MEM_DEVICE, .kernels = kc};
}

enum { NSHAPES = 5 };
static const int64_t ROWS[NSHAPES] = {1, 3, 64, 67, 1030};
static const int64_t COLS[NSHAPES] = {1, 33, 768, 775, 257};

static void test_layernorm_forward_and_residual(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    for (int sh = 0; sh < NSHAPES; sh++) {
        int64_t N = ROWS[sh], C = COLS[sh], n = N * C;
        bf16 *x = rand_bf16(n, 1, 2.0f, 0.5f);
        float *b = rand_f32(n, 2, 1.0f), *w = rand_f32(C, 3, 0.5f), *bias = rand_f32(C, 4, 0.1f);
        for (int64_t c = 0; c < C; c++) w[c] += 1.0f;
        bf16 *d_x = dev_from(x, H(n)), *d_out = dev_poisoned(H(n)), *d_res = dev_poisoned(H(n));
        bf16 *d_fx = dev_poisoned(H(n)), *d_fout = dev_poisoned(H(n)), *d_ln_res = dev_poisoned(H(n));
        float *d_b = dev_from(b, F(n)), *d_w = dev_from(w, F(C)), *d_bias = dev_from(bias, F(C)),
              *d_mean = dev_poisoned(F(N)), *d_rstd = dev_poisoned(F(N)), *d_fmean = dev_poisoned(F(N)),
              *d_frstd = dev_poisoned(F(N)), *d_m2 = dev_poisoned(F(N)), *d_r2 = dev_poisoned(F(N));
        struct exec_ctx g = on_device(NULL), c = {0}, gf = on_device(NULL), g2 = on_device(NULL);
        layernorm_forward_bf16(d_out, d_mean, d_rstd, d_x, d_w, d_bias, N, C, &g);
        residual_forward_bf16(d_res, d_x, d_b, n, &g);
        /* the fused call against the two apart, on the device */
        residual_layernorm_forward_bf16(d_fx, d_fout, d_fmean, d_frstd, d_x, d_b, d_w, d_bias, N, C, &gf);
        layernorm_forward_bf16(d_ln_res, d_m2, d_r2, d_res, d_w, d_bias, N, C, &g2);
        bf16 *fx = (bf16 *)back(d_fx, H(n), "fused x"), *fout = (bf16 *)back(d_fout, H(n), "fused out");
        bf16 *ln_res = (bf16 *)back(d_ln_res, H(n), "ln of the residual");
        float *fmean = back(d_fmean, F(N), "fused mean"), *frstd = back(d_frstd, F(N), "fused rstd");
        float *m2 = back(d_m2, F(N), "mean apart"), *r2 = back(d_r2, F(N), "rstd apart");
        expect_same_bf16("residual_layernorm_forward_bf16 out against the two apart", ln_res, fout, n);
        expect_bits("residual_layernorm_forward_bf16 mean against the two apart", m2, fmean, N);
        expect_bits("residual_layernorm_forward_bf16 rstd against the two apart", r2, frstd, N);
        expect_flops("residual_layernorm_forward_bf16 against the two apart", &g, &gf);
        bf16 *out = (bf16 *)back(d_out, H(n), "ln out"), *res = (bf16 *)back(d_res, H(n), "residual out");
        float *mean = back(d_mean, F(N), "mean"), *rstd = back(d_rstd, F(N), "rstd");
        bf16 *rout = malloc(H(n)), *cout = malloc(H(n)), *cres = malloc(H(n));
        float *rmean = malloc(F(N)), *rrstd = malloc(F(N)), *cmean = malloc(F(N)), *crstd = malloc(F(N));
        for (int64_t i = 0; i < N; i++) ln_row_replay(rout + i * C, &rmean[i], &rrstd[i], x + i * C, w, bias, C);
        expect_same_bf16("layernorm_forward_bf16 (device) against its replay", rout, out, n);
        expect_bits("layernorm_forward_bf16 (device) mean against its replay", rmean, mean, N);
        expect_bits("layernorm_forward_bf16 (device) rstd against its replay", rrstd, rstd, N);
        layernorm_forward_bf16_cpu(cout, cmean, crstd, x, w, bias, N, C, &c);
        residual_forward_bf16_cpu(cres, x, b, n, &c);
        expect_close_bf16("layernorm_forward_bf16 (device) against the CPU", cout, out, n, ONE_ROUNDING);
        expect_close("layernorm_forward_bf16 (device) mean against the CPU", cmean, mean, N, 1e-5);
        expect_close("layernorm_forward_bf16 (device) rstd against the CPU", crstd, rstd, N, 1e-5);
        expect_same_bf16("residual_forward_bf16 (device) against the CPU", cres, res, n);
        expect_same_bf16("residual_layernorm_forward_bf16 x against the CPU", cres, fx, n);
        expect_flops("layernorm_forward_bf16 + residual_forward_bf16", &c, &g);
        cudaFree(d_x), cudaFree(d_b), cudaFree(d_w), cudaFree(d_bias);
        free(x), free(b), free(w), free(bias), free(out), free(res), free(mean), free(rstd);
        free(rout), free(cout), free(cres), free(rmean), free(rrstd), free(cmean), free(crstd);
        free(fx), free(fout), free(ln_res), free(fmean), free(frstd), free(m2), free(r2);
    }
}

static void test_layernorm_backward(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    for (int sh = 0; sh < NSHAPES; sh++)
        for (int bf16_dinp = 0; bf16_dinp < 2; bf16_dinp++) { /* the stream's gradient fp32, or bf16 (v2's) */
            int64_t N = ROWS[sh], C = COLS[sh], n = N * C;
            bf16 *x = rand_bf16(n, 11, 2.0f, 0.3f), *dxh = rand_bf16(n, 12, 1.0f, 0.0f), *ln = malloc(H(n));
            float *dy = rand_f32(n, 13, 1.0f), *dx = rand_f32(n, 14, 1.0f), *w = rand_f32(C, 15, 0.5f),
                  *bias = rand_f32(C, 16, 0.1f), *dw = rand_f32(C, 17, 1.0f), *db = rand_f32(C, 18, 1.0f),
                  *mean = malloc(F(N)), *rstd = malloc(F(N));
            for (int64_t c = 0; c < C; c++) w[c] += 1.0f;
            struct exec_ctx c = {0}, g = on_device(NULL), fwd = {0};
            layernorm_forward_bf16_cpu(ln, mean, rstd, x, w, bias, N, C, &fwd);
            bf16 *d_x = dev_from(x, H(n)), *d_dxh = dev_from(dxh, H(n));
            float *d_dy = dev_from(dy, F(n)), *d_dx = dev_from(dx, F(n)), *d_w = dev_from(w, F(C)),
                  *d_mean = dev_from(mean, F(N)), *d_rstd = dev_from(rstd, F(N)), *d_dw = dev_from(dw, F(C)),
                  *d_db = dev_from(db, F(C));
            struct act_out dev_dinp = bf16_dinp ? act_out_bf16(d_dxh, MEM_DEVICE) : act_out_f32(d_dx, MEM_DEVICE);
            layernorm_backward_bf16(dev_dinp, d_dw, d_db, d_dy, d_x, d_w, d_mean, d_rstd, N, C, &g);
            float *gdx = back(d_dx, F(n), "dinp"), *gdw = back(d_dw, F(C), "dweight"), *gdb = back(d_db, F(C), "dbias");
            bf16 *gdxh = (bf16 *)back(d_dxh, H(n), "dinp bf16");
            struct act_out cpu_dinp = bf16_dinp ? act_out_bf16(dxh, MEM_HOST) : act_out_f32(dx, MEM_HOST);
            layernorm_backward_bf16_cpu(cpu_dinp, dw, db, dy, x, w, mean, rstd, N, C, &c);
            if (bf16_dinp) expect_close_bf16("layernorm_backward_bf16 (device) dinp bf16", dxh, gdxh, n, ONE_ROUNDING);
            else expect_close("layernorm_backward_bf16 (device) dinp", dx, gdx, n, 1e-5);
            expect_close("layernorm_backward_bf16 (device) dweight", dw, gdw, C, 1e-5);
            expect_close("layernorm_backward_bf16 (device) dbias", db, gdb, C, 1e-5);
            expect_flops("layernorm_backward_bf16", &c, &g);
            cudaFree(d_x), cudaFree(d_dy), cudaFree(d_w), cudaFree(d_mean), cudaFree(d_rstd);
            free(x), free(dxh), free(ln), free(dy), free(dx), free(w), free(bias), free(dw), free(db), free(mean);
            free(rstd), free(gdx), free(gdw), free(gdb), free(gdxh);
        }
}

static void test_gelu_backward_grads(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    static const int64_t SIZES[] = {1, 7, 8 * 1000 + 5, 65536};
    for (size_t s = 0; s < sizeof SIZES / sizeof SIZES[0]; s++) {
        int64_t n = SIZES[s];
        bf16 *pre = rand_bf16(n, 21 + s, 4.0f, 0.0f), *dout = rand_bf16(n, 31 + s, 2.0f, 0.0f), *cd = malloc(H(n));
        bf16 *d_pre = dev_from(pre, H(n)), *d_d = dev_from(dout, H(n));
        struct exec_ctx c = {0}, g = on_device(NULL);
        gelu_backward_bf16_grads(d_d, d_pre, d_d, n, &g); /* in place, as the model calls it */
        bf16 *gd = (bf16 *)back(d_d, H(n), "gelu dinp");
        gelu_backward_bf16_grads_cpu(cd, pre, dout, n, &c);
        expect_same_bf16("gelu_backward_bf16_grads (device)", cd, gd, n);
        expect_flops("gelu_backward_bf16_grads", &c, &g);
        cudaFree(d_pre);
        free(pre), free(dout), free(cd), free(gd);
    }
}

/* One matmul_*_mixed case: N C OC, the output's dtype, a bias or none. */
struct mm_case {
    int64_t N, C, OC;
    bool out_bf16, bias, dout_bf16;
};

static void run_mixed(struct kernel_context *kc, struct mm_case k) {
    int64_t N = k.N, C = k.C, OC = k.OC;
    char what[128];
    snprintf(what, sizeof what, "matmul_*_mixed N %lld C %lld OC %lld%s%s%s", (long long)N, (long long)C,
             (long long)OC, k.out_bf16 ? " bf16 out" : "", k.bias ? " bias" : "", k.dout_bf16 ? " bf16 dout" : "");
    bf16 *x = rand_bf16(N * C, 41, 1.0f, 0.0f), *douth = rand_bf16(N * OC, 42, 1.0f, 0.0f);
    float *w = rand_f32(OC * C, 43, 0.5f), *bias = k.bias ? rand_f32(OC, 44, 0.5f) : NULL,
          *doutf = rand_f32(N * OC, 45, 1.0f), *dw = rand_f32(OC * C, 46, 1.0f), *db = rand_f32(OC, 47, 1.0f);
    struct operand dout_c = k.dout_bf16 ? operand_bf16(douth, MEM_HOST) : operand_f32(doutf, MEM_HOST);
    bf16 *d_x = dev_from(x, H(N * C)), *d_douth = dev_from(douth, H(N * OC));
    float *d_w = dev_from(w, F(OC * C)), *d_bias = bias ? dev_from(bias, F(OC)) : NULL,
          *d_doutf = dev_from(doutf, F(N * OC)), *d_dw = dev_from(dw, F(OC * C)), *d_db = dev_from(db, F(OC));
    size_t out_bytes = k.out_bf16 ? H(N * OC) : F(N * OC), dinp_bytes = k.out_bf16 ? H(N * C) : F(N * C);
    void *d_out = dev_poisoned(out_bytes), *d_dinp = dev_poisoned(dinp_bytes);
    struct act_out gout = k.out_bf16 ? act_out_bf16(d_out, MEM_DEVICE) : act_out_f32(d_out, MEM_DEVICE);
    struct act_out gdinp = k.out_bf16 ? act_out_bf16(d_dinp, MEM_DEVICE) : act_out_f32(d_dinp, MEM_DEVICE);
    struct operand dout_g = k.dout_bf16 ? operand_bf16(d_douth, MEM_DEVICE) : operand_f32(d_doutf, MEM_DEVICE);
    struct exec_ctx g = on_device(kc), c = {0};
    long long fused = kc->bias_epilogues;
    matmul_forward_mixed(gout, operand_bf16(d_x, MEM_DEVICE), operand_f32(d_w, MEM_DEVICE), d_bias, N, C, OC, &g);
    matmul_backward_mixed(gdinp, d_dw, k.bias ? d_db : NULL, dout_g, operand_bf16(d_x, MEM_DEVICE),
                          operand_f32(d_w, MEM_DEVICE), N, C, OC, &g);
    void *out = back(d_out, out_bytes, "out"), *dinp = back(d_dinp, dinp_bytes, "dinp");
    float *gdw = back(d_dw, F(OC * C), "dweight"), *gdb = back(d_db, F(OC), "dbias");
    /* the CPU's reference: fp32 outputs, narrowed where the device's are bf16 */
    float *cout = malloc(F(N * OC)), *cdinp = malloc(F(N * C));
    matmul_forward_mixed_cpu(act_out_f32(cout, MEM_HOST), operand_bf16(x, MEM_HOST), operand_f32(w, MEM_HOST), bias,
                             N, C, OC, &c);
    matmul_backward_mixed_cpu(act_out_f32(cdinp, MEM_HOST), dw, k.bias ? db : NULL, dout_c,
                              operand_bf16(x, MEM_HOST), operand_f32(w, MEM_HOST), N, C, OC, &c);
    if (k.out_bf16) {
        float *go = widened(out, N * OC), *gi = widened(dinp, N * C);
        expect_close(what, cout, go, N * OC, ONE_ROUNDING + 1e-5);
        expect_close(what, cdinp, gi, N * C, ONE_ROUNDING + 1e-5);
        free(go), free(gi);
    } else {
        expect_close(what, cout, out, N * OC, 1e-5);
        expect_close(what, cdinp, dinp, N * C, 1e-5);
    }
    expect_close(what, dw, gdw, OC * C, 1e-5);
    if (k.bias) expect_close(what, db, gdb, OC, 1e-5);
    expect_flops(what, &c, &g);
    bool aligned = C % 8 == 0 && OC % 8 == 0;
    if (aligned && k.bias && kc->bias_epilogues != fused + 2)
        fail_msg("%s: %lld bias epilogues, 2 expected (an aligned shape)", what, kc->bias_epilogues - fused);
    cudaFree(d_x), cudaFree(d_douth), cudaFree(d_w), cudaFree(d_doutf);
    if (d_bias) cudaFree(d_bias);
    free(x), free(douth), free(w), free(bias), free(doutf), free(dw), free(db), free(out), free(dinp), free(gdw);
    free(gdb), free(cout), free(cdinp);
}

static void test_matmul_mixed(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    char err[128];
    struct kernel_context *kc = cuda_kernels_open(true, err, sizeof err);
    if (!kc) fail_msg("cuda_kernels_open: %s", err);
    static const int64_t SHAPES[][3] = {{1, 1, 1}, {3, 33, 7}, {67, 768, 2304}, {130, 776, 264}, {257, 64, 96}};
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
        for (int v = 0; v < 8; v++)
            run_mixed(kc, (struct mm_case){SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], v & 1, v & 2, v & 4});
    /* every case of a shape after its first found the plans the first made */
    const struct lt_cache *plans = kc->lt_plans;
    assert_non_null(plans);
    if (!(plans->hits > 0 && plans->misses <= plans->used))
        fail_msg("the plan cache: %lld hits, %lld misses, %d slots used", plans->hits, plans->misses, plans->used);
    cuda_kernels_close(kc);
}

static void test_attention_plain(void **state) {
    (void)state;
    SKIP_WITHOUT_DEVICE();
    static const int64_t SH[][4] = {{1, 1, 8, 1}, {2, 7, 12, 3}, {3, 65, 64, 4}}; /* B T C NH */
    for (size_t s = 0; s < sizeof SH / sizeof SH[0]; s++)
        for (int where = 0; where < 3; where++) { /* probabilities: bf16 store, fp32 bf16 values, not stored */
            int64_t B = SH[s][0], T = SH[s][1], C = SH[s][2], NH = SH[s][3];
            int64_t n_qkv = 3 * B * T * C, n_out = B * T * C, n_att = B * NH * T * T;
            size_t ns = attention_bf16_scratch(B, T, C, NH);
            bf16 *qkv = rand_bf16(n_qkv, 61, 1.0f, 0.0f), *cout = malloc(H(n_out)), *catt = malloc(H(n_att));
            bf16 *cdq = malloc(H(n_qkv));
            float *dout = rand_f32(n_out, 62, 1.0f), *scr = malloc(F(ns)), *catt32 = malloc(F(n_att));
            bf16 *d_qkv = dev_from(qkv, H(n_qkv)), *d_out = dev_poisoned(H(n_out)), *d_dq = dev_poisoned(H(n_qkv));
            void *d_att = where == 0 ? dev_poisoned(H(n_att)) : where == 1 ? dev_poisoned(F(n_att)) : NULL;
            float *d_dout = dev_from(dout, F(n_out)), *d_scr = dev_poisoned(F(ns));
            struct act_out g_att = where == 0 ? act_out_bf16(d_att, MEM_DEVICE)
                                   : where == 1 ? act_out_bf16_values(d_att, MEM_DEVICE)
                                                : act_out_none();
            struct act_out c_att = where == 0 ? act_out_bf16(catt, MEM_HOST)
                                   : where == 1 ? act_out_bf16_values(catt32, MEM_HOST)
                                                : act_out_none();
            struct exec_ctx g = on_device(NULL), c = {0};
            attention_forward_bf16(act_out_bf16(d_out, MEM_DEVICE), g_att, d_qkv, d_scr, B, T, C, NH, &g);
            attention_forward_bf16_cpu(act_out_bf16(cout, MEM_HOST), c_att, qkv, scr, B, T, C, NH, &c);
            bf16 *gout = (bf16 *)back(d_out, H(n_out), "attention out");
            expect_close_bf16("attention_forward_bf16 (device) out", cout, gout, n_out, ONE_ROUNDING + 1e-5);
            if (where < 2) { /* the backward reads the stored probabilities */
                struct operand g_p = where == 0 ? operand_bf16(d_att, MEM_DEVICE) : operand_f32(d_att, MEM_DEVICE);
                struct operand c_p = where == 0 ? operand_bf16(catt, MEM_HOST) : operand_f32(catt32, MEM_HOST);
                attention_backward_bf16(d_dq, d_dout, d_qkv, g_p, d_scr, B, T, C, NH, &g);
                attention_backward_bf16_cpu(cdq, dout, qkv, c_p, scr, B, T, C, NH, &c);
                bf16 *gdq = (bf16 *)back(d_dq, H(n_qkv), "attention dqkv");
                expect_close_bf16("attention_backward_bf16 (device) dqkv", cdq, gdq, n_qkv, ONE_ROUNDING + 1e-5);
                if (where == 0) {
                    bf16 *gatt = (bf16 *)back(d_att, H(n_att), "probabilities bf16");
                    expect_close_bf16("attention_forward_bf16 (device) probabilities", catt, gatt, n_att,
                                      ONE_ROUNDING + 1e-5);
                    free(gatt);
                } else {
                    float *gatt = back(d_att, F(n_att), "probabilities fp32");
                    expect_close("attention_forward_bf16 (device) probabilities, bf16 values", catt32, gatt, n_att,
                                 ONE_ROUNDING + 1e-5);
                    for (int64_t i = 0; i < n_att; i++)
                        if (bf16_to_f32(f32_to_bf16(gatt[i])) != gatt[i])
                            fail_msg("attention probability %lld: %a is not a bf16 value", (long long)i, (double)gatt[i]);
                    free(gatt);
                }
                expect_flops("attention_*_bf16 (plain)", &c, &g);
                free(gdq);
            } else {
                cudaFree(d_dq);
            }
            cudaFree(d_qkv), cudaFree(d_dout), cudaFree(d_scr);
            free(qkv), free(cout), free(catt), free(cdq), free(dout), free(scr), free(catt32), free(gout);
        }
}

int main(void) {
    seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("seed %llu\n", (unsigned long long)seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm_forward_and_residual),
        cmocka_unit_test(test_layernorm_backward),
        cmocka_unit_test(test_gelu_backward_grads),
        cmocka_unit_test(test_matmul_mixed),
        cmocka_unit_test(test_attention_plain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
