/* Data parallelism proven against one process, under mpirun -np N:
 * for ZeRO stages 0-3, 20 steps on N ranks give the same loss at every step
 * and the same final parameters as one process running the same global
 * batch through gradient accumulation (every rank runs that reference run
 * itself, in-process, on a 1-rank grid). Per-rank model-state bytes equal
 * the ZeRO formulas to the byte, and the bytes each rank sends per step
 * equal the ring volumes for the stage.
 *
 * Tolerance (fp32 mode): the distributed run sums the N ranks' gradients in
 * another order than the reference's accumulation, so results agree up to
 * fp32 summation order; after 20 AdamW steps that is ~1e-6 relative on the
 * loss. We allow 1e-4 on losses and 2e-4 + 2e-3 |w| on each parameter: a
 * wrong shard, a missing reduction or a doubled gradient moves them by
 * percent, not by these amounts. bf16 mode (one case) rounds gradients per
 * hop and per micro-batch, so it gets 1e-2 on losses. arch = llama runs
 * stages 0-3 with 1e-5 on the losses, and its bf16 data path at ZeRO-3
 * with GPT-2's bf16 tolerances. */
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

#include "../../train/theory/accounting.h"
#include "../engine_fixture.h"
#include "../json_log.h"
#include "../grid_single.h"
#include "mpi_fixture.h"
#include "../../train/run/run.h"

enum { STEPS = 20, MICRO_BATCH = 2, ACCUM = 2 };

static struct grid WORLD, SINGLE;
static char DIR_[96], SHARD[160];

/* What varies between cases besides the stage and dtype. */
struct variant {
    enum optimizer_kind optimizer;
    enum recompute_mode recompute;
    bool llama; /* arch = llama: GQA (2 KV heads of 4), SwiGLU at F = 64, RoPE, untied */
};

static const struct variant PLAIN = {OPTIM_ADAMW, RECOMPUTE_NONE, false};
static const struct variant LLAMA = {OPTIM_ADAMW, RECOMPUTE_NONE, true};

static void config_for(struct config *c, int stage, enum dtype dt, const char *log, struct variant v) {
    config_defaults(c);
    c->optimizer = v.optimizer;
    c->recompute = v.recompute;
    c->min_8bit_size = 1024; /* so the small test model's matrices quantize */
    c->adafactor_eps = 1e-12f; /* (check_adafactor) */
    c->n_layer = 2, c->d_model = 32, c->n_head = 4, c->seq_len = 16, c->vocab_size = 256;
    c->micro_batch = MICRO_BATCH;
    c->grad_accum = ACCUM;
    c->steps = STEPS;
    /* SGD needs a larger step to move in 20 steps; Lion's steps are lr
     * on every element (the sign), so a smaller one (Chen et al. 2023: 3-10x
     * below AdamW's) */
    const struct optim_rule *rule = optim_rule(v.optimizer);
    c->lr = rule->keys & (1u << OKEY_MOMENTUM) ? 0.3f : v.optimizer == OPTIM_LION || v.optimizer == OPTIM_LION8BIT ? 1e-3f : 3e-3f;
    c->warmup_steps = 2;
    c->weight_decay = 0.1f;
    c->val_every = 0;
    c->threads = 1;
    c->zero = stage;
    c->param_dtype = c->grad_dtype = c->act_dtype = dt;
    if (v.llama) c->arch = ARCH_LLAMA, c->n_kv_head = 2, c->ffn_dim = 64;
    /* llama in bf16: its data path, on the project's reference bf16 GEMM (any CPU) */
    if (v.llama && dt == DTYPE_BF16) c->gemm_dtype = GEMM_DTYPE_BF16, c->gemm_kernel = GEMM_KERNEL_REFERENCE;
    snprintf(c->train_data, sizeof c->train_data, "%s", SHARD);
    c->val_data[0] = '\0';
    snprintf(c->log_json, sizeof c->log_json, "%s", log);
}

struct run {
    double loss[STEPS];
    float *params; /* full, fp32 (widened), layout order */
    size_t psi;
};

/* Trains on `grid` with the caller's trainer (it points into itself, so it
 * is never copied) and fills run (params on rank 0 only when distributed).
 * The trainer stays open for the caller to inspect and close. */
static void train(struct trainer *tr, struct config *c, struct grid *grid, struct run *out) {
    char err[TRAINER_ERR_LEN];
    if (trainer_open(tr, c, grid, NULL, err) != 0) fail_msg("trainer_open: %s", err);
    if (trainer_run(tr, err) != 0) fail_msg("trainer_run: %s", err);
    size_t psi = tr->engine.lay.total;
    void *full = malloc(psi * dtype_size(c->param_dtype));
    fixture_gather_state(&tr->engine, STATE_PARAMS, full);
    out->psi = psi;
    out->params = malloc(psi * sizeof(float));
    for (size_t i = 0; i < psi; i++)
        out->params[i] = c->param_dtype == DTYPE_FP32 ? ((float *)full)[i] : bf16_to_f32(((bf16 *)full)[i]);
    free(full);
    if (tr->json) fflush(tr->json);
    if (grid == &SINGLE || grid->world_rank == 0) assert_int_equal(json_log_losses(c->log_json, out->loss, STEPS), STEPS);
}

static void check_case(int stage, enum dtype dt, struct variant v, double loss_tol, double abs_tol, double rel_tol) {
    int N = WORLD.dp;
    char ref_log[200], dist_log[200];
    snprintf(ref_log, sizeof ref_log, "%s/ref_%d.jsonl", DIR_, stage);
    snprintf(dist_log, sizeof dist_log, "%s/dist_%d.jsonl", DIR_, stage);

    /* reference: one process, the same global batch through accumulation */
    struct config rc;
    config_for(&rc, 0, dt, ref_log, v);
    rc.grad_accum = ACCUM * N;
    struct run ref;
    struct trainer tr;
    train(&tr, &rc, &SINGLE, &ref);
    trainer_close(&tr);

    struct config dc;
    config_for(&dc, stage, dt, dist_log, v);
    struct run dist;
    train(&tr, &dc, &WORLD, &dist);

    /* model states per rank: the ZeRO formula to the byte (padding named) */
    struct state_theory st = theory_trainer_states(&dc, rank_place_dp(N, WORLD.dp_rank));
    bool ok = true;
    for (int i = 0; i < st.n; i++)
        ok = ok && (double)tr.mem.live[st.lines[i].category] == st.lines[i].psi_bytes + st.lines[i].padding_bytes;
    ok = ok && (double)tr.mem.live[MEM_COMM] == theory_trainer_comm_buffers(&dc, rank_place_dp(N, 0));
    assert_true(all_ok(ok));

    /* bytes sent per step: the ring volume of the stage, exactly */
    struct comm_theory ct = theory_trainer_comm(&dc, rank_place_dp(N, 0));
    const struct comm_counters *cc = &WORLD.dp_comm.counters;
    ok = cc->bytes[COLL_ALL_REDUCE] == STEPS * ct.all_reduce && cc->bytes[COLL_REDUCE_SCATTER] == STEPS * ct.reduce_scatter &&
         cc->bytes[COLL_ALL_GATHER] == STEPS * ct.all_gather;
    if (!ok)
        fprintf(stderr, "rank %d stage %d: bytes ar %.0f rs %.0f ag %.0f, theory x %d: %.0f %.0f %.0f\n",
                WORLD.world_rank, stage, cc->bytes[COLL_ALL_REDUCE], cc->bytes[COLL_REDUCE_SCATTER],
                cc->bytes[COLL_ALL_GATHER], STEPS, STEPS * ct.all_reduce, STEPS * ct.reduce_scatter,
                STEPS * ct.all_gather);
    assert_true(all_ok(ok));
    trainer_close(&tr);

    /* the same losses and parameters as the one-process run */
    ok = true;
    if (WORLD.world_rank == 0) {
        double worst_loss = 0, worst_w = 0;
        for (int s = 0; s < STEPS; s++) {
            double d = fabs(ref.loss[s] - dist.loss[s]);
            worst_loss = d > worst_loss ? d : worst_loss;
        }
        for (size_t i = 0; i < ref.psi; i++) {
            double d = fabs((double)ref.params[i] - dist.params[i]);
            if (d > abs_tol + rel_tol * fabs(ref.params[i])) ok = false;
            worst_w = d > worst_w ? d : worst_w;
        }
        ok = ok && worst_loss <= loss_tol && ref.loss[STEPS - 1] < ref.loss[0] - 0.3;
        static const char *const rec[] = {"none", "selective", "full"};
        printf("  N=%d ZeRO-%d %s%s %s recompute %s: loss %.4f -> %.4f, max |loss diff| %.2e, max |param diff| %.2e\n",
               N, stage, v.llama ? "llama " : "", dtype_name(dt), optim_rule(v.optimizer)->name, rec[v.recompute], ref.loss[0], ref.loss[STEPS - 1],
               worst_loss, worst_w);
    }
    free(ref.params);
    free(dist.params);
    assert_true(all_ok(ok));
}

/* fp32: exact up to summation order (see the top of the file) */
static void check_stage(int stage) { check_case(stage, DTYPE_FP32, PLAIN, 1e-4, 2e-4, 2e-3); }
static void test_zero0(void **s) { (void)s; check_stage(0); }
/* LLaMA's blocks under each stage: the same tolerance on the losses as the
 * issue asks (1e-5 at every step); the parameters as GPT-2's */
static void check_llama(int stage) { check_case(stage, DTYPE_FP32, LLAMA, 1e-5, 2e-4, 2e-3); }
static void test_zero0_llama(void **s) { (void)s; check_llama(0); }
static void test_zero1_llama(void **s) { (void)s; check_llama(1); }
static void test_zero2_llama(void **s) { (void)s; check_llama(2); }
static void test_zero3_llama(void **s) { (void)s; check_llama(3); }
static void test_zero3_llama_bf16(void **s) { (void)s; check_case(3, DTYPE_BF16, LLAMA, 1e-2, 2e-2, 5e-2); }
static void test_zero1(void **s) { (void)s; check_stage(1); }
static void test_zero2(void **s) { (void)s; check_stage(2); }
static void test_zero3(void **s) { (void)s; check_stage(3); }
static void test_zero3_bf16(void **s) { (void)s; check_case(3, DTYPE_BF16, PLAIN, 1e-2, 2e-2, 5e-2); }
/* SGD and recomputation change nothing about the reduction: the same fp32
 * tolerance. */
static void test_zero3_sgd(void **s) {
    (void)s;
    check_case(3, DTYPE_FP32, (struct variant){OPTIM_SGD, RECOMPUTE_NONE}, 1e-4, 2e-4, 2e-3);
}
static void test_zero1_recompute_full(void **s) {
    (void)s;
    check_case(1, DTYPE_FP32, (struct variant){OPTIM_ADAMW, RECOMPUTE_FULL}, 1e-4, 2e-4, 2e-3);
}
static void test_zero3_recompute_selective(void **s) {
    (void)s;
    check_case(3, DTYPE_FP32, (struct variant){OPTIM_ADAMW, RECOMPUTE_SELECTIVE}, 1e-4, 2e-4, 2e-3);
}
/* 8-bit states: a rank's slices cut tensors elsewhere than one process
 * does, so the 256-element blocks (and their absmax) differ and the runs
 * agree only to quantization noise: 1e-2 on the loss after 20 steps. */
static void test_zero2_adamw8bit(void **s) {
    (void)s;
    check_case(2, DTYPE_FP32, (struct variant){OPTIM_ADAMW8BIT, RECOMPUTE_NONE}, 1e-2, 2e-2, 5e-2);
}
static void test_zero3_adamw8bit(void **s) {
    (void)s;
    check_case(3, DTYPE_FP32, (struct variant){OPTIM_ADAMW8BIT, RECOMPUTE_NONE}, 1e-2, 2e-2, 5e-2);
}

/* The rules of issue 26 on ZeRO 1-3, within the 8-bit bounds above: the
 * 8-bit forms for the reason above; Lion's update is the sign of an
 * interpolation, so where that is near 0 the summation order may flip it
 * (a 2 lr step), which fp32's bounds would call a bug. */
static void check_rule(enum optimizer_kind k, int stage) {
    check_case(stage, DTYPE_FP32, (struct variant){k, RECOMPUTE_NONE}, 1e-2, 2e-2, 5e-2);
}
static void test_zero1_sgd8bit(void **s) { (void)s; check_rule(OPTIM_SGD8BIT, 1); }
static void test_zero2_sgd8bit(void **s) { (void)s; check_rule(OPTIM_SGD8BIT, 2); }
static void test_zero3_sgd8bit(void **s) { (void)s; check_rule(OPTIM_SGD8BIT, 3); }
static void test_zero1_lion(void **s) { (void)s; check_rule(OPTIM_LION, 1); }
static void test_zero3_lion(void **s) { (void)s; check_rule(OPTIM_LION, 3); }
static void test_zero1_lion8bit(void **s) { (void)s; check_rule(OPTIM_LION8BIT, 1); }
static void test_zero2_lion8bit(void **s) { (void)s; check_rule(OPTIM_LION8BIT, 2); }
static void test_zero3_lion8bit(void **s) { (void)s; check_rule(OPTIM_LION8BIT, 3); }

/* Adafactor: ranks hold parts of each matrix and add their column and cut
 * rows' sums and their update squares over dp: the one-process run up to
 * summation order, so fp32's bounds (and the all-reduce bytes = theory).
 * With the paper's eps1 = 1e-30 a gradient that is 0 in exact arithmetic
 * (the key bias's: softmax ignores a shift of every score) but summation
 * noise in floats becomes a unit step of either sign (g / sqrt(g^2)): eps1
 * = 1e-12 here keeps such noise (|g| < 1e-8) from moving anything. */
static void check_adafactor(int stage) {
    check_case(stage, DTYPE_FP32, (struct variant){OPTIM_ADAFACTOR, RECOMPUTE_NONE}, 1e-4, 2e-4, 2e-3);
}
static void test_zero0_adafactor(void **s) { (void)s; check_adafactor(0); }
static void test_zero1_adafactor(void **s) { (void)s; check_adafactor(1); }
static void test_zero2_adafactor(void **s) { (void)s; check_adafactor(2); }
static void test_zero3_adafactor(void **s) { (void)s; check_adafactor(3); }

static int setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    grid_init_single(&SINGLE);
    char err[GRID_ERR_LEN];
    if (grid_init(&WORLD, 1, 1, 1, err) != 0) return -1;
    int rank = WORLD.world_rank;
    return scratch_open(DIR_, sizeof DIR_, SHARD, sizeof SHARD, "zero", rank, 100 * 1024);
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
        cmocka_unit_test(test_zero0),
        cmocka_unit_test(test_zero1),
        cmocka_unit_test(test_zero2),
        cmocka_unit_test(test_zero3),
        cmocka_unit_test(test_zero3_bf16),
        cmocka_unit_test(test_zero0_llama),
        cmocka_unit_test(test_zero1_llama),
        cmocka_unit_test(test_zero2_llama),
        cmocka_unit_test(test_zero3_llama),
        cmocka_unit_test(test_zero3_llama_bf16),
        cmocka_unit_test(test_zero3_sgd),
        cmocka_unit_test(test_zero1_recompute_full),
        cmocka_unit_test(test_zero3_recompute_selective),
        cmocka_unit_test(test_zero2_adamw8bit),
        cmocka_unit_test(test_zero3_adamw8bit),
        cmocka_unit_test(test_zero1_sgd8bit),
        cmocka_unit_test(test_zero2_sgd8bit),
        cmocka_unit_test(test_zero3_sgd8bit),
        cmocka_unit_test(test_zero1_lion),
        cmocka_unit_test(test_zero3_lion),
        cmocka_unit_test(test_zero1_lion8bit),
        cmocka_unit_test(test_zero2_lion8bit),
        cmocka_unit_test(test_zero3_lion8bit),
        cmocka_unit_test(test_zero0_adafactor),
        cmocka_unit_test(test_zero1_adafactor),
        cmocka_unit_test(test_zero2_adafactor),
        cmocka_unit_test(test_zero3_adafactor),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    MPI_Finalize();
    return failed;
}
