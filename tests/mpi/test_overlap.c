/* Communication behind compute changes when the step waits, never what it
 * computes (include/zero.h): under mpirun -np N, for ZeRO stages 0-3 in
 * fp32 and bf16, 10 steps with --overlap 1 give bitwise the same loss and
 * gradient norm at every step, the same validation loss, and bitwise the
 * same gathered params (and fp32 master) as the blocking path
 * (--overlap 0). Both send the same bytes per step, and the comm buffers
 * of each equal the theory to the byte (overlap adds ZeRO-3's second
 * gathered layer and ZeRO-2/3's second reduce-scatter bucket).
 *
 * Two micro-batches per step, so stage 0 accumulates before its last
 * backward all-reduces the buckets, and stages 2-3 reduce-scatter each
 * unit twice; a 0.5 MiB bucket cap groups layers into buckets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cblas.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../train/theory/accounting.h"
#include "../engine_fixture.h"
#include "mpi_fixture.h"
#include "schedule.h"
#include "../../train/run/run.h"

enum { STEPS = 10, ACCUM = 2 };

static struct grid WORLD;
static char DIR_[96], SHARD[160];

static void config_for(struct config *c, int stage, enum dtype dt, bool overlap) {
    config_defaults(c);
    c->n_layer = 3, c->d_model = 64, c->n_head = 4, c->seq_len = 16, c->vocab_size = 256;
    c->micro_batch = 2;
    c->grad_accum = ACCUM;
    c->steps = STEPS;
    c->lr = 3e-3f;
    c->warmup_steps = 2;
    c->val_every = 0;
    c->val_batches = 2;
    c->threads = 1;
    c->zero = stage;
    c->param_dtype = c->grad_dtype = c->act_dtype = dt;
    c->overlap = overlap;
    c->ddp_bucket_mb = 0.5; /* a layer is 50k params: fp32 buckets of two layers, bf16 of three */
    snprintf(c->train_data, sizeof c->train_data, "%s", SHARD);
    snprintf(c->val_data, sizeof c->val_data, "%s", SHARD);
}

struct run {
    double loss[STEPS], norm[STEPS];
    float val;
    void *params, *master; /* full, layout order; rank 0 */
    size_t params_bytes, master_bytes;
    struct comm_counters comm;
    double comm_buffers, comm_theory;
};


/* The trainer's step, driven here so that the loss comes back as the
 * double the schedule summed (the log prints 6 digits). */
static void train(struct config *c, struct run *out) {
    struct trainer tr;
    char err[TRAINER_ERR_LEN];
    if (trainer_open(&tr, c, &WORLD, NULL, err) != 0) fail_msg("trainer_open: %s", err);
    struct engine *e = &tr.engine;
    struct comm_counters before = e->dp->counters;
    struct batch_source src = {&tr.train, NULL};
    for (int s = 0; s < STEPS; s++) {
        engine_zero_grads(e);
        out->loss[s] = pipeline_step(&tr.pipe, 1.0f / (float)(ACCUM * WORLD.dp), &src, tr.inputs, tr.targets);
        out->norm[s] = fixture_optimizer_step(e, s, false).grad_norm;
    }
    out->comm = e->dp->counters;
    for (int k = 0; k < COLL_NUM_KINDS; k++) out->comm.bytes[k] -= before.bytes[k];
    out->val = trainer_validate(&tr); /* forward only: stage 3 prefetches there too */
    out->comm_buffers = (double)tr.mem.live[MEM_COMM];
    out->comm_theory = theory_trainer_comm_buffers(c, rank_place_dp(WORLD.dp, 0));
    size_t psi = e->lay.total;
    out->params_bytes = psi * dtype_size(c->param_dtype);
    out->params = calloc(1, out->params_bytes);
    fixture_gather_state(e, STATE_PARAMS, out->params);
    out->master_bytes = zero_has_state(&e->z, STATE_MASTER) ? psi * sizeof(float) : 0;
    out->master = calloc(1, out->master_bytes + 1);
    if (out->master_bytes) fixture_gather_state(e, STATE_MASTER, out->master);
    trainer_close(&tr);
}

static void check(int stage, enum dtype dt) {
    struct config c0, c1;
    config_for(&c0, stage, dt, false);
    config_for(&c1, stage, dt, true);
    struct run blocking, overlapped;
    train(&c0, &blocking);
    train(&c1, &overlapped);

    /* every rank: the same losses and norms (bitwise), bytes and buffers */
    bool ok = memcmp(blocking.loss, overlapped.loss, sizeof blocking.loss) == 0 &&
              memcmp(blocking.norm, overlapped.norm, sizeof blocking.norm) == 0 &&
              memcmp(&blocking.val, &overlapped.val, sizeof blocking.val) == 0;
    for (int k = 0; k < COLL_NUM_KINDS; k++) ok = ok && blocking.comm.bytes[k] == overlapped.comm.bytes[k];
    ok = ok && blocking.comm_buffers == blocking.comm_theory && overlapped.comm_buffers == overlapped.comm_theory;
    /* overlap's extra buffers exist exactly where the stage uses them */
    ok = ok && (stage >= 2 ? overlapped.comm_buffers > blocking.comm_buffers
                           : overlapped.comm_buffers == 0 && blocking.comm_buffers == 0);
    ok = ok && blocking.loss[STEPS - 1] < blocking.loss[0]; /* it trained */
    if (WORLD.world_rank == 0) {
        ok = ok && memcmp(blocking.params, overlapped.params, blocking.params_bytes) == 0 &&
             memcmp(blocking.master, overlapped.master, blocking.master_bytes) == 0;
        printf("  N=%d ZeRO-%d %s: loss %.6f -> %.6f, val %.6f; comm buffers %.0f -> %.0f bytes; %s\n", WORLD.dp,
               stage, dtype_name(dt), blocking.loss[0] / (ACCUM * WORLD.dp),
               blocking.loss[STEPS - 1] / (ACCUM * WORLD.dp), blocking.val, blocking.comm_buffers,
               overlapped.comm_buffers, ok ? "bitwise equal" : "DIFFERENT");
    }
    for (struct run *r = &blocking; r; r = r == &blocking ? &overlapped : NULL) {
        free(r->params);
        free(r->master);
    }
    assert_true(all_ok(ok));
}

static void test_stage0(void **s) { (void)s; check(0, DTYPE_FP32); check(0, DTYPE_BF16); }
static void test_stage1(void **s) { (void)s; check(1, DTYPE_FP32); check(1, DTYPE_BF16); }
static void test_stage2(void **s) { (void)s; check(2, DTYPE_FP32); check(2, DTYPE_BF16); }
static void test_stage3(void **s) { (void)s; check(3, DTYPE_FP32); check(3, DTYPE_BF16); }

static int setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    char err[GRID_ERR_LEN];
    if (grid_init(&WORLD, 1, 1, 1, err) != 0) return -1;
    return scratch_open(DIR_, sizeof DIR_, SHARD, sizeof SHARD, "overlap", WORLD.world_rank, 64 * 1024);
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
        cmocka_unit_test(test_stage0),
        cmocka_unit_test(test_stage1),
        cmocka_unit_test(test_stage2),
        cmocka_unit_test(test_stage3),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    MPI_Finalize();
    return failed;
}
