/* Checkpoints across layouts, under mpirun -np N: a resume state saved by
 * N ranks at one ZeRO stage loads into N ranks at another stage and into
 * one process, and training continues as if it had never stopped (equal up
 * to fp32 summation order, the tolerance of test_zero.c). adamw8bit resumed
 * in the same layout (ZeRO 0-3) is bit-identical to the straight run; in
 * another it requantizes and says so; sgd8bit and lion8bit the same;
 * adafactor resumed at the same tp is bit-identical (its statistics saved
 * as they are), at another tp re-derived from V and says so. Also: when one
 * rank cannot open its data, every rank fails, none hangs, and the others
 * say another rank failed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cblas.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine_fixture.h"
#include "../json_log.h"
#include "../grid_single.h"
#include "mpi_fixture.h"
#include "../../train/run/run.h"

enum { STEPS = 10, HALF = 5, MICRO_BATCH = 2, ACCUM = 1 };

static struct grid WORLD, SINGLE;
static char DIR_[96], SHARD[160], STATE[160];

static void config_for(struct config *c, int stage, int accum) {
    config_defaults(c);
    c->n_layer = 2, c->d_model = 32, c->n_head = 4, c->seq_len = 16, c->vocab_size = 256;
    c->micro_batch = MICRO_BATCH;
    c->grad_accum = accum;
    c->steps = STEPS;
    c->lr = 3e-3f;
    c->val_every = 0;
    c->threads = 1;
    c->zero = stage;
    c->param_dtype = c->grad_dtype = c->act_dtype = DTYPE_FP32;
    snprintf(c->train_data, sizeof c->train_data, "%s", SHARD);
    c->val_data[0] = '\0';
}

/* Runs to the end (or to stop_after) and returns the full params (rank 0). */
static float *run(struct config *c, struct grid *g, int stop_after) {
    struct trainer tr;
    char err[TRAINER_ERR_LEN];
    if (trainer_open(&tr, c, g, NULL, err) != 0) fail_msg("trainer_open: %s", err);
    tr.stop_after = stop_after;
    if (trainer_run(&tr, err) != 0) fail_msg("trainer_run: %s", err);
    float *w = malloc(tr.engine.lay.total * sizeof *w);
    fixture_gather_state(&tr.engine, STATE_PARAMS, w);
    trainer_close(&tr);
    return w;
}

static bool close_enough(const float *a, const float *b, size_t n, double *worst) {
    *worst = 0;
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > 2e-4 + 2e-3 * fabs(a[i])) ok = false;
        if (d > *worst) *worst = d;
    }
    return ok;
}

/* N ranks at stage `from` for HALF steps, save; then `to_ranks` continue at
 * stage `to`; compare with N ranks straight at stage `from`. */
static void check(int from, int to, bool to_single) {
    int N = WORLD.dp;
    struct config c;
    config_for(&c, from, ACCUM);
    float *straight = run(&c, &WORLD, 0);
    snprintf(c.save_state, sizeof c.save_state, "%s", STATE);
    free(run(&c, &WORLD, HALF));

    struct config r;
    config_for(&r, to, to_single ? ACCUM * N : ACCUM); /* one process: the same global batch */
    snprintf(r.resume, sizeof r.resume, "%s", STATE);
    float *resumed = run(&r, to_single ? &SINGLE : &WORLD, 0);
    double worst = 0;
    bool ok = WORLD.world_rank != 0 || close_enough(straight, resumed, 0, &worst);
    if (WORLD.world_rank == 0) {
        struct model_layout lay;
        layout_init_whole(&lay, trainer_model_shape(&c)); /* the run's own shape: every param compared */
        ok = close_enough(straight, resumed, lay.total, &worst);
        printf("  N=%d: ZeRO-%d save, resume as %s at ZeRO-%d: max |param diff| %.2e\n", N, from,
               to_single ? "1 process" : "N ranks", to, worst);
    }
    free(straight);
    free(resumed);
    assert_true(all_ok(ok));
}

static void test_3_to_1(void **s) { (void)s; check(3, 1, false); }
static void test_1_to_3(void **s) { (void)s; check(1, 3, false); }
static void test_2_to_single(void **s) { (void)s; check(2, 0, true); }

/* ---- adamw8bit: bit-exact in the same layout, requantized in another */

/* Params and both (dequantized) optimizer states at the end, on rank 0;
 * note gets how the resume loaded the 8-bit states. */
static float *run8n(struct config *c, struct grid *g, int stop_after, char note[160], size_t *total) {
    struct trainer tr;
    char err[TRAINER_ERR_LEN];
    if (trainer_open(&tr, c, g, NULL, err) != 0) fail_msg("trainer_open: %s", err);
    if (note) snprintf(note, 160, "%s", tr.opt8_resume);
    tr.stop_after = stop_after;
    if (trainer_run(&tr, err) != 0) fail_msg("trainer_run: %s", err);
    size_t n = tr.engine.lay.total;
    if (total) *total = n; /* this rank's part of the model (tp: its slice) */
    float *w = calloc(3 * n, sizeof *w);
    fixture_gather_state(&tr.engine, STATE_PARAMS, w);
    fixture_gather_state(&tr.engine, STATE_OPT1, w + n);
    if (zero_has_state(&tr.engine.z, STATE_OPT2)) fixture_gather_state(&tr.engine, STATE_OPT2, w + 2 * n);
    trainer_close(&tr);
    return w;
}

static float *run8(struct config *c, struct grid *g, int stop_after, char note[160]) {
    return run8n(c, g, stop_after, note, NULL);
}

static void config8(struct config *c, int stage, int accum, enum optimizer_kind k) {
    config_for(c, stage, accum);
    c->optimizer = k;
    if (k == OPTIM_SGD8BIT) c->lr = 0.1f;
    c->min_8bit_size = 1024; /* matrices 8-bit, biases and norms fp32 */
    c->weight_decay = 0.1f;
}

/* N ranks at `stage`: 10 steps straight == 5, save, resume, 5 more, bit
 * for bit (params and states); then the state resumed by one process
 * requantizes and says so. `near`: how far the params may then be from the
 * straight run's (requantizing moves a state by up to half a code). */
static void check8(int stage, enum optimizer_kind k, double near_bound) {
    int N = WORLD.dp;
    const char *name = optim_rule(k)->name;
    struct config c;
    config8(&c, stage, ACCUM, k);
    float *straight = run8(&c, &WORLD, 0, NULL);
    snprintf(c.save_state, sizeof c.save_state, "%s", STATE);
    free(run8(&c, &WORLD, HALF, NULL));
    struct config r;
    config8(&r, stage, ACCUM, k);
    snprintf(r.resume, sizeof r.resume, "%s", STATE);
    char note[160];
    float *resumed = run8(&r, &WORLD, 0, note);
    bool ok = strcmp(note, "8-bit states: loaded as saved (bit-exact)") == 0;
    if (!ok) fprintf(stderr, "rank %d: note '%s'\n", WORLD.world_rank, note);
    struct model_layout lay; /* the run's own shape: every param and state compared */
    layout_init_whole(&lay, trainer_model_shape(&c));
    if (WORLD.world_rank == 0) {
        bool same = memcmp(straight, resumed, 3 * lay.total * sizeof *straight) == 0;
        printf("  N=%d: %s ZeRO-%d, save at %d and resume: %s\n", N, name, stage, HALF,
               same ? "bit-identical" : "DIFFERENT");
        ok = ok && same;
    }
    free(resumed);

    /* one process, same global batch: requantized from the fp32 states */
    struct config one;
    config8(&one, 0, ACCUM * N, k);
    snprintf(one.resume, sizeof one.resume, "%s", STATE);
    char want[160];
    snprintf(want, sizeof want, "8-bit states: requantized from fp32 for a new layout (dp %d -> 1, ZeRO %d -> 0)", N,
             stage);
    if (WORLD.world_rank == 0) {
        float *single = run8(&one, &SINGLE, 0, note);
        double worst = 0;
        for (size_t i = 0; i < lay.total; i++) worst = fmax(worst, fabs((double)straight[i] - single[i]));
        bool near = worst < near_bound;
        printf("  N=%d: %s ZeRO-%d state resumed by 1 process: '%s', max |param diff| %.2e\n", N, name, stage,
               note, worst);
        ok = ok && strcmp(note, want) == 0 && near;
        free(single);
    }
    free(straight);
    assert_true(all_ok(ok));
}

/* adamw8bit: the params stay within half an lr (3e-3) of the straight
 * run's after 5 steps */
static void test_8bit_zero0(void **s) { (void)s; check8(0, OPTIM_ADAMW8BIT, 1.5e-3); }
static void test_8bit_zero1(void **s) { (void)s; check8(1, OPTIM_ADAMW8BIT, 1.5e-3); }
static void test_8bit_zero2(void **s) { (void)s; check8(2, OPTIM_ADAMW8BIT, 1.5e-3); }
static void test_8bit_zero3(void **s) { (void)s; check8(3, OPTIM_ADAMW8BIT, 1.5e-3); }
/* sgd8bit (lr 0.1): a momentum off by half a code of its block's maximum
 * moves a weight by up to about 1e-3 over 5 steps (measured 1.0e-4, 7.6e-4
 * and 8.4e-4 on 2, 3 and 4 ranks);
 * lion8bit: a sign that flips where the requantized m changes it moves a
 * weight by 2 lr (6e-3) in a step, and only where m is near 0 (measured
 * 3.9e-3 to 4.1e-3); a garbled m would flip signs for all 5 steps (3e-2) */
static void test_sgd8bit_zero2(void **s) { (void)s; check8(2, OPTIM_SGD8BIT, 2e-3); }
static void test_lion8bit_zero3(void **s) { (void)s; check8(3, OPTIM_LION8BIT, 1e-2); }

/* ---- adafactor: its statistics as they are at the same tp (bit for bit),
 * re-derived from the saved V at another tp (within the fp32 tolerance) */

static void config_ada(struct config *c, int stage, int accum, const char *log) {
    config_for(c, stage, accum);
    c->optimizer = OPTIM_ADAFACTOR;
    c->adafactor_beta1 = 0.9f; /* the first moment, saved as it is, too */
    c->adafactor_eps = 1e-12f; /* (tests/mpi/test_zero.c's check_adafactor) */
    c->weight_decay = 0.1f;
    if (log) snprintf(c->log_json, sizeof c->log_json, "%s/%s", DIR_, log);
}

/* The step losses of a run's log, on every rank (the file is shared). */
static int losses_of(const struct config *c, double *loss) {
    MPI_Barrier(MPI_COMM_WORLD);
    return json_log_losses(c->log_json, loss, STEPS);
}

/* N ranks as dp N/tp x tp at `stage`: 10 steps straight == 5, save,
 * resume, 5 more, bit for bit (rank 0's params, statistics' V and first
 * moment; every step's loss); then the state resumed at another tp (tp 2
 * from tp 1 where N is even, else one process) re-derives R and C, says
 * so, and logs the straight run's losses within 1e-5 (the log's 6 digits:
 * a garbled statistic moves them by 1e-3 and more). */
static void check_adafactor(int stage, int tp) {
    const int N = WORLD.world_size;
    if (N % tp != 0) skip();
    struct grid g;
    char err[GRID_ERR_LEN];
    assert_int_equal(grid_init(&g, tp, 1, 1, err), 0);
    const int dp = N / tp;
    char log[3][64];
    for (int i = 0; i < 3; i++) snprintf(log[i], sizeof log[i], "ada_%d_%d_%d_%d.jsonl", N, stage, tp, i);
    struct config c;
    config_ada(&c, stage, ACCUM, log[0]);
    float *straight = run8(&c, &g, 0, NULL);
    double a[STEPS], b[STEPS];
    assert_int_equal(losses_of(&c, a), STEPS);
    config_ada(&c, stage, ACCUM, NULL);
    snprintf(c.save_state, sizeof c.save_state, "%s", STATE);
    free(run8(&c, &g, HALF, NULL));

    struct config r;
    config_ada(&r, stage, ACCUM, log[1]);
    snprintf(r.resume, sizeof r.resume, "%s", STATE);
    char note[160], want[160];
    size_t n;
    float *resumed = run8n(&r, &g, 0, note, &n);
    snprintf(want, sizeof want, "adafactor: R, C and v loaded as saved at tp = %d (bit-exact)", tp);
    bool ok = strcmp(note, want) == 0;
    if (!ok) fprintf(stderr, "rank %d: note '%s'\n", WORLD.world_rank, note);
    bool same = losses_of(&r, b) == STEPS - HALF;
    for (int i = 0; same && i < STEPS - HALF; i++) same = a[HALF + i] == b[i];
    if (WORLD.world_rank == 0) same = same && memcmp(straight, resumed, 3 * n * sizeof *straight) == 0;
    if (WORLD.world_rank == 0)
        printf("  N=%d: adafactor dp %d x tp %d ZeRO-%d, save at %d and resume: %s ('%s')\n", N, dp, tp, stage, HALF,
               same ? "bit-identical" : "DIFFERENT", note);
    ok = ok && same;
    free(resumed);

    /* another tp: re-derived from V, and it says so */
    const int other = tp == 1 && N % 2 == 0 ? 2 : 1;
    struct grid g2;
    if (other == 2) assert_int_equal(grid_init(&g2, 2, 1, 1, err), 0);
    const int dp2 = other == 2 ? N / 2 : 1;
    struct config o;
    config_ada(&o, other == 2 ? stage : 0, ACCUM * dp / dp2, log[2]); /* the same global batch */
    snprintf(o.resume, sizeof o.resume, "%s", STATE);
    if (other != tp)
        snprintf(want, sizeof want, "adafactor: R and C re-derived from the saved second moment (row and column sums, "
                 "equal up to rounding): the state has none saved at tp = %d", other);
    /* (N odd: one process at the same tp 1 takes them as saved; its dp
     * sums round otherwise, so it is near, not equal) */
    if (other == 2 || WORLD.world_rank == 0) {
        free(run8(&o, other == 2 ? &g2 : &SINGLE, 0, note));
        ok = ok && strcmp(note, want) == 0;
        if (strcmp(note, want) != 0) fprintf(stderr, "rank %d: note '%s'\n", WORLD.world_rank, note);
    }
    double worst = 0;
    bool near = losses_of(&o, b) == STEPS - HALF;
    for (int i = 0; near && i < STEPS - HALF; i++) worst = fmax(worst, fabs(a[HALF + i] - b[i]));
    near = near && worst <= 1e-5;
    if (WORLD.world_rank == 0)
        printf("  N=%d: adafactor state of tp %d resumed at tp %d (dp %d): max |loss diff| %.2e\n", N, tp, other, dp2,
               worst);
    ok = ok && near;
    if (other == 2) grid_free(&g2);
    grid_free(&g);
    free(straight);
    assert_true(all_ok(ok));
}

static void test_adafactor_zero1(void **s) { (void)s; check_adafactor(1, 1); }
static void test_adafactor_zero3(void **s) { (void)s; check_adafactor(3, 1); }
static void test_adafactor_tp2_zero2(void **s) { (void)s; check_adafactor(2, 2); }

/* Rank 1 (only) points at a missing file: every rank must return -1. */
static void test_one_rank_without_data(void **s) {
    (void)s;
    struct config c;
    config_for(&c, 1, ACCUM);
    if (WORLD.world_rank == 1) snprintf(c.train_data, sizeof c.train_data, "%s/missing.bin", DIR_);
    struct trainer tr;
    char err[TRAINER_ERR_LEN] = "";
    int rc = trainer_open(&tr, &c, &WORLD, NULL, err);
    bool ok = rc == -1 && (WORLD.world_rank == 1 ? strstr(err, "missing.bin") != NULL
                                                   : strstr(err, "another rank failed") != NULL);
    if (!ok) fprintf(stderr, "rank %d: rc %d, err '%s'\n", WORLD.world_rank, rc, err);
    assert_true(all_ok(ok));
}

static int setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    grid_init_single(&SINGLE);
    char err[GRID_ERR_LEN];
    if (grid_init(&WORLD, 1, 1, 1, err) != 0) return -1;
    /* one directory, made by rank 0: the state file is shared */
    if (WORLD.world_rank == 0) {
        snprintf(DIR_, sizeof DIR_, "/tmp/shardlab_reshard_XXXXXX");
        if (!mkdtemp(DIR_)) return -1;
    }
    MPI_Bcast(DIR_, sizeof DIR_, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(SHARD, sizeof SHARD, "%s/train.bin", DIR_);
    snprintf(STATE, sizeof STATE, "%s/state.bin", DIR_);
    int rc = 0;
    if (WORLD.world_rank == 0) rc = write_corpus_shard(SHARD, 64 * 1024); /* one shared file */
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return rc;
}

static int teardown(void **state) {
    (void)state;
    MPI_Barrier(MPI_COMM_WORLD);
    int rc = 0;
    if (WORLD.world_rank == 0) {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf %s", DIR_);
        rc = system(cmd);
    }
    grid_free(&WORLD);
    return rc;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_3_to_1),
        cmocka_unit_test(test_1_to_3),
        cmocka_unit_test(test_2_to_single),
        cmocka_unit_test(test_8bit_zero0),
        cmocka_unit_test(test_8bit_zero1),
        cmocka_unit_test(test_8bit_zero2),
        cmocka_unit_test(test_8bit_zero3),
        cmocka_unit_test(test_sgd8bit_zero2),
        cmocka_unit_test(test_lion8bit_zero3),
        cmocka_unit_test(test_adafactor_zero1),
        cmocka_unit_test(test_adafactor_zero3),
        cmocka_unit_test(test_adafactor_tp2_zero2),
        cmocka_unit_test(test_one_rank_without_data),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    MPI_Finalize();
    return failed;
}
