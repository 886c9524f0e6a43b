/* The trainer's theory (train/theory/theory_rank.c) of every rank of a tensor-
 * parallel grid, to the byte, under mpirun -np N: tp = N (2, 3, 4), and on
 * 4 ranks tp 2 x pp 2 and dp 2 x tp 2 (ZeRO 1 with 8-bit AdamW, 2 and 3).
 * Each case trains through trainer_run, validation included (its traffic
 * and FLOPs are no step's), then every rank checks its own numbers:
 *   memory: params, master, grads and optimizer live bytes, the peak of the
 *     activations, the comm buffers and the scratch each equal the theory
 *     of this rank's place (its stage, its tp slice, its dp shard);
 *   FLOPs: the layer and attention GEMMs counted per step equal the 1/t
 *     theory exactly;
 *   tp traffic: all-reduce and all-reduce-max calls per step equal the
 *     theory's count and their bytes its volume (relative 1e-12: the ring
 *     factor (t-1)/t is not a binary fraction at t = 3).
 * V = 300 is padded to 128 t rows, so the last tp ranks hold padding rows
 * (at tp 4 rank 3 holds nothing else): the state theory must count each
 * rank's own. Every recompute mode and both activation dtypes appear.
 * Sequence parallelism (--sequence_parallel 1, seq_len 24 so that 2, 3 and
 * 4 divide it) the same way: tp = N with every recompute mode, tp 2 x pp 2
 * (both schedules) and dp 2 x tp 2 at ZeRO 3; there the tp rows are
 * reduce-scatters and all-gathers (bytes and calls, one call per sequence)
 * beside the LayerNorm gradients' and the cross-entropy's all-reduces, and
 * the pp group's send and recv bytes (the rank's T/tp positions) equal the
 * theory too. */
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
#include "mpi_fixture.h"
#include "../../train/run/run.h"

enum { STEPS = 3 };

static int WORLD_SIZE, WORLD_RANK;
static char DIR_[96], SHARD[160];

struct variant {
    int tp, pp, zero;
    enum dtype dt;
    enum recompute_mode recompute;
    enum optimizer_kind optimizer;
    enum schedule_kind schedule;
    bool sp;
};

static void config_for(struct config *c, const struct variant *v) {
    config_defaults(c);
    c->n_layer = 2, c->d_model = 48, c->n_head = 12, c->seq_len = 16, c->vocab_size = 300;
    c->micro_batch = 2, c->grad_accum = 2;
    c->steps = STEPS, c->warmup_steps = 1, c->lr = 1e-3f;
    c->val_every = 2, c->val_batches = 2; /* validation after step 2 and at the end */
    c->threads = 1;
    c->tp = v->tp, c->pp = v->pp, c->zero = v->zero, c->schedule = v->schedule;
    c->recompute = v->recompute, c->optimizer = v->optimizer;
    c->min_8bit_size = 64;
    c->param_dtype = c->grad_dtype = c->act_dtype = v->dt;
    c->sequence_parallel = v->sp;
    if (v->sp) c->seq_len = 24; /* divisible by tp 2, 3 and 4 */
    snprintf(c->train_data, sizeof c->train_data, "%s", SHARD);
    snprintf(c->val_data, sizeof c->val_data, "%s", SHARD);
}

static bool near(double measured, double theory) { return fabs(measured - theory) <= 1e-12 * fabs(theory); }

static void check_case(const struct variant *v) {
    struct config c;
    config_for(&c, v);
    struct grid g;
    char err[TRAINER_ERR_LEN];
    assert_int_equal(grid_init(&g, v->tp, 1, v->pp, err), 0);
    struct trainer tr;
    int rc = trainer_open(&tr, &c, &g, NULL, err);
    if (rc == 0) rc = trainer_run(&tr, err);
    if (rc != 0) fprintf(stderr, "rank %d: %s\n", WORLD_RANK, err);
    assert_true(all_ok(rc == 0));

    struct rank_place p = rank_place_of(&c, WORLD_SIZE, WORLD_RANK);
    bool ok = true;
    /* memory, category by category */
    double states[MEM_NUM_CATEGORIES] = {0};
    struct state_theory st = theory_trainer_states(&c, p);
    for (int i = 0; i < st.n; i++) states[st.lines[i].category] += st.lines[i].psi_bytes + st.lines[i].padding_bytes;
    enum mem_category cats[] = {MEM_PARAMS, MEM_MASTER, MEM_GRADS, MEM_OPTIMIZER};
    for (size_t i = 0; i < sizeof cats / sizeof cats[0]; i++)
        if ((double)tr.mem.live[cats[i]] != states[cats[i]]) {
            printf("  rank %d: %s %zu, theory %.0f\n", WORLD_RANK, mem_category_name(cats[i]), tr.mem.live[cats[i]],
                   states[cats[i]]);
            ok = false;
        }
    double act = (double)tr.mem.peak[MEM_ACTIVATIONS], act_th = theory_trainer_activations(&c, p).total;
    double comm = (double)tr.mem.live[MEM_COMM], comm_th = theory_trainer_comm_buffers(&c, p);
    double scr = (double)tr.mem.live[MEM_SCRATCH], scr_th = theory_trainer_scratch(&c, p).persistent;
    ok = ok && act == act_th && comm == comm_th && scr == scr_th;
    /* FLOPs per step of this rank */
    struct flop_theory ft = theory_trainer_flops(&c, p);
    double gemm = tr.flops.gemm / STEPS, att = tr.flops.attention / STEPS;
    ok = ok && gemm == ft.gemm && att == ft.attention;
    /* the tp group's traffic per step */
    struct tp_comm_theory tt = theory_trainer_tp_comm(&c, p);
    const struct comm_counters *k = &g.tp_comm.counters;
    double ar = k->bytes[COLL_ALL_REDUCE] / STEPS, arm = k->bytes[COLL_ALL_REDUCE_MAX] / STEPS;
    double rs = k->bytes[COLL_REDUCE_SCATTER] / STEPS, ag = k->bytes[COLL_ALL_GATHER] / STEPS;
    ok = ok && k->calls[COLL_ALL_REDUCE] == (long)(tt.calls * STEPS) && k->calls[COLL_ALL_REDUCE_MAX] == (long)(tt.calls_max * STEPS);
    ok = ok && k->calls[COLL_REDUCE_SCATTER] == (long)(tt.calls_reduce_scatter * STEPS) &&
         k->calls[COLL_ALL_GATHER] == (long)(tt.calls_all_gather * STEPS);
    ok = ok && near(ar, tt.all_reduce) && near(arm, tt.all_reduce_max) && near(rs, tt.reduce_scatter) &&
         near(ag, tt.all_gather);
    /* the tp rows are not zero by accident: the group really moved bytes,
     * and sequence parallelism really ran (no reduce-scatter without it) */
    ok = ok && ar > 0 && tt.sp == v->sp && (v->sp ? rs > 0 && ag > 0 : rs == 0 && ag == 0);
    /* the pipeline's traffic per step (with sp each tp rank's T/tp
     * positions), over the pp group's counters */
    struct pipe_comm_theory pt = theory_trainer_pp_comm(&c, p);
    const struct comm_counters *q = &g.pp_comm.counters;
    double sent = q->bytes[COLL_SEND] / STEPS, recv = q->bytes[COLL_RECV] / STEPS;
    ok = ok && sent == pt.send && recv == pt.recv && (v->pp > 1) == (sent > 0);
    /* Psi, not only the bytes (a category's bytes are Psi + padding
     * whatever the split): over the tp group the ranks' real parameters add
     * up to the stage's Psi at tp 1 plus t - 1 extra copies of the
     * replicated tensors; a padding row counted as real breaks the sum. */
    const struct model_layout *lay = &tr.engine.lay;
    double sums[2] = {st.psi, 0};
    for (int t = 0; t < layout_num_tensors(lay); t++)
        if (layout_tensor(lay, t).split == SPLIT_REPLICATED) sums[1] += (double)layout_tensor(lay, t).numel;
    double replicated = sums[1];
    g.tp_comm.all_reduce_scalars(&g.tp_comm, sums, 2);
    struct rank_place stage = p;
    stage.tp = 1, stage.tp_rank = 0;
    double stage_psi = theory_trainer_states(&c, stage).psi;
    ok = ok && sums[0] - (v->tp - 1) * replicated == stage_psi;
    struct vocab_rows vr = rank_vocab_rows(lay);
    if (!ok || WORLD_RANK == WORLD_SIZE - 1)
        printf("  dp %d x tp %d x pp %d%s, ZeRO-%d, %s, recompute %s, rank %d (vocab [%d, %d), %d padding): "
               "activations %.0f (theory %.0f, Korthikanti %.0f), scratch %.0f (%.0f), comm %.0f (%.0f), gemm %.6e (%.6e), "
               "attention %.6e (%.6e), Psi over tp %.0f (stage %.0f + %d x %.0f replicated), tp all-reduce %.1f B %ld calls (%.1f B, %.0f calls), max %.1f (%.1f), "
               "reduce-scatter %.1f B %ld calls (%.1f B, %.0f calls), all-gather %.1f B %ld calls (%.1f B, %.0f calls), pp sent %.0f recv %.0f (%.0f, %.0f): %s\n",
               p.dp, v->tp, v->pp, v->sp ? " + sp" : "", v->zero, v->dt == DTYPE_BF16 ? "bf16" : "fp32", v->recompute == RECOMPUTE_NONE ? "none" : v->recompute == RECOMPUTE_FULL ? "full" : "selective", WORLD_RANK,
               vr.v0, vr.v1, vr.padding, act, act_th, theory_trainer_activations(&c, p).korthikanti_total, scr, scr_th, comm, comm_th, gemm, ft.gemm, att, ft.attention, sums[0], stage_psi, v->tp - 1, replicated, ar,
               k->calls[COLL_ALL_REDUCE] / STEPS, tt.all_reduce, tt.calls, arm, tt.all_reduce_max,
               rs, k->calls[COLL_REDUCE_SCATTER] / STEPS, tt.reduce_scatter, tt.calls_reduce_scatter,
               ag, k->calls[COLL_ALL_GATHER] / STEPS, tt.all_gather, tt.calls_all_gather, sent, recv, pt.send, pt.recv, ok ? "ok" : "FAILED");
    trainer_close(&tr);
    grid_free(&g);
    assert_true(all_ok(ok));
}

static struct variant tp_all(enum dtype dt, enum recompute_mode r) {
    return (struct variant){.tp = WORLD_SIZE, .pp = 1, .dt = dt, .recompute = r, .optimizer = OPTIM_ADAMW};
}

static void test_tp_none_bf16(void **s) { (void)s; struct variant v = tp_all(DTYPE_BF16, RECOMPUTE_NONE); check_case(&v); }
static void test_tp_selective_fp32(void **s) {
    (void)s;
    struct variant v = tp_all(DTYPE_FP32, RECOMPUTE_SELECTIVE);
    check_case(&v);
}
static void test_tp_full_bf16(void **s) { (void)s; struct variant v = tp_all(DTYPE_BF16, RECOMPUTE_FULL); check_case(&v); }

/* 4 ranks: tp 2 x pp 2, both schedules. */
static void test_tp2_pp2(void **s) {
    (void)s;
    if (WORLD_SIZE != 4) skip();
    struct variant a = {.tp = 2, .pp = 2, .dt = DTYPE_BF16, .recompute = RECOMPUTE_NONE, .optimizer = OPTIM_ADAMW,
                        .schedule = SCHEDULE_GPIPE};
    check_case(&a);
    struct variant b = {.tp = 2, .pp = 2, .zero = 1, .dt = DTYPE_FP32, .recompute = RECOMPUTE_FULL,
                        .optimizer = OPTIM_ADAMW, .schedule = SCHEDULE_1F1B};
    check_case(&b);
}

/* 4 ranks: dp 2 x tp 2, the states sharded over each tp rank's dp group. */
static void test_dp2_tp2(void **s) {
    (void)s;
    if (WORLD_SIZE != 4) skip();
    struct variant z3 = {.tp = 2, .pp = 1, .zero = 3, .dt = DTYPE_BF16, .recompute = RECOMPUTE_SELECTIVE,
                         .optimizer = OPTIM_ADAMW};
    check_case(&z3);
    struct variant z2 = {.tp = 2, .pp = 1, .zero = 2, .dt = DTYPE_FP32, .recompute = RECOMPUTE_NONE,
                         .optimizer = OPTIM_SGD};
    check_case(&z2);
    struct variant z1 = {.tp = 2, .pp = 1, .zero = 1, .dt = DTYPE_BF16, .recompute = RECOMPUTE_FULL,
                         .optimizer = OPTIM_ADAMW8BIT};
    check_case(&z1);
}

/* Sequence parallelism over tp = N: every recompute mode, both dtypes. */
static struct variant sp_all(enum dtype dt, enum recompute_mode r) {
    struct variant v = tp_all(dt, r);
    v.sp = true;
    return v;
}

static void test_sp_none_bf16(void **s) { (void)s; struct variant v = sp_all(DTYPE_BF16, RECOMPUTE_NONE); check_case(&v); }
static void test_sp_selective_bf16(void **s) {
    (void)s;
    struct variant v = sp_all(DTYPE_BF16, RECOMPUTE_SELECTIVE);
    check_case(&v);
}
static void test_sp_full_fp32(void **s) { (void)s; struct variant v = sp_all(DTYPE_FP32, RECOMPUTE_FULL); check_case(&v); }

/* 4 ranks: tp 2 x pp 2 with sp, both schedules (the boundary carries the
 * rank's (B,T/2,C)). */
static void test_sp_tp2_pp2(void **s) {
    (void)s;
    if (WORLD_SIZE != 4) skip();
    struct variant a = {.tp = 2, .pp = 2, .dt = DTYPE_BF16, .recompute = RECOMPUTE_FULL, .optimizer = OPTIM_ADAMW,
                        .schedule = SCHEDULE_GPIPE, .sp = true};
    check_case(&a);
    struct variant b = {.tp = 2, .pp = 2, .zero = 1, .dt = DTYPE_FP32, .recompute = RECOMPUTE_SELECTIVE,
                        .optimizer = OPTIM_ADAMW, .schedule = SCHEDULE_1F1B, .sp = true};
    check_case(&b);
}

/* 4 ranks: dp 2 x tp 2 with sp, ZeRO 3 (gathered units and buckets beside
 * sp's scratch). */
static void test_sp_dp2_tp2_zero3(void **s) {
    (void)s;
    if (WORLD_SIZE != 4) skip();
    struct variant z3 = {.tp = 2, .pp = 1, .zero = 3, .dt = DTYPE_BF16, .recompute = RECOMPUTE_NONE,
                         .optimizer = OPTIM_ADAMW, .sp = true};
    check_case(&z3);
}

static int setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    MPI_Comm_size(MPI_COMM_WORLD, &WORLD_SIZE);
    MPI_Comm_rank(MPI_COMM_WORLD, &WORLD_RANK);
    return scratch_open(DIR_, sizeof DIR_, SHARD, sizeof SHARD, "tpacct", WORLD_RANK, 100 * 1024);
}

static int teardown(void **state) {
    (void)state;
    return scratch_close(DIR_);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tp_none_bf16),  cmocka_unit_test(test_tp_selective_fp32),
        cmocka_unit_test(test_tp_full_bf16),  cmocka_unit_test(test_tp2_pp2),
        cmocka_unit_test(test_dp2_tp2),       cmocka_unit_test(test_sp_none_bf16),
        cmocka_unit_test(test_sp_selective_bf16), cmocka_unit_test(test_sp_full_fp32),
        cmocka_unit_test(test_sp_tp2_pp2),    cmocka_unit_test(test_sp_dp2_tp2_zero3),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    MPI_Finalize();
    return failed;
}
