/* The timeline recorder (include/trace.h) and its place in the trainer:
 * a NULL or unopened recorder records nothing; spans keep begin order and
 * nest; a full array drops and counts, never fails; the events' buffer is
 * scratch in the memory theory to the byte (automatic capacity and
 * trace_events alike); a run records step, forward, backward and optimizer
 * spans in the sequential order, each unit's forward and backward span
 * inside its micro-batch's, tagged with the unit. The file itself (MPI, every rank) is
 * tests/mpi/trace.sh's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../train/theory/accounting.h"
#include "grid_single.h"
#include "rng.h"
#include "../train/measure/trace_file.h"
#include "../train/run/run.h"
#include "shard_write.h"

static char DIR_[64], SHARD[128];
static struct grid GRID; /* one process: a 1 x 1 x 1 grid */

static int setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    grid_init_single(&GRID);
    snprintf(DIR_, sizeof DIR_, "/tmp/shardlab_test_trace_XXXXXX");
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

static void test_recorder(void **s) {
    (void)s;
    /* off: NULL and zeroed recorders take nothing and count nothing */
    struct trace off = {0};
    assert_int_equal(trace_begin(NULL, TRACE_STEP, -1), -1);
    trace_end(NULL, 0);
    assert_int_equal(trace_begin(&off, TRACE_STEP, -1), -1);
    trace_end(&off, -1);
    assert_int_equal(off.n + off.dropped, 0);

    struct mem_tracker mem = {0};
    struct trace t;
    assert_int_equal(trace_open(&t, &mem, 4), 0);
    assert_int_equal(mem.live[MEM_SCRATCH], 4 * sizeof(struct trace_event));
    assert_string_equal(mem.records[0].name, "trace events");
    trace_set_step(&t, 7);
    int step = trace_begin(&t, TRACE_STEP, -1);
    int fwd = trace_begin_chunk(&t, TRACE_FORWARD, 3, 1);
    trace_end(&t, fwd);
    int bwd = trace_begin(&t, TRACE_BACKWARD, 3);
    trace_end(&t, bwd);
    trace_end(&t, step);
    assert_int_equal(step, 0);
    assert_int_equal(fwd, 1);
    assert_int_equal(bwd, 2);
    const struct trace_event *e = t.events;
    assert_int_equal(e[1].micro_batch, 3);
    assert_int_equal(e[1].chunk, 1);
    assert_int_equal(e[2].chunk, 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(e[i].step, 7);
        assert_true(e[i].t1 >= e[i].t0);
        assert_int_equal(e[i].call, TRACE_CALL_NONE);
    }
    /* nested: the step holds both; forward ends before backward begins */
    assert_true(e[0].t0 <= e[1].t0 && e[2].t1 <= e[0].t1);
    assert_true(e[1].t1 <= e[2].t0);
    /* one slot left, then full: later spans are dropped and counted */
    int open = trace_begin(&t, TRACE_OPTIMIZER, -1);
    assert_int_equal(open, 3);
    assert_true(t.events[3].t1 < t.events[3].t0); /* begun, not ended: the file marks it unfinished */
    for (int i = 0; i < 5; i++) {
        int ev = trace_begin(&t, TRACE_FORWARD, i);
        assert_int_equal(ev, -1);
        trace_end(&t, ev);
    }
    assert_int_equal(t.n, 4);
    assert_int_equal(t.dropped, 5);
    trace_close(&t, &mem);
    assert_int_equal(mem.live_total, 0);
}

/* A small model whose vocabulary (200) pads to 256. */
static void small_config(struct config *c) {
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
    snprintf(c->train_data, sizeof c->train_data, "%s", SHARD);
    c->val_data[0] = '\0';
}

static void test_trainer_trace(void **s) {
    (void)s;
    struct config c;
    small_config(&c);
    double off = theory_trainer_scratch(&c, rank_place_dp(1, 0)).persistent;
    assert_int_equal(trace_capacity(&c), 0);
    snprintf(c.trace, sizeof c.trace, "%s/trace.json", DIR_);
    const int capacities[] = {0, 5};
    for (int i = 0; i < 2; i++) {
        c.trace_events = capacities[i];
        size_t cap = trace_capacity(&c);
        assert_true(capacities[i] ? cap == 5 : cap >= 100);
        struct scratch_theory sc = theory_trainer_scratch(&c, rank_place_dp(1, 0));
        assert_true(sc.persistent == off + (double)cap * sizeof(struct trace_event));
        struct trainer tr;
        char err[TRAINER_ERR_LEN];
        assert_int_equal(trainer_open(&tr, &c, &GRID, NULL, err), 0);
        assert_true((double)tr.mem.live[MEM_SCRATCH] == sc.persistent);
        assert_int_equal(trainer_run(&tr, err), 0);
        const struct trace *t = &tr.trace;
        /* per step: step; per micro-batch its forward with the units'
         * (embedding, layers 0 and 1, head), its backward with theirs in
         * reverse; the optimizer (the single-process collectives record
         * nothing, and ZeRO-0 releases nothing) */
        enum { PER_MB = 2 * (1 + 4), PER_STEP = 1 + 2 * PER_MB + 1 };
        const int unit_kinds[4] = {UNIT_EMBED, UNIT_LAYER, UNIT_LAYER, UNIT_HEAD}, layers[4] = {-1, 0, 1, -1};
        int kinds[PER_STEP], mbs[PER_STEP], units[PER_STEP], unit_layers[PER_STEP], n = 0;
        kinds[n] = TRACE_STEP, mbs[n] = -1, units[n] = -1, unit_layers[n++] = -1;
        for (int mb = 0; mb < 2; mb++)
            for (int pass = 0; pass < 2; pass++) {
                kinds[n] = pass ? TRACE_BACKWARD : TRACE_FORWARD, mbs[n] = mb, units[n] = -1, unit_layers[n++] = -1;
                for (int j = 0; j < 4; j++) {
                    int u = pass ? 3 - j : j;
                    kinds[n] = pass ? TRACE_UNIT_BACKWARD : TRACE_UNIT_FORWARD, mbs[n] = mb;
                    units[n] = unit_kinds[u], unit_layers[n++] = layers[u];
                }
            }
        kinds[n] = TRACE_OPTIMIZER, mbs[n] = -1, units[n] = -1, unit_layers[n++] = -1;
        assert_int_equal(n, PER_STEP);
        if (capacities[i] == 0) {
            assert_int_equal(t->n, 3 * PER_STEP);
            assert_int_equal(t->dropped, 0);
            for (size_t k = 0; k < t->n; k++) {
                const struct trace_event *ev = &t->events[k];
                assert_int_equal(ev->kind, kinds[k % PER_STEP]);
                assert_int_equal(ev->micro_batch, mbs[k % PER_STEP]);
                assert_int_equal(ev->unit_kind, units[k % PER_STEP]);
                assert_int_equal(ev->layer, unit_layers[k % PER_STEP]);
                assert_int_equal(ev->step, (int)(k / PER_STEP) + 1);
                assert_true(ev->t1 >= ev->t0);
                if (k > 0) assert_true(ev->t0 >= t->events[k - 1].t0);
            }
        } else {
            assert_int_equal(t->n, 5);
            assert_int_equal(t->dropped, 3 * PER_STEP - 5);
        }
        trainer_close(&tr);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recorder),
        cmocka_unit_test(test_trainer_trace),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
