/* --attention flash through the trainer, on configs/tiny.conf (fp32
 * everywhere, one thread, a shard of a 17-token period with noise):
 *   - 20 steps log the loss of the plain attention within 1e-5 at every
 *     step, under recompute none, selective and full (the log has 6
 *     decimals); with flash the three modes log the same losses (full
 *     recomputes with the same deterministic kernels; selective is none);
 *   - measured memory equals theory to the byte: activations (peak), the
 *     scratch, the start-up peak and every other category, in each
 *     recompute mode and activation dtype; the activation formula by hand,
 *     (16 C e + 4 NH + 16) B T per layer: the lse replaces the NH T e
 *     probabilities;
 *   - the FLOP counters equal theory_trainer_flops exactly: the causal
 *     products 7 L B C T (T+1) per micro-batch (9 with full recompute),
 *     and the model FLOPs (MFU's) are the plain attention's. */
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
#include <unistd.h>

#include "../train/theory/accounting.h"
#include "grid_single.h"
#include "json_log.h"
#include "rng.h"
#include "../train/run/run.h"
#include "shard_write.h"

enum { STEPS = 20 };

static char DIR_[64], SHARD[128];
static struct grid GRID; /* one process */

static int setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    grid_init_single(&GRID);
    snprintf(DIR_, sizeof DIR_, "/tmp/shardlab_test_flash_XXXXXX");
    if (!mkdtemp(DIR_)) return -1;
    snprintf(SHARD, sizeof SHARD, "%s/tokens.bin", DIR_);
    enum { N = 20000 };
    static uint16_t tok[N];
    /* a period of 17 tokens with one in four drawn at random: learnable
     * from the context, so 20 steps lower the loss */
    for (int i = 0; i < N; i++)
        tok[i] = (uint16_t)(i % 4 ? (uint32_t)(i % 17 * 13) : rng_u32(11, 0, (uint64_t)i) % 256);
    char err[DATA_ERR_LEN];
    return shard_write(SHARD, tok, N, err);
}

static int teardown(void **state) {
    (void)state;
    char log[160];
    for (int i = 0; i < 6; i++) {
        snprintf(log, sizeof log, "%s/log%d.json", DIR_, i);
        unlink(log);
    }
    unlink(SHARD);
    return rmdir(DIR_);
}

static void tiny(struct config *c, enum attention_kind a, enum recompute_mode r, enum dtype act) {
    config_defaults(c);
    char err[CONFIG_ERR_LEN];
    if (config_load_file(c, "configs/tiny.conf", err) != 0) fail_msg("%s", err);
    c->steps = STEPS;
    c->val_every = 0;
    c->threads = 1;
    c->sample_tokens = 0;
    c->param_dtype = c->grad_dtype = DTYPE_FP32;
    c->act_dtype = act;
    c->attention = a;
    c->recompute = r;
    snprintf(c->train_data, sizeof c->train_data, "%s", SHARD);
    c->val_data[0] = '\0';
}

/* Runs c with its JSON log in log<k>.json; the logged losses. */
static void run_logged(struct config *c, int k, double *loss) {
    snprintf(c->log_json, sizeof c->log_json, "%s/log%d.json", DIR_, k);
    struct trainer tr;
    char err[TRAINER_ERR_LEN];
    if (trainer_open(&tr, c, &GRID, NULL, err) != 0) fail_msg("%s", err);
    if (trainer_run(&tr, err) != 0) fail_msg("%s", err);
    trainer_close(&tr);
    assert_int_equal(json_log_losses(c->log_json, loss, STEPS + 1), STEPS);
}

static void test_loss_equals_plain(void **state) {
    (void)state;
    const enum recompute_mode modes[] = {RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL};
    double flash0[STEPS];
    for (int m = 0; m < 3; m++) {
        double plain[STEPS], flash[STEPS], worst = 0.0;
        struct config c;
        tiny(&c, ATTENTION_PLAIN, modes[m], DTYPE_FP32);
        run_logged(&c, 2 * m, plain);
        tiny(&c, ATTENTION_FLASH, modes[m], DTYPE_FP32);
        run_logged(&c, 2 * m + 1, flash);
        for (int s = 0; s < STEPS; s++) {
            double d = fabs(flash[s] - plain[s]);
            worst = d > worst ? d : worst;
            if (!(d <= 1e-5)) fail_msg("recompute %d, step %d: flash %.6f, plain %.6f", m, s + 1, flash[s], plain[s]);
        }
        printf("  recompute %d: %d steps, loss %.6f -> %.6f, max |flash - plain| %.1e\n", m, STEPS, flash[0],
               flash[STEPS - 1], worst);
        assert_true(flash[STEPS - 1] < flash[0] - 0.5); /* it trains */
        if (m == 0) memcpy(flash0, flash, sizeof flash0);
        else assert_memory_equal(flash, flash0, sizeof flash0);
    }
}

/* Every category equal to its theory, for each recompute mode and
 * activation dtype; FLOPs equal to theory after the steps. */
static void test_memory_and_flops_theory(void **state) {
    (void)state;
    const enum recompute_mode modes[] = {RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL};
    const enum dtype acts[] = {DTYPE_FP32, DTYPE_BF16};
    for (int m = 0; m < 3; m++)
        for (int a = 0; a < 2; a++) {
            struct config c;
            tiny(&c, ATTENTION_FLASH, modes[m], acts[a]);
            c.steps = 2;
            struct trainer tr;
            char err[TRAINER_ERR_LEN];
            if (trainer_open(&tr, &c, &GRID, NULL, err) != 0) fail_msg("%s", err);
            struct rank_place p = rank_place_dp(1, 0);
            struct activation_theory at = theory_trainer_activations(&c, p);
            struct scratch_theory sc = theory_trainer_scratch(&c, p);
            struct memory_need need = theory_trainer_memory(&c, p);
            assert_true((double)tr.mem.peak[MEM_ACTIVATIONS] == at.total);
            assert_true((double)tr.mem.live[MEM_SCRATCH] == sc.persistent);
            assert_true(tr.startup_tracked_peak == need.total);
            for (int k = 0; k < MEM_NUM_CATEGORIES; k++)
                if (k != MEM_SCRATCH && k != MEM_ACTIVATIONS) assert_true((double)tr.mem.live[k] == need.bytes[k]);
            if (trainer_run(&tr, err) != 0) fail_msg("%s", err);
            struct flop_theory ft = theory_trainer_flops(&c, p);
            const double L = 2, B = 4, C = 32, T = 32;
            assert_true(ft.attention == (modes[m] == RECOMPUTE_FULL ? 9 : 7) * L * B * C * T * (T + 1));
            assert_true(tr.flops.attention == c.steps * ft.attention);
            assert_true(tr.flops.gemm == c.steps * ft.gemm);
            struct config plain = c;
            plain.attention = ATTENTION_PLAIN;
            assert_true(ft.model == theory_trainer_flops(&plain, p).model); /* MFU's numerator */
            assert_true(tr.model_flops_per_step == ft.model);
            trainer_close(&tr);
        }
}

/* tiny, bf16 activations: per layer (16 C e + 4 NH + 16) B T, against the
 * plain attention's (16 C e + NH T e + 16) B T. */
static void test_activation_formula_by_hand(void **state) {
    (void)state;
    struct config c, plain;
    tiny(&c, ATTENTION_FLASH, RECOMPUTE_NONE, DTYPE_BF16);
    tiny(&plain, ATTENTION_PLAIN, RECOMPUTE_NONE, DTYPE_BF16);
    struct rank_place p = rank_place_dp(1, 0);
    const double BT = 4 * 32, C = 32, NH = 4, T = 32, e = 2;
    struct activation_theory a = theory_trainer_activations(&c, p), b = theory_trainer_activations(&plain, p);
    assert_true(a.per_layer == (16 * C * e + 4 * NH + 16) * BT);
    assert_true(b.per_layer - a.per_layer == (NH * T * e - 4 * NH) * BT);
    assert_true(a.korthikanti_layer == b.korthikanti_layer); /* the paper's row as it is */
    /* selective is none with flash; full keeps one fp32 layer with the lse in it */
    c.recompute = RECOMPUTE_SELECTIVE;
    assert_true(theory_trainer_activations(&c, p).total == a.total);
    c.recompute = RECOMPUTE_FULL;
    struct activation_theory f = theory_trainer_activations(&c, p);
    assert_true(f.recompute_buffers == (15 * C + NH) * 4 * BT + 16 * BT);
    /* the backward's scratch: D (B NH T fp32) instead of a T x T square per thread */
    c.recompute = RECOMPUTE_NONE;
    c.act_dtype = plain.act_dtype = DTYPE_FP32;
    assert_true(theory_trainer_scratch(&plain, p).persistent - theory_trainer_scratch(&c, p).persistent ==
                (T * T - 4 * NH * T) * 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loss_equals_plain),
        cmocka_unit_test(test_memory_and_flops_theory),
        cmocka_unit_test(test_activation_formula_by_hand),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
