/* The memory timeline (train/measure/timeline.h) under mpirun -np N: after a
 * short run, every phase of the recorded step holds, on every rank, the
 * bytes in use that theory_trainer_timeline_peak derives from the config,
 * and the peak's phase and value are the hand formulas:
 *
 *   ZeRO-3, overlap: at the head's backward of micro-batch 1 (0-based, as
 *     the trace numbers them) everything is
 *     in use (own shards, scratch, all activations, the gathered
 *     embedding, head and one layer, both buckets: micro-batch 0's last
 *     reduce-scatter is still in flight) except the second gathered layer;
 *   ZeRO-3, no overlap: the head's backward of micro-batch 0, everything
 *     but the gathered layer;
 *   ZeRO-0: the head's forward of micro-batch 0, every allocated byte (no
 *     communication buffers; every activation saved).
 *
 * The JSON records: one "memory_phase" line per phase per rank. */
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
#include <unistd.h>

#include "../../train/theory/accounting.h"
#include "mpi_fixture.h"
#include "../../train/report/report.h"
#include "../../train/run/run.h"

enum { STEPS = 2, ACCUM = 2 };

static struct grid WORLD;
static char DIR_[96], SHARD[160];

static void config_for(struct config *c, int stage, bool overlap) {
    config_defaults(c);
    c->n_layer = 2, c->d_model = 32, c->n_head = 4, c->seq_len = 16, c->vocab_size = 256;
    c->micro_batch = 2;
    c->grad_accum = ACCUM;
    c->steps = STEPS;
    c->val_every = 0;
    c->threads = 1;
    c->zero = stage;
    c->overlap = overlap;
    snprintf(c->train_data, sizeof c->train_data, "%s", SHARD);
    c->val_data[0] = '\0';
}

/* Bytes of the tracked buffer named `name` on this rank (0: none). */
static double buffer_bytes(const struct trainer *tr, const char *name) {
    for (int i = 0; i < tr->mem.n_records; i++)
        if (strcmp(tr->mem.records[i].name, name) == 0) return (double)tr->mem.records[i].bytes;
    return 0;
}

/* Every phase measured equals the theory's, and the peaks agree. */
static bool phases_match_theory(const struct trainer *tr, const struct config *c) {
    static struct timeline_phase theory[TIMELINE_MAX_PHASES];
    struct timeline_theory th = theory_trainer_timeline_peak(c, rank_place_dp(WORLD.dp, WORLD.dp_rank), theory);
    const struct mem_timeline *t = &tr->timeline;
    bool ok = t->step == STEPS && t->dropped == 0 && t->n == th.phases;
    for (int i = 0; ok && i < t->n; i++) {
        const struct timeline_phase *m = &t->phase[i], *p = &theory[i];
        ok = m->kind == p->kind && m->unit == p->unit && m->micro_batch == p->micro_batch && m->index == i;
        for (int k = 0; ok && k < MEM_NUM_CATEGORIES; k++) ok = m->bytes[k] == p->bytes[k];
        if (!ok) {
            char name[96];
            timeline_phase_name(m, name, sizeof name);
            fprintf(stderr, "rank %d phase %d '%s': measured %.0f, theory %.0f\n", WORLD.world_rank, i, name,
                    timeline_total(m), timeline_total(p));
        }
    }
    return ok && t->peak.index == th.peak.index && timeline_total(&t->peak) == timeline_total(&th.peak);
}

/* Runs the config, then checks the peak's phase and value against the
 * hand formula (the allocated total less `unused` bytes) and every phase
 * against the theory. */
static void check(int stage, bool overlap, const char *peak_phase, const char *unused_buffer) {
    struct config c;
    config_for(&c, stage, overlap);
    struct trainer tr;
    char err[TRAINER_ERR_LEN];
    if (trainer_open(&tr, &c, &WORLD, NULL, err) != 0) fail_msg("trainer_open: %s", err);
    if (trainer_run(&tr, err) != 0) fail_msg("trainer_run: %s", err);
    const struct mem_timeline *t = &tr.timeline;
    char name[96];
    timeline_phase_name(&t->peak, name, sizeof name);
    double unused = unused_buffer ? buffer_bytes(&tr, unused_buffer) : 0;
    double formula = (double)tr.mem.live_total - unused;
    bool ok = strcmp(name, peak_phase) == 0 && timeline_total(&t->peak) == formula;
    ok = ok && (!unused_buffer || unused > 0);
    if (!ok)
        fprintf(stderr, "rank %d ZeRO-%d overlap %d: peak %.0f at '%s', expected %.0f at '%s'\n", WORLD.world_rank,
                stage, overlap, timeline_total(&t->peak), name, formula, peak_phase);
    assert_true(all_ok(ok));
    assert_true(all_ok(phases_match_theory(&tr, &c)));
    /* the phases per step: (L + 2) forward and backward per micro-batch, reduce, update, [gather] */
    int expect = ACCUM * 2 * (c.n_layer + 2) + 2 + (stage == 1 || stage == 2);
    assert_true(all_ok(t->n == expect));

    /* JSON: every phase of every rank, gathered to rank 0 */
    int world = WORLD.world_size;
    struct mem_timeline *all = WORLD.world_rank == 0 ? calloc((size_t)world, sizeof *all) : NULL;
    MPI_Gather(t, (int)sizeof *t, MPI_BYTE, all, (int)sizeof *t, MPI_BYTE, 0, MPI_COMM_WORLD);
    ok = true;
    if (WORLD.world_rank == 0) {
        FILE *out = tmpfile(), *json = tmpfile();
        report_timeline(out, json, &tr, all, world);
        rewind(json);
        char line[1024];
        int records = 0;
        while (fgets(line, sizeof line, json))
            records += strstr(line, "{\"type\":\"memory_phase\",\"rank\":") == line && strstr(line, "\"total\":");
        ok = records == world * expect;
        fclose(out);
        fclose(json);
        free(all);
        printf("  N=%d ZeRO-%d overlap %d: peak %.0f bytes at '%s'\n", world, stage, overlap,
               timeline_total(&t->peak), name);
    }
    assert_true(all_ok(ok));
    trainer_close(&tr);
}

static void test_zero3_overlap(void **s) {
    (void)s;
    check(3, true, "micro-batch 1 backward head", "gathered next layer (params)");
}
static void test_zero3_blocking(void **s) {
    (void)s;
    check(3, false, "micro-batch 0 backward head", "gathered layer (params)");
}
static void test_zero0(void **s) {
    (void)s;
    check(0, true, "micro-batch 0 forward head", NULL);
}
/* ZeRO-1 and 2 against the theory, phase by phase (peaks by the walk) */
static void test_zero1_zero2(void **s) {
    (void)s;
    for (int stage = 1; stage <= 2; stage++) {
        struct config c;
        config_for(&c, stage, true);
        struct trainer tr;
        char err[TRAINER_ERR_LEN];
        if (trainer_open(&tr, &c, &WORLD, NULL, err) != 0) fail_msg("trainer_open: %s", err);
        if (trainer_run(&tr, err) != 0) fail_msg("trainer_run: %s", err);
        assert_true(all_ok(phases_match_theory(&tr, &c)));
        trainer_close(&tr);
    }
}

static int setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    char err[GRID_ERR_LEN];
    if (grid_init(&WORLD, 1, 1, 1, err) != 0) return -1;
    return scratch_open(DIR_, sizeof DIR_, SHARD, sizeof SHARD, "timeline", WORLD.world_rank, 64 * 1024);
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
        cmocka_unit_test(test_zero3_overlap),
        cmocka_unit_test(test_zero3_blocking),
        cmocka_unit_test(test_zero0),
        cmocka_unit_test(test_zero1_zero2),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    MPI_Finalize();
    return failed;
}
