/* Pipeline parallelism equals one process (include/schedule.h): under
 * mpirun -np N, the layers split over pp = N stages (and, on 4 ranks, dp 2
 * x pp 2 with ZeRO 0-3), GPipe and 1F1B, with m below, equal to and not a
 * multiple of p, and interleaved 1F1B with two chunks a stage (pp 2, and
 * dp 2 x pp 2 at ZeRO-0 and ZeRO-3), train 20 steps in fp32 and give the one-process run's loss
 * at every step within 1e-5 and its parameters within 1e-5 on every unit
 * each rank holds; and Adafactor on dp 2 x pp 2 at ZeRO-1 and 2. Also: the
 * two copies of the tied wte (first and last stage) stay bitwise equal; each stage's activation bytes equal the
 * schedule's formula (slots x per-slot bytes) and its send/recv bytes per
 * step equal m x B T C x 4 per boundary, exactly.
 *
 * The reference runs on every rank alone (a grid of one), with grad_accum
 * m x dp: the data-parallel ranks of the pipelined run read the same
 * micro-batches between them. */
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

#include "../../train/theory/accounting.h"
#include "../engine_fixture.h"
#include "../grid_single.h"
#include "mpi_fixture.h"
#include "schedule.h"
#include "step.h"
#include "../../train/run/run.h"

enum { STEPS = 20, LAYERS = 4 };
static const double TOL = 1e-5;

static struct grid WORLD;
static char DIR_[96], SHARD[160];

static void config_for(struct config *c, int pp, int dp, int m, enum schedule_kind kind, int zero, int v,
                       enum optimizer_kind opt) {
    config_defaults(c);
    c->optimizer = opt;
    c->adafactor_eps = 1e-12f; /* (tests/mpi/test_zero.c's check_adafactor) */
    c->n_layer = LAYERS, c->d_model = 32, c->n_head = 4, c->seq_len = 16, c->vocab_size = 256;
    c->micro_batch = 2;
    c->grad_accum = m;
    c->steps = STEPS;
    c->lr = 3e-3f;
    c->warmup_steps = 2;
    c->val_every = 0;
    c->threads = 1;
    c->zero = zero;
    c->pp = pp;
    c->schedule = kind;
    c->virtual_stages = v;
    c->param_dtype = c->grad_dtype = c->act_dtype = DTYPE_FP32;
    (void)dp;
    snprintf(c->train_data, sizeof c->train_data, "%s", SHARD);
    snprintf(c->val_data, sizeof c->val_data, "%s", SHARD);
}


/* `steps` steps as the trainer takes them (parallel/step.c: the one-stage
 * reference accumulates its micro-batches, the stages run the schedule);
 * loss[s] is the step's mean loss (agreed over dp and the stages). */
static void train(struct trainer *tr, double *loss) {
    struct batch_source src = {&tr->train, NULL};
    for (int s = 0; s < STEPS; s++) loss[s] = step_run(&tr->pipe, &src, s, tr->inputs, tr->targets).loss;
}

/* Unit u's params of a trainer whose states are not sharded (fp32). */
static const float *unit_params(struct trainer *tr, int u) { return zero_all_gather(&tr->engine.z, u); }

/* Max |difference| between this rank's units and the whole model's. */
static double params_diff(struct trainer *pipe, struct trainer *whole) {
    const struct model_layout *a = &pipe->engine.lay, *b = &whole->engine.lay;
    double worst = 0;
    for (int t = 0; t < layout_num_tensors(a); t++) {
        struct tensor_info ta = layout_tensor(a, t), tb;
        if (ta.kind == UNIT_LAYER) tb = layout_layer_tensor(b, ta.layer, (enum layer_tensor)ta.id);
        else if (ta.kind == UNIT_EMBED) tb = layout_embed_tensor(b, (enum embed_tensor)ta.id);
        else if (ta.id == HEAD_WTE) tb = layout_embed_tensor(b, EMB_WTE); /* the copy of the tied wte */
        else tb = layout_head_tensor(b, (enum head_tensor)ta.id);
        const float *x = unit_params(pipe, ta.unit) + (ta.offset - layout_unit_offset(a, ta.unit));
        const float *y = unit_params(whole, tb.unit) + (tb.offset - layout_unit_offset(b, tb.unit));
        for (size_t i = 0; i < ta.numel; i++) worst = fmax(worst, fabs((double)x[i] - y[i]));
    }
    return worst;
}

/* The first and the last stage hold the same wte, bit for bit. */
static bool tied_copies_equal(struct trainer *tr) {
    struct collectives *tie = &tr->grid->tie_comm;
    if (tie->size < 2) return true;
    const struct model_layout *lay = &tr->engine.lay;
    struct tensor_info w = lay->rank.has_embed ? layout_embed_tensor(lay, EMB_WTE) : layout_head_tensor(lay, HEAD_WTE);
    const float *mine = unit_params(tr, w.unit) + (w.offset - layout_unit_offset(lay, w.unit));
    float *max = malloc(w.numel * sizeof *max);
    memcpy(max, mine, w.numel * sizeof *max);
    tie->all_reduce_max(tie, max, w.numel, DTYPE_FP32);
    bool same = memcmp(max, mine, w.numel * sizeof *max) == 0; /* equal to the max on both: equal */
    free(max);
    return same;
}

static void check_run(int pp, int m, enum schedule_kind kind, int zero, int v, enum optimizer_kind opt) {
    int dp = WORLD.world_size / pp;
    struct grid grid, single;
    char err[TRAINER_ERR_LEN];
    assert_int_equal(grid_init(&grid, 1, 1, pp, err), 0);
    grid_init_single(&single);
    struct config cp, cs;
    config_for(&cp, pp, dp, m, kind, zero, v, opt);
    config_for(&cs, 1, 1, m * dp, SCHEDULE_1F1B, 0, 1, opt);
    struct trainer tp, ts;
    assert_int_equal(trainer_open(&tp, &cp, &grid, NULL, err), 0);
    assert_int_equal(trainer_open(&ts, &cs, &single, NULL, err), 0);
    double lp[STEPS], ls[STEPS];
    struct comm_counters before = grid.pp_comm.counters;
    train(&tp, lp);
    train(&ts, ls);

    double worst_loss = 0;
    for (int s = 0; s < STEPS; s++) worst_loss = fmax(worst_loss, fabs(lp[s] - ls[s]));
    bool ok = worst_loss <= TOL && ls[STEPS - 1] < ls[0];
    /* stage 3 keeps a shard only: gather-free comparison at stages 0-2 */
    double worst_param = zero < 3 ? params_diff(&tp, &ts) : 0;
    ok = ok && worst_param <= TOL;
    bool tied = zero < 3 ? tied_copies_equal(&tp) : true;
    ok = ok && tied;
    struct rank_place place = rank_place_of(&cp, WORLD.world_size, WORLD.world_rank);
    double act = (double)tp.mem.peak[MEM_ACTIVATIONS], act_theory = theory_trainer_activations(&cp, place).total;
    double sent = (grid.pp_comm.counters.bytes[COLL_SEND] - before.bytes[COLL_SEND]) / STEPS;
    double recv = (grid.pp_comm.counters.bytes[COLL_RECV] - before.bytes[COLL_RECV]) / STEPS;
    struct pipe_comm_theory pt = theory_trainer_pp_comm(&cp, place);
    ok = ok && act == act_theory && sent == pt.send && recv == pt.recv;
    if (!ok || WORLD.world_rank == WORLD.world_size - 1)
        printf("  dp %d x pp %d, %s, v %d, m %d, ZeRO-%d, %s, rank %d: loss %.6f -> %.6f, max |dloss| %.2e, max |dparam| "
               "%.2e, tied copies %s, activations %.0f (theory %.0f), sent %.0f recv %.0f per step (theory %.0f): %s\n",
               dp, pp, schedule_name(kind), v, m, zero, optim_rule(opt)->name, WORLD.world_rank, ls[0], ls[STEPS - 1],
               worst_loss, worst_param,
               tied ? "equal" : "DIFFER", act, act_theory, sent, recv, pt.send, ok ? "ok" : "FAILED");
    trainer_close(&tp);
    trainer_close(&ts);
    grid_free(&grid);
    assert_true(all_ok(ok));
}

static void check_v(int pp, int m, enum schedule_kind kind, int zero, int v) {
    check_run(pp, m, kind, zero, v, OPTIM_ADAMW);
}

static void check(int pp, int m, enum schedule_kind kind, int zero) { check_v(pp, m, kind, zero, 1); }

/* Every rank a stage; m below p, equal to it, and not a multiple of it.
 * Interleaved (2 chunks a stage, one layer each: pp 2 only) with m = p and
 * 2p: the last rank's chunk 0 feeds rank 0's chunk 1. */
static void test_stages(void **s) {
    (void)s;
    int p = WORLD.world_size;
    for (int kind = SCHEDULE_GPIPE; kind <= SCHEDULE_1F1B; kind++) {
        if (p > LAYERS) break;
        check(p, 1, (enum schedule_kind)kind, 0);
        check(p, p, (enum schedule_kind)kind, 0);
        check(p, p + 1, (enum schedule_kind)kind, 0);
    }
    if (2 * p <= LAYERS) {
        check_v(p, p, SCHEDULE_INTERLEAVED, 0, 2);
        check_v(p, 2 * p, SCHEDULE_INTERLEAVED, 0, 2);
    }
}

/* dp 2 x pp 2 on four ranks, every ZeRO stage. */
static void test_grid(void **s) {
    (void)s;
    if (WORLD.world_size != 4) skip();
    for (int zero = 0; zero <= 3; zero++) check(2, 3, SCHEDULE_1F1B, zero);
    check(2, 2, SCHEDULE_GPIPE, 1);
    check_v(2, 4, SCHEDULE_INTERLEAVED, 0, 2);
    check_v(2, 2, SCHEDULE_INTERLEAVED, 3, 2);
}

/* Adafactor on dp 2 x pp 2 with its states sharded: the copies of the
 * tied wte are cut over dp at other boundaries on the two stages, and the
 * last stage's takes the first stage's statistics (include/factored.h),
 * so they stay bitwise equal (their own sums would round apart). */
static void test_grid_adafactor(void **s) {
    (void)s;
    if (WORLD.world_size != 4) skip();
    for (int zero = 1; zero <= 2; zero++) check_run(2, 3, SCHEDULE_1F1B, zero, 1, OPTIM_ADAFACTOR);
}

static int setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    char err[GRID_ERR_LEN];
    if (grid_init(&WORLD, 1, 1, 1, err) != 0) return -1;
    return scratch_open(DIR_, sizeof DIR_, SHARD, sizeof SHARD, "pipeline", WORLD.world_rank, 64 * 1024);
}

static int teardown(void **state) {
    (void)state;
    int rc = scratch_close(DIR_);
    grid_free(&WORLD);
    return rc;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stages),
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_grid_adafactor),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    MPI_Finalize();
    return failed;
}
