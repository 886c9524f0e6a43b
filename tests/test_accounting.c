/* Measured against theory: for every dtype recipe, the tagged allocator's
 * model-state bytes equal the ZeRO accounting to the byte (vocab padding as
 * its own term), the saved activations equal the formula for what
 * model/gpt.c keeps, and the FLOP counters equal the layer-GEMM and
 * attention-GEMM formulas exactly over real training steps, recomputation
 * included. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../train/theory/accounting.h"
#include "grid_single.h"
#include "rng.h"
#include "../train/run/run.h"
#include "shard_write.h"

static char DIR_[64], SHARD[128];
static struct grid GRID; /* one process: a 1 x 1 x 1 grid */

static int setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    grid_init_single(&GRID);
    snprintf(DIR_, sizeof DIR_, "/tmp/shardlab_test_acct_XXXXXX");
    if (!mkdtemp(DIR_)) return -1;
    snprintf(SHARD, sizeof SHARD, "%s/tokens.bin", DIR_);
    enum { N = 20000 };
    static uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)(rng_u32(7, 0, (uint64_t)i) % 200);
    char err[DATA_ERR_LEN];
    return shard_write(SHARD, tok, N, err);
}

static int teardown(void **state) {
    (void)state;
    unlink(SHARD);
    return rmdir(DIR_);
}

/* A small model whose vocabulary (200) pads to 256, so padding shows. */
static void small_config(struct config *c, enum dtype p, enum dtype g, enum dtype a) {
    config_defaults(c);
    c->n_layer = 2;
    c->d_model = 32;
    c->n_head = 4;
    c->seq_len = 16;
    c->vocab_size = 200;
    c->micro_batch = 2;
    c->grad_accum = 2;
    c->steps = 3;
    c->val_every = 0;
    c->threads = 1;
    c->param_dtype = p;
    c->grad_dtype = g;
    c->act_dtype = a;
    snprintf(c->train_data, sizeof c->train_data, "%s", SHARD);
    c->val_data[0] = '\0';
}

/* The most state lines a run has: bf16 params with the fp32 master, grads,
 * and adafactor's first moment beside its statistics (five: the table once
 * held four, and this run wrote past it); the optimizer's two lines add up
 * to what the run allocated. */
static void test_adafactor_five_state_lines(void **state) {
    (void)state;
    struct config c;
    small_config(&c, DTYPE_BF16, DTYPE_BF16, DTYPE_FP32);
    c.optimizer = OPTIM_ADAFACTOR;
    c.adafactor_beta1 = 0.9f;
    struct trainer tr;
    char err[TRAINER_ERR_LEN];
    assert_int_equal(trainer_open(&tr, &c, &GRID, NULL, err), 0);
    struct state_theory st = theory_trainer_states(&c, rank_place_dp(1, 0));
    assert_int_equal(st.n, 5);
    double optimizer = 0;
    for (int i = 0; i < st.n; i++)
        if (st.lines[i].category == MEM_OPTIMIZER) optimizer += st.lines[i].psi_bytes + st.lines[i].padding_bytes;
    assert_true(optimizer == (double)tr.mem.live[MEM_OPTIMIZER]);
    assert_non_null(strstr(st.lines[4].rule, "Adafactor"));
    trainer_close(&tr);
}

static void check_recipe(enum dtype p, enum dtype g, enum dtype a, double expect_bytes_per_param) {
    struct config c;
    small_config(&c, p, g, a);
    struct trainer tr;
    char err[TRAINER_ERR_LEN];
    assert_int_equal(trainer_open(&tr, &c, &GRID, NULL, err), 0);

    struct state_theory st = theory_trainer_states(&c, rank_place_dp(1, 0));
    assert_true(st.padding == (256.0 - 200.0) * 32.0);
    assert_true(st.psi + st.padding == (double)tr.engine.lay.total);
    double per_param = 0, states = 0;
    for (int i = 0; i < st.n; i++) {
        const struct state_line *l = &st.lines[i];
        per_param += l->bytes_per_param;
        states += l->psi_bytes + l->padding_bytes;
        assert_true((double)tr.mem.live[l->category] == l->psi_bytes + l->padding_bytes);
    }
    assert_true(per_param == expect_bytes_per_param);
    double measured_states = (double)(tr.mem.live[MEM_PARAMS] + tr.mem.live[MEM_MASTER] + tr.mem.live[MEM_GRADS] +
                                      tr.mem.live[MEM_OPTIMIZER]);
    assert_true(measured_states == states);
    if (p == DTYPE_FP32) assert_int_equal(tr.mem.live[MEM_MASTER], 0);

    struct activation_theory at = theory_trainer_activations(&c, rank_place_dp(1, 0));
    assert_true((double)tr.mem.peak[MEM_ACTIVATIONS] == at.total);

    assert_int_equal(trainer_run(&tr, err), 0);
    struct flop_theory ft = theory_trainer_flops(&c, rank_place_dp(1, 0));
    assert_true(tr.flops.gemm == c.steps * ft.gemm);
    assert_true(tr.flops.attention == c.steps * ft.attention);
    /* full squares: 12 L B C T^2 accum, twice the model's causal 6 L C T per token */
    assert_true(ft.attention == 12.0 * 2 * 2 * 32 * 16 * 16 * 2);
    assert_true(ft.attention == 2 * ft.attention_model);
    trainer_close(&tr);
}

/* ZeRO 3.1: 2 + 2 + 12 = 16; bf16 weights with fp32 grads 18; pure fp32
 * 4 + 4 + 8 = 16 (THEORY.md 1.1). */
static void test_bf16_bf16(void **s) { (void)s; check_recipe(DTYPE_BF16, DTYPE_BF16, DTYPE_BF16, 16); }
static void test_bf16_fp32_grads(void **s) { (void)s; check_recipe(DTYPE_BF16, DTYPE_FP32, DTYPE_FP32, 18); }
static void test_all_fp32(void **s) { (void)s; check_recipe(DTYPE_FP32, DTYPE_FP32, DTYPE_FP32, 16); }
static void test_fp32_params_bf16_grads(void **s) { (void)s; check_recipe(DTYPE_FP32, DTYPE_BF16, DTYPE_BF16, 14); }

/* Recomputed FLOPs are counted where they are issued: selective re-runs
 * the attention's forward GEMMs (4 L B C T^2 per micro-batch), full the
 * layer forward up to the GELU (16 L C^2 per token) and the attention. */
static void check_recompute_flops(enum recompute_mode r) {
    struct config c;
    small_config(&c, DTYPE_FP32, DTYPE_FP32, DTYPE_FP32);
    c.recompute = r;
    struct trainer tr;
    char err[TRAINER_ERR_LEN];
    assert_int_equal(trainer_open(&tr, &c, &GRID, NULL, err), 0);
    assert_int_equal(trainer_run(&tr, err), 0);
    struct flop_theory ft = theory_trainer_flops(&c, rank_place_dp(1, 0));
    const double L = 2, B = 2, C = 32, T = 16, k = 2, tokens = B * T * k;
    assert_true(ft.attention == (12 + 4) * L * B * C * T * T * k);
    assert_true(ft.recompute == 4 * L * B * C * T * T * k + (r == RECOMPUTE_FULL ? 16 * L * C * C * tokens : 0));
    assert_true(tr.flops.gemm == c.steps * ft.gemm);
    assert_true(tr.flops.attention == c.steps * ft.attention);
    trainer_close(&tr);
}

static void test_selective_recompute_flops(void **s) { (void)s; check_recompute_flops(RECOMPUTE_SELECTIVE); }
static void test_full_recompute_flops(void **s) { (void)s; check_recompute_flops(RECOMPUTE_FULL); }

/* The activation formula by hand for one shape: per layer
 * (16 C e + NH T e + 16) B T, head (2 C e + 8 + 4 Vp + 4 + 8) B T. */
static void test_activation_formula_by_hand(void **s) {
    (void)s;
    struct config c;
    small_config(&c, DTYPE_BF16, DTYPE_BF16, DTYPE_BF16);
    struct activation_theory a = theory_trainer_activations(&c, rank_place_dp(1, 0));
    double BT = 2 * 16, per_layer = (16 * 32 * 2 + 4 * 16 * 2 + 16) * BT;
    assert_true(a.per_layer == per_layer);
    assert_true(a.total == 2 * per_layer + (2 * 32 * 2 + 8 + 4 * 256 + 4 + 8) * BT);
    /* Korthikanti eq. (1): s b h (34 + 5 a s / h) per layer */
    assert_true(a.korthikanti_layer == 16.0 * 2 * 32 * (34 + 5.0 * 4 * 16 / 32));
}

/* The attention backward keeps one T x T score gradient per thread that
 * shares the heads, and no more threads share them than there are heads
 * (B NH = 8 here): 16 threads hold 8 T^2 fp32, 3 threads 3 T^2. */
static void test_scratch_attention_threads(void **s) {
    (void)s;
    const int threads[] = {3, 16};
    const double T = 16, used[] = {3, 8};
    struct config one;
    small_config(&one, DTYPE_FP32, DTYPE_FP32, DTYPE_FP32);
    double base = theory_trainer_scratch(&one, rank_place_dp(1, 0)).persistent; /* 1 thread: T^2 */
    for (int i = 0; i < 2; i++) {
        struct config c;
        small_config(&c, DTYPE_FP32, DTYPE_FP32, DTYPE_FP32);
        c.threads = threads[i];
        omp_set_num_threads(c.threads); /* as train_main does before trainer_open */
        struct trainer tr;
        char err[TRAINER_ERR_LEN];
        int rc = trainer_open(&tr, &c, &GRID, NULL, err);
        omp_set_num_threads(1);
        assert_int_equal(rc, 0);
        struct scratch_theory sc = theory_trainer_scratch(&c, rank_place_dp(1, 0));
        assert_true(sc.persistent == base + (used[i] - 1) * T * T * 4);
        assert_true((double)tr.mem.live[MEM_SCRATCH] == sc.persistent);
        trainer_close(&tr);
    }
}

/* Scratch theory and the start-up peak: for every recompute mode,
 * optimizer, activation dtype and ZeRO stage, the fp32 working buffers live
 * after start-up equal theory_trainer_scratch to the byte, the scratch peak
 * adds exactly the one-unit init staging, and the tracked start-up peak is
 * theory_trainer_memory's total (what the memory check compares). */
static void test_scratch_and_startup_peak(void **s) {
    (void)s;
    const enum recompute_mode modes[] = {RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL};
    const enum optimizer_kind opts[] = {OPTIM_ADAMW, OPTIM_ADAMW8BIT, OPTIM_SGD};
    const enum dtype acts[] = {DTYPE_BF16, DTYPE_FP32};
    const int zeros[] = {0, 2, 3};
    int checked = 0;
    for (int m = 0; m < 3; m++)
        for (int o = 0; o < 3; o++)
            for (int a = 0; a < 2; a++)
                for (int z = 0; z < 3; z++) {
                    struct config c;
                    small_config(&c, a ? DTYPE_FP32 : DTYPE_BF16, a ? DTYPE_FP32 : DTYPE_BF16, acts[a]);
                    c.recompute = modes[m];
                    c.optimizer = opts[o];
                    c.min_8bit_size = 1024; /* some tensors quantized, some not */
                    c.zero = zeros[z];
                    struct trainer tr;
                    char err[TRAINER_ERR_LEN];
                    assert_int_equal(trainer_open(&tr, &c, &GRID, NULL, err), 0);
                    struct scratch_theory sc = theory_trainer_scratch(&c, rank_place_dp(1, 0));
                    struct memory_need need = theory_trainer_memory(&c, rank_place_dp(1, 0));
                    assert_true((double)tr.mem.live[MEM_SCRATCH] == sc.persistent);
                    assert_true((double)tr.mem.peak[MEM_SCRATCH] == sc.persistent + sc.staging);
                    assert_true(sc.staging == (double)engine_unit_staging_bytes(&tr.engine));
                    assert_true(tr.startup_tracked_peak == need.total);
                    for (int k = 0; k < MEM_NUM_CATEGORIES; k++)
                        if (k != MEM_SCRATCH && k != MEM_ACTIVATIONS) assert_true((double)tr.mem.live[k] == need.bytes[k]);
                    assert_true((double)tr.mem.peak[MEM_ACTIVATIONS] == need.bytes[MEM_ACTIVATIONS]);
                    trainer_close(&tr);
                    checked++;
                }
    assert_int_equal(checked, 54);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_bf16),
        cmocka_unit_test(test_bf16_fp32_grads),
        cmocka_unit_test(test_all_fp32),
        cmocka_unit_test(test_fp32_params_bf16_grads),
        cmocka_unit_test(test_selective_recompute_flops),
        cmocka_unit_test(test_full_recompute_flops),
        cmocka_unit_test(test_activation_formula_by_hand),
        cmocka_unit_test(test_scratch_attention_threads),
        cmocka_unit_test(test_scratch_and_startup_peak),
        cmocka_unit_test(test_adafactor_five_state_lines),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
