/* Activation checkpointing: gradients with full and selective recompute
 * equal those without, bit for bit (the recompute runs the same
 * deterministic kernels on the same inputs), in fp32 and in bf16, on
 * GPT-2's blocks and on LLaMA's (GQA, SwiGLU); and the saved activations
 * shrink exactly as the formulas say on a shape where the s^2 term matters
 * (T = 128 >> C = 16). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../train/theory/accounting.h"
#include "engine.h"
#include "engine_fixture.h"
#include "grid.h"
#include "grid_single.h"

struct run {
    struct config cfg;
    struct mem_tracker mem;
    struct exec_ctx flops;
    struct grid grid;
    struct engine e;
};

/* LLaMA's test shape: 4 query heads on 2 key/value heads, SwiGLU of width 32 */
enum { LLAMA_KV = 2, LLAMA_F = 32 };

static struct run *run_new(enum recompute_mode r, enum dtype dt, int T, enum model_arch arch) {
    struct run *h = calloc(1, sizeof *h);
    assert_non_null(h);
    config_defaults(&h->cfg);
    h->cfg.n_layer = 3, h->cfg.d_model = 16, h->cfg.n_head = 4, h->cfg.seq_len = T, h->cfg.vocab_size = 64;
    h->cfg.micro_batch = 2;
    h->cfg.arch = arch;
    if (arch == ARCH_LLAMA) h->cfg.n_kv_head = LLAMA_KV, h->cfg.ffn_dim = LLAMA_F;
    h->cfg.recompute = r;
    h->cfg.param_dtype = h->cfg.grad_dtype = h->cfg.act_dtype = dt;
    grid_init_single(&h->grid);
    fixture_engine_init(&h->e, &h->cfg, &h->grid, &h->mem, &h->flops);
    engine_init_params(&h->e);
    return h;
}

static void run_free(struct run *h) {
    engine_free(&h->e);
    mem_free_all(&h->mem);
    free(h);
}

/* Gradients of two micro-batches (accumulated), copied out. */
static void *grads_of(struct run *h) {
    int BT = h->cfg.micro_batch * h->cfg.seq_len;
    int32_t *tok = malloc(2 * (size_t)BT * sizeof *tok);
    for (int i = 0; i < 2 * BT; i++) tok[i] = (int32_t)((i * 7 + 3) % h->cfg.vocab_size);
    engine_zero_grads(&h->e);
    fixture_forward_backward(&h->e, tok, tok + BT, 0.5f);
    fixture_forward_backward(&h->e, tok + BT, tok, 0.5f);
    size_t bytes = h->e.lay.total * dtype_size(h->cfg.grad_dtype);
    void *g = malloc(bytes);
    memcpy(g, h->e.z.st.grads, bytes);
    free(tok);
    return g;
}

static void check_bitwise(enum dtype dt, enum model_arch arch) {
    struct run *none = run_new(RECOMPUTE_NONE, dt, 16, arch);
    void *g0 = grads_of(none);
    size_t bytes = none->e.lay.total * dtype_size(dt);
    for (enum recompute_mode r = RECOMPUTE_SELECTIVE; r <= RECOMPUTE_FULL; r++) {
        struct run *h = run_new(r, dt, 16, arch);
        void *g = grads_of(h);
        assert_memory_equal(g, g0, bytes);
        free(g);
        run_free(h);
    }
    free(g0);
    run_free(none);
}

static void test_grads_bitwise_fp32(void **s) { (void)s; check_bitwise(DTYPE_FP32, ARCH_GPT2); }
static void test_grads_bitwise_bf16(void **s) { (void)s; check_bitwise(DTYPE_BF16, ARCH_GPT2); }
static void test_llama_grads_bitwise_fp32(void **s) { (void)s; check_bitwise(DTYPE_FP32, ARCH_LLAMA); }
static void test_llama_grads_bitwise_bf16(void **s) { (void)s; check_bitwise(DTYPE_BF16, ARCH_LLAMA); }

/* Activation bytes of one run per mode, each equal to its theory. */
static void measure_modes(enum model_arch arch, double measured[3]) {
    enum recompute_mode modes[3] = {RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL};
    for (int i = 0; i < 3; i++) {
        struct run *h = run_new(modes[i], DTYPE_BF16, 128, arch);
        measured[i] = (double)h->mem.peak[MEM_ACTIVATIONS];
        assert_true(measured[i] == theory_trainer_activations(&h->cfg, rank_place_dp(1, 0)).total);
        run_free(h);
    }
}

/* Measured equals the formula in each mode, and the modes order as the
 * formulas say: dropping the probabilities saves L NH T e B T and costs one
 * fp32 layer of them; full keeps one C e per token and layer. */
static void test_activation_bytes_shrink(void **s) {
    (void)s;
    double measured[3];
    measure_modes(ARCH_GPT2, measured);
    double L = 3, NH = 4, T = 128, BT = 2 * 128.0, C = 16, e = 2;
    assert_true(measured[0] - measured[1] == L * NH * T * e * BT - NH * T * 4 * BT);
    assert_true(measured[1] - measured[2] ==
                L * (16 * C * e * BT + 16 * BT) + NH * T * 4 * BT                /* selective */
                    - (L * C * e * BT + (15 * C + NH * T) * 4 * BT + 16 * BT)); /* full */
    assert_true(measured[2] < measured[1] && measured[1] < measured[0]);
}

/* LLaMA's (model/llama.c): a layer keeps its input C and its block, ln1,
 * res2, ln2 (3C), atty (C), qkv at GQA width (NH + 2 KV) hs and up, gate,
 * SwiGLU (3F), in e; its probabilities NH T and two rstd in fp32.
 * Selective drops the probabilities for one layer's fp32 buffer; full keeps
 * the input, recomputing one layer's block, probabilities and rstd (the
 * block in the stores' dtype). */
static void test_llama_activation_bytes_shrink(void **s) {
    (void)s;
    double measured[3];
    measure_modes(ARCH_LLAMA, measured);
    double L = 3, NH = 4, T = 128, BT = 2 * 128.0, C = 16, e = 2, hs = C / NH;
    double block = (4 * C + (NH + 2 * LLAMA_KV) * hs + 3 * LLAMA_F) * e, probs = NH * T * 4, rstd = 2 * 4;
    assert_true(measured[0] - measured[1] == (L - 1) * probs * BT);
    assert_true(measured[1] - measured[2] == L * (C * e + block + rstd) * BT + probs * BT /* selective */
                                                 - (L * C * e + block + probs + rstd) * BT); /* full */
    assert_true(measured[2] < measured[1] && measured[1] < measured[0]);
}

static int setup(void **s) {
    (void)s;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grads_bitwise_fp32),
        cmocka_unit_test(test_grads_bitwise_bf16),
        cmocka_unit_test(test_activation_bytes_shrink),
        cmocka_unit_test(test_llama_grads_bitwise_fp32),
        cmocka_unit_test(test_llama_grads_bitwise_bf16),
        cmocka_unit_test(test_llama_activation_bytes_shrink),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
