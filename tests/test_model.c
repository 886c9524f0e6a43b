/* Whole-model gradient tests through the engine: the analytic gradient of
 * every tensor against central finite differences (fp32 mode), bf16 mode
 * against fp32 mode on the same weights, and gradient accumulation against
 * one large micro-batch. One thread, tiny shapes: the file runs in seconds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "engine_fixture.h"
#include "grid.h"
#include "../train/theory/accounting.h"
#include "grid_single.h"

enum { L = 2, C = 16, NH = 2, T = 8, V = 64, B = 2, SEED = 4242 };

/* An engine with the tracker and counter it needs, on the heap. */
struct harness {
    struct config cfg;
    struct mem_tracker mem;
    struct exec_ctx flops;
    struct grid grid;
    struct engine e;
};

/* What a harness varies beyond the dtype: the GEMMs' operands (bf16: the
 * model's bf16 data path, on the CPU's reference GEMMs, since a test's
 * counter carries no oneDNN context), the attention and the recompute. */
struct harness_opts {
    enum gemm_dtype_choice gemm;
    enum attention_kind attention;
    enum recompute_mode recompute;
};

/* An engine for configuration c (the whole model on one rank). */
static struct harness *harness_of(const struct config *c) {
    struct harness *h = calloc(1, sizeof *h);
    assert_non_null(h);
    h->cfg = *c;
    grid_init_single(&h->grid);
    fixture_engine_init(&h->e, &h->cfg, &h->grid, &h->mem, &h->flops);
    return h;
}

/* The test's shape (L, C, NH, T, V), all three dtypes dt, and o. */
static void config_with(struct config *c, enum dtype dt, int micro_batch, struct harness_opts o) {
    config_defaults(c);
    c->n_layer = L, c->d_model = C, c->n_head = NH, c->seq_len = T, c->vocab_size = V;
    c->micro_batch = micro_batch;
    c->param_dtype = c->grad_dtype = c->act_dtype = dt;
    c->gemm_dtype = o.gemm, c->attention = o.attention, c->recompute = o.recompute;
    c->seed = SEED;
}

static struct harness *harness_with(enum dtype dt, int micro_batch, struct harness_opts o) {
    struct config c;
    config_with(&c, dt, micro_batch, o);
    return harness_of(&c);
}

static struct harness *harness_new(enum dtype dt, int micro_batch) {
    return harness_with(dt, micro_batch, (struct harness_opts){.gemm = GEMM_DTYPE_FP32});
}

static void harness_free(struct harness *h) {
    engine_free(&h->e);
    mem_free_all(&h->mem);
    free(h);
}

/* n random tokens in [0, V) from a fixed seed (a small LCG: independent of
 * the library's RNG, so the test data never changes with it). */
static void random_tokens(int32_t *out, size_t n, uint64_t seed) {
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        out[i] = (int32_t)((s >> 33) % V);
    }
}

static int one_thread(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    return 0;
}

/* Indices (within tensor t) to check: first, last and two in between; for
 * wte, elements of rows whose token occurs in the batch. */
static int sample_indices(const struct tensor_info *t, bool is_wte, const int32_t *tokens, size_t n_tokens,
                          size_t out[4]) {
    if (is_wte) {
        size_t c = (size_t)t->cols;
        int r0 = tokens[0], r1 = tokens[n_tokens - 1], r2 = tokens[n_tokens / 2];
        out[0] = (size_t)r0 * c;                 /* first element of a used row */
        out[1] = (size_t)r1 * c + c - 1;         /* last element of a used row */
        out[2] = (size_t)r2 * c + c / 2;
        out[3] = (size_t)r0 * c + c - 2;
        return 4;
    }
    size_t n = t->numel;
    if (n == 1) {
        out[0] = 0;
        return 1;
    }
    out[0] = 0;
    out[1] = n - 1;
    out[2] = n / 3;
    out[3] = (2 * n) / 3 + 1 < n ? (2 * n) / 3 + 1 : n / 2;
    return 4;
}

/* Finite differences on the mean loss (~ln 64 = 4.16), an fp32 sum over
 * B*T = 16 tokens whose rounding noise is ~1e-6. A plain central difference
 * with h = 1e-2 has ~1e-6 / (2h) = 5e-5 of noise but a truncation error
 * (h^2/6 |f'''|) of ~0.5% on the residual-stream biases (the residual is
 * ~0.02 at init, so a 1e-2 step moves the LayerNorms off their tangent).
 * So the numeric gradient is Richardson-extrapolated from h and h/2,
 * (4 D(h/2) - D(h)) / 3, which cancels the h^2 term: measured max
 * |num - ana| is ~7e-5 (noise) and the relative error of every gradient
 * > 1e-2 is < 0.3%. Bounds: atol 2e-4 (~3x the noise), rtol 1e-2 (~3x the
 * relative error); a gradient off by 2% or a missing term fails. */
static const float FD_H = 1e-2f, FD_ATOL = 2e-4f, FD_RTOL = 1e-2f;

/* Central difference of the loss in parameter i with step h. */
static double central(struct engine *e, float *p, size_t i, float h, const int32_t *in, const int32_t *tgt) {
    float w0 = p[i];
    p[i] = w0 + h;
    float lp = fixture_forward(e, in, tgt);
    p[i] = w0 - h;
    float lm = fixture_forward(e, in, tgt);
    p[i] = w0;
    /* the steps actually taken (w0 +- h rounded) */
    return ((double)lp - (double)lm) / ((double)(w0 + h) - (double)(w0 - h));
}

static float richardson(struct engine *e, float *p, size_t i, const int32_t *in, const int32_t *tgt) {
    double d1 = central(e, p, i, FD_H, in, tgt), d2 = central(e, p, i, FD_H / 2, in, tgt);
    return (float)((4.0 * d2 - d1) / 3.0);
}

static void test_gradcheck_fp32(void **state) {
    (void)state;
    struct harness *h = harness_new(DTYPE_FP32, B);
    struct engine *e = &h->e;
    engine_init_params(e);
    int32_t tok[B * T + 1];
    random_tokens(tok, B * T + 1, 1);
    const int32_t *in = tok, *tgt = tok + 1; /* overlapping windows are fine: any targets do */
    int32_t targets[B * T];
    memcpy(targets, tgt, sizeof targets);

    engine_zero_grads(e);
    float loss = fixture_forward_backward(e, in, targets, 1.0f);
    /* At init the logits are ~0: the loss is ~ln V. */
    assert_true(fabsf(loss - logf((float)V)) < 0.05f);
    float *p = e->z.st.params;
    const float *g = e->z.st.grads;
    size_t psi = e->lay.total;
    float *ana = malloc(psi * sizeof *ana);
    assert_non_null(ana);
    memcpy(ana, g, psi * sizeof *ana);

    /* A real gradient: most entries are non-zero, and the padding rows of
     * wte (tokens V..Vp-1, never a target nor an input) get exactly zero. */
    struct tensor_info wte = layout_embed_tensor(&e->lay, EMB_WTE);
    size_t nonzero = 0, valid = 0;
    for (size_t i = 0; i < psi; i++) {
        bool pad = i >= wte.offset + (size_t)V * C && i < wte.offset + wte.numel;
        if (pad) {
            assert_true(ana[i] == 0.0f);
            continue;
        }
        valid++;
        nonzero += ana[i] != 0.0f;
    }
    assert_int_equal(wte.rows, padded_vocab(V));
    assert_true(wte.rows > V);
    printf("  fp32 gradient: %zu of %zu non-padding entries non-zero\n", nonzero, valid);
    assert_true((double)nonzero >= 0.9 * (double)valid);

    float max_abs_err = 0.0f, max_rel_err = 0.0f, min_checked = INFINITY;
    int n_checks = 0, n_big = 0;
    int nt = layout_num_tensors(&e->lay);
    for (int ti = 0; ti < nt; ti++) {
        struct tensor_info t = layout_tensor(&e->lay, ti);
        size_t idx[4];
        int k = sample_indices(&t, t.offset == wte.offset && t.numel == wte.numel, tok, B * T, idx);
        bool any_nonzero = false;
        for (int j = 0; j < k; j++) {
            size_t i = t.offset + idx[j];
            float num = richardson(e, p, i, in, targets), an = ana[i];
            float err = fabsf(num - an), scale = fmaxf(fabsf(num), fabsf(an));
            if (err > FD_ATOL + FD_RTOL * scale)
                fail_msg("%s (layer %d) [%zu]: numeric %.6g, analytic %.6g", t.name, t.layer, idx[j], num, an);
            if (err > max_abs_err) max_abs_err = err;
            if (scale > 1e-2f) {
                n_big++;
                if (err / scale > max_rel_err) max_rel_err = err / scale;
            }
            if (scale < min_checked) min_checked = scale;
            any_nonzero |= fabsf(an) > 0.0f;
            n_checks++;
        }
        /* every tensor takes part in the loss */
        if (!any_nonzero) fail_msg("%s (layer %d): all sampled analytic gradients are zero", t.name, t.layer);
    }
    printf("  gradient check: %d elements in %d tensors, max |num - ana| %.3g, max relative error %.3g over %d "
           "gradients > 1e-2\n",
           n_checks, nt, (double)max_abs_err, (double)max_rel_err, n_big);
    assert_int_equal(nt, 4 + L * 12);
    assert_true(n_big >= n_checks / 4); /* the check is not dominated by tiny gradients */
    free(ana);
    harness_free(h);
}

static double dot(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return s;
}

/* One micro-batch's loss and gradient with bf16 params, grads and
 * activations (o: the GEMMs, attention, recompute) against fp32 throughout
 * (fp32 GEMMs, the same attention and recompute) on the same weights (the
 * fp32 weights rounded to bf16, so both runs see identical values). */
struct against_fp32 {
    float l16, l32;
    double cosine, rel; /* of the gradients: cosine, ||g16 - g32|| / ||g32|| */
    uint64_t fingerprint; /* FNV-1a of the bf16 gradient's bytes: equal bits, equal prints */
};

static struct against_fp32 bf16_against_fp32(struct harness_opts o) {
    struct harness_opts o32 = o;
    o32.gemm = GEMM_DTYPE_FP32;
    struct harness *h32 = harness_with(DTYPE_FP32, B, o32), *h16 = harness_with(DTYPE_BF16, B, o);
    size_t psi = h32->e.lay.total;
    assert_int_equal(psi, h16->e.lay.total);
    engine_init_params(&h32->e);
    float *p32 = h32->e.z.st.params;
    bf16 *p16 = h16->e.z.st.params;
    for (size_t i = 0; i < psi; i++) {
        p16[i] = f32_to_bf16(p32[i]);
        p32[i] = bf16_to_f32(p16[i]);
    }
    fixture_set_weights(&h16->e, p32); /* master = p32, params = bf16(p32) = p16 */
    assert_memory_equal(h16->e.z.st.master, p32, psi * sizeof(float));

    int32_t tok[2 * B * T];
    random_tokens(tok, 2 * B * T, 2);
    const int32_t *in = tok, *tgt = tok + B * T;
    engine_zero_grads(&h32->e);
    engine_zero_grads(&h16->e);
    struct against_fp32 r = {.l32 = fixture_forward_backward(&h32->e, in, tgt, 1.0f),
                             .l16 = fixture_forward_backward(&h16->e, in, tgt, 1.0f),
                             .fingerprint = 14695981039346656037ull};
    float *g32 = h32->e.z.st.grads, *g16 = malloc(psi * sizeof *g16);
    assert_non_null(g16);
    const bf16 *gb = h16->e.z.st.grads;
    for (size_t i = 0; i < psi; i++) g16[i] = bf16_to_f32(gb[i]);
    const unsigned char *bytes = (const unsigned char *)gb;
    for (size_t i = 0; i < psi * sizeof *gb; i++) r.fingerprint = (r.fingerprint ^ bytes[i]) * 1099511628211ull;
    double n32 = sqrt(dot(g32, g32, psi)), n16 = sqrt(dot(g16, g16, psi));
    assert_true(n32 > 0.0);
    r.cosine = dot(g32, g16, psi) / (n32 * n16);
    double diff2 = 0.0;
    for (size_t i = 0; i < psi; i++) diff2 += ((double)g16[i] - g32[i]) * ((double)g16[i] - g32[i]);
    r.rel = sqrt(diff2) / n32;
    printf("  bf16 (%s GEMMs, %s attention, recompute %d) vs fp32: loss %.5f vs %.5f, gradient cosine %.6f, "
           "relative L2 difference %.4f, bf16 gradient fingerprint %016llx\n",
           o.gemm == GEMM_DTYPE_BF16 ? "bf16" : "fp32", o.attention == ATTENTION_FLASH ? "flash" : "plain",
           (int)o.recompute, (double)r.l16, (double)r.l32, r.cosine, r.rel, (unsigned long long)r.fingerprint);
    free(g16);
    harness_free(h32);
    harness_free(h16);
    return r;
}

static void test_bf16_matches_fp32(void **state) {
    (void)state;
    struct against_fp32 r = bf16_against_fp32((struct harness_opts){.gemm = GEMM_DTYPE_FP32});
    assert_true(fabsf(r.l32 - r.l16) < 0.02f);
    /* Measured: cosine 0.999995, relative L2 0.0032 (bf16 rounding of the
     * activations and of each unit's gradient, ~2^-9 relative each). Bounds
     * with ~10x margin on the difference: relative L2 < 0.03, and so
     * 1 - cosine ~ rel^2 / 2 < 5e-4. */
    assert_true(r.cosine > 0.9995);
    assert_true(r.rel < 0.03);
}

/* The bf16 data path (bf16 GEMMs reading the bf16 params and saved bf16
 * activations as they are; include/gpt.h) in each attention and recompute
 * mode, on the CPU's reference GEMMs: every CPU runs it. The GEMMs' bf16
 * operands add their rounding (~2^-9 relative per operand) to the
 * storage's, and the bf16 activation gradients theirs (d residual at each
 * LayerNorm backward, d fc where its GEMM stores it; not with full
 * recompute, which has no data path). Measured: cosine 0.999990, relative
 * L2 0.0047 (0.999993 and 0.0038 with fp32 activation gradients; full
 * recompute 0.999993, 0.0038): the bounds below keep a 10x margin on the
 * relative difference. */
static void test_bf16_gemms_match_fp32(void **state) {
    (void)state;
    const struct harness_opts modes[] = {
        {GEMM_DTYPE_BF16, ATTENTION_PLAIN, RECOMPUTE_NONE},
        {GEMM_DTYPE_BF16, ATTENTION_PLAIN, RECOMPUTE_SELECTIVE},
        {GEMM_DTYPE_BF16, ATTENTION_PLAIN, RECOMPUTE_FULL},
        {GEMM_DTYPE_BF16, ATTENTION_FLASH, RECOMPUTE_NONE},
    };
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        struct against_fp32 r = bf16_against_fp32(modes[k]);
        assert_true(fabsf(r.l32 - r.l16) < 0.02f);
        assert_true(r.cosine > 0.999);
        assert_true(r.rel < 0.05);
    }
}

/* The bf16 data path's scratch, to the byte: against the same run with
 * fp32 GEMMs (whose bf16 activations go through fp32 working copies, and
 * whose weights are widened whole), model/gpt.c keeps no fp32 residual
 * in, residual out or final LayerNorm output (3 B T C floats) and no fp32
 * copy of ln1, res2, ln2 or the GELU output (7 B T C), keeps the
 * activation gradients passed between kernels, d residual (C per token),
 * d fc (4C) and d qkv (3C), as bf16 (2 bytes fewer each), and the engine's
 * fp32 view of a layer holds its vectors only (12 C^2 fewer: the four GEMM
 * weights), of the embedding wpe only (Vp C fewer: wte); the tracker's
 * difference equals the theory's (train/theory/theory_rank.c) and that
 * formula, in each mode; with full recompute (no data path for the
 * activations) only the views differ. */
static void test_bf16_path_scratch(void **state) {
    (void)state;
    const struct harness_opts modes[] = {
        {GEMM_DTYPE_BF16, ATTENTION_PLAIN, RECOMPUTE_NONE},
        {GEMM_DTYPE_BF16, ATTENTION_PLAIN, RECOMPUTE_SELECTIVE},
        {GEMM_DTYPE_BF16, ATTENTION_FLASH, RECOMPUTE_NONE},
        {GEMM_DTYPE_BF16, ATTENTION_PLAIN, RECOMPUTE_FULL},
    };
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        struct harness_opts o32 = modes[k];
        o32.gemm = GEMM_DTYPE_FP32;
        struct harness *h16 = harness_with(DTYPE_BF16, B, modes[k]), *h32 = harness_with(DTYPE_BF16, B, o32);
        /* the attention's per-thread buffers are sized for the threads at
         * the time (this group's one); theory reads them from --threads */
        h16->cfg.threads = h32->cfg.threads = omp_get_max_threads();
        double measured = (double)h32->mem.live[MEM_SCRATCH] - (double)h16->mem.live[MEM_SCRATCH];
        double theory = theory_trainer_scratch(&h32->cfg, rank_place_dp(1, 0)).persistent -
                        theory_trainer_scratch(&h16->cfg, rank_place_dp(1, 0)).persistent;
        double Vp = h16->e.lay.shape.Vp, views = (12.0 * C * C + Vp * C) * 4;
        /* not full recompute: the residual in, out and final LayerNorm out
         * (3C per token) and the widened block (15C, plus the
         * probabilities NH T where they are stored) against the data
         * path's FC output (4C: 11C in all), and the bf16 attention's
         * per-thread tiles (one thread; plain: P and dS, q, k, v, out,
         * against the fp32 one's dS; flash: q, k, v, out, dk, dv) */
        bool plain = modes[k].attention == ATTENTION_PLAIN, none = modes[k].recompute == RECOMPUTE_NONE;
        double per_token = 3.0 + 11.0, probs = plain && none ? (double)NH * T : 0;
        double tiles = plain ? (2.0 * T * T + 4.0 * T * (C / NH)) - (double)T * T : 6.0 * T * (C / NH);
        double grads = (1.0 + 4.0 + 3.0) * C * B * T * (4 - 2);
        double kept = (per_token * C + probs) * B * T * 4 - tiles * 4 + grads;
        double want = views + (modes[k].recompute == RECOMPUTE_FULL ? 0 : kept);
        printf("  scratch, fp32 GEMMs minus the bf16 data path (recompute %d, %s): measured %.0f B, theory %.0f B, "
               "formula %.0f B\n",
               (int)modes[k].recompute, modes[k].attention == ATTENTION_FLASH ? "flash" : "plain", measured, theory,
               want);
        assert_true(measured == theory);
        assert_true(measured == want);
        harness_free(h16);
        harness_free(h32);
    }
}

/* The conversion passes of one micro-batch's forward and backward on the
 * demo's shape (configs/demo.conf) on the bf16 data path, counted by
 * include/conversions.h (bytes read plus written), against what the math
 * needs, per pass:
 *   widen:  each unit's vectors for the model (the params are read as bf16
 *           by the GEMMs and the embedding): a layer's 13 C (LayerNorms,
 *           biases) at its forward and again at its backward, wpe and the
 *           final LayerNorm's 2 C once; and per layer the backward's fp32
 *           inputs of the attention, qkv (3 B T C) and the probabilities
 *           (B NH T T), and its output (B T C) for flash's D; 6 bytes each;
 *   round:  the attention's inputs as the forward leaves them, qkv and
 *           the probabilities, rounded in place and stored: 10 bytes each;
 *   narrow: the embedding's output (B T C): 6 bytes each (qkv and the
 *           attention output are rounded as their GEMM and kernel store
 *           them);
 *   accumulate: every unit's fp32 gradient rounded once into the bf16
 *           grads: 8 bytes per parameter.
 * The LayerNorms, residual adds, GELU and the stream move no conversion
 * bytes at all, nor do the activation gradients (bf16 between kernels,
 * each rounded as a kernel or GEMM stores it). The GEMMs' own operand rounding (oneDNN: the fp32 dout,
 * KERNEL_NARROW within the GEMM) is not run by the test's reference GEMMs
 * and not in these counts. */
static void check_conversion_bytes(enum recompute_mode recompute) {
    struct config c;
    char err[CONFIG_ERR_LEN];
    config_defaults(&c);
    if (config_load_file(&c, "configs/demo.conf", err) != 0) fail_msg("configs/demo.conf: %s", err);
    c.gemm_dtype = GEMM_DTYPE_BF16; /* params, grads and activations: bf16 by default */
    c.recompute = recompute;
    assert_int_equal(c.param_dtype, DTYPE_BF16);
    assert_int_equal(c.act_dtype, DTYPE_BF16);
    assert_int_equal(c.grad_dtype, DTYPE_BF16);
    struct harness *h = harness_of(&c);
    struct engine *e = &h->e;
    engine_init_params(e);
    double Bd = c.micro_batch, Td = c.seq_len, Cd = c.d_model, Ld = c.n_layer;
    int32_t *tok = malloc(2 * (size_t)c.micro_batch * c.seq_len * sizeof *tok);
    assert_non_null(tok);
    for (int i = 0; i < 2 * c.micro_batch * c.seq_len; i++) tok[i] = (int32_t)((i * 7 + 3) % c.vocab_size);
    engine_zero_grads(e);
    memset(h->flops.profile, 0, sizeof h->flops.profile);
    fixture_forward_backward(e, tok, tok + c.micro_batch * c.seq_len, 1.0f);

    double BTC = Bd * Td * Cd;
    double wpe = (double)layout_embed_tensor(&e->lay, EMB_WPE).numel;
    double want[KERNEL_NUM_KINDS] = {0};
    /* the attention reads and writes its stores: no widen of qkv, the
     * probabilities and its output, no round of qkv and the probabilities
     * (rounded as the kernel stores them); qkv's GEMM writes its store */
    want[KERNEL_WIDEN] = 6 * (2 * Ld * 13 * Cd + wpe + 2 * Cd);
    want[KERNEL_ROUND] = 0;
    want[KERNEL_NARROW] = 6 * BTC;
    want[KERNEL_ACCUMULATE] = 8 * (double)e->lay.total;
    const enum kernel_kind kinds[] = {KERNEL_WIDEN, KERNEL_ROUND, KERNEL_NARROW, KERNEL_ACCUMULATE};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        double got = h->flops.profile[kinds[k]].bytes;
        printf("  demo shape, recompute %d, one micro-batch: %-22s %10.0f B (formula %.0f B)\n", (int)recompute,
               kernel_kind_name(kinds[k]), got, want[kinds[k]]);
        assert_true(got == want[kinds[k]]);
    }
    free(tok);
    harness_free(h);
}

/* Selective recompute (plain attention) moves the same bytes: its forward
 * stores no probabilities and its backward's recompute rounds them as it
 * stores them (no round pass of its own, which moved 10 bytes per
 * probability twice a layer before). */
static void test_bf16_path_conversion_bytes(void **state) {
    (void)state;
    check_conversion_bytes(RECOMPUTE_NONE);
    check_conversion_bytes(RECOMPUTE_SELECTIVE);
}

/* Two micro-batches of B with dloss 0.5 each = one micro-batch of 2B. */
static void test_grad_accum_equivalence(void **state) {
    (void)state;
    struct harness *hs = harness_new(DTYPE_FP32, B), *hb = harness_new(DTYPE_FP32, 2 * B);
    size_t psi = hs->e.lay.total;
    engine_init_params(&hs->e);
    engine_init_params(&hb->e);
    assert_memory_equal(hs->e.z.st.params, hb->e.z.st.params, psi * sizeof(float));

    int32_t in[2 * B * T], tgt[2 * B * T];
    random_tokens(in, 2 * B * T, 3);
    random_tokens(tgt, 2 * B * T, 4);
    engine_zero_grads(&hs->e);
    float la = fixture_forward_backward(&hs->e, in, tgt, 0.5f);
    float lb = fixture_forward_backward(&hs->e, in + B * T, tgt + B * T, 0.5f);
    engine_zero_grads(&hb->e);
    float lbig = fixture_forward_backward(&hb->e, in, tgt, 1.0f);
    assert_true(fabsf(0.5f * (la + lb) - lbig) <= 1e-5f * lbig);

    const float *gs = hs->e.z.st.grads, *gb = hb->e.z.st.grads;
    double nb = sqrt(dot(gb, gb, psi)), d2 = 0.0, max_rel = 0.0, gmax = 0.0;
    for (size_t i = 0; i < psi; i++) gmax = fmax(gmax, fabs((double)gb[i]));
    for (size_t i = 0; i < psi; i++) {
        double d = (double)gs[i] - gb[i];
        d2 += d * d;
        max_rel = fmax(max_rel, fabs(d) / gmax);
    }
    printf("  grad accumulation: relative L2 difference %.3g, max element difference %.3g of max |g|\n",
           sqrt(d2) / nb, max_rel);
    assert_true(nb > 0.0);
    assert_true(sqrt(d2) <= 1e-5 * nb);
    assert_true(max_rel <= 1e-5);
    /* and not trivially: one micro-batch alone is a different gradient */
    engine_zero_grads(&hs->e);
    fixture_forward_backward(&hs->e, in, tgt, 1.0f);
    d2 = 0.0;
    for (size_t i = 0; i < psi; i++) d2 += ((double)gs[i] - gb[i]) * ((double)gs[i] - gb[i]);
    assert_true(sqrt(d2) > 1e-2 * nb);
    harness_free(hs);
    harness_free(hb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_fp32),
        cmocka_unit_test(test_bf16_matches_fp32),
        cmocka_unit_test(test_bf16_gemms_match_fp32),
        cmocka_unit_test(test_bf16_path_scratch),
        cmocka_unit_test(test_bf16_path_conversion_bytes),
        cmocka_unit_test(test_grad_accum_equivalence),
    };
    return cmocka_run_group_tests(tests, one_thread, NULL);
}
