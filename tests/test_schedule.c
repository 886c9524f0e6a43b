/* Pipeline schedules' order and memory (include/schedule.h), and the
 * stage split's parser (include/pipe_stages.h), without running a model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "pipe_stages.h"
#include "schedule.h"

enum { MAX_M = 12, MAX_P = 6 };

/* Every micro-batch runs forward once, then backward once; the order
 * never holds more than `slots` in flight, and micro-batches in flight
 * never share slot k mod slots. Returns the forwards before the first
 * backward. */
static int check_order(enum schedule_kind k, int p, int s, int m) {
    struct pipe_op ops[2 * MAX_M];
    assert_int_equal(schedule_order_v(k, p, s, m, 1, ops), 2 * m);
    int slots = schedule_slots(k, p, s, m), next_f = 0, next_b = 0, warmup = -1;
    bool live[MAX_M] = {false};
    for (int i = 0; i < 2 * m; i++) {
        int mb = ops[i].micro_batch;
        if (ops[i].kind == PIPE_FORWARD) {
            assert_int_equal(mb, next_f++); /* forwards in order */
            for (int j = 0; j < m; j++) assert_false(live[j] && j != mb && j % slots == mb % slots);
            live[mb] = true;
        } else {
            if (warmup < 0) warmup = next_f;
            assert_int_equal(mb, next_b++); /* backwards in order, each after its forward */
            assert_true(live[mb]);
            live[mb] = false;
        }
        int in_flight = 0;
        for (int j = 0; j < m; j++) in_flight += live[j];
        assert_true(in_flight <= slots);
    }
    assert_int_equal(next_b, m);
    return warmup;
}

static void test_gpipe_holds_every_micro_batch(void **state) {
    (void)state;
    for (int p = 1; p <= MAX_P; p++)
        for (int s = 0; s < p; s++)
            for (int m = 1; m <= MAX_M; m++) {
                assert_int_equal(schedule_slots(SCHEDULE_GPIPE, p, s, m), m);
                assert_int_equal(check_order(SCHEDULE_GPIPE, p, s, m), m); /* all forwards first */
            }
}

/* 1F1B: stage s warms up with min(p - s - 1, m) forwards, so the first
 * backward follows forward min(p - s, m), and holds min(p - s, m). */
static void test_1f1b_warmup_and_slots(void **state) {
    (void)state;
    for (int p = 1; p <= MAX_P; p++)
        for (int s = 0; s < p; s++)
            for (int m = 1; m <= MAX_M; m++) {
                int expect = p - s < m ? p - s : m;
                assert_int_equal(schedule_slots(SCHEDULE_1F1B, p, s, m), expect);
                assert_int_equal(check_order(SCHEDULE_1F1B, p, s, m), expect);
            }
    /* one stage: forward then backward of each micro-batch, in turn */
    struct pipe_op ops[6];
    schedule_order_v(SCHEDULE_1F1B, 1, 0, 3, 1, ops);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(ops[i].kind, i % 2 ? PIPE_BACKWARD : PIPE_FORWARD);
        assert_int_equal(ops[i].micro_batch, i / 2);
    }
}

static void test_parse_layers(void **state) {
    (void)state;
    int counts[4];
    char err[256];
    assert_int_equal(pipeline_parse_layers("3,3,2", 3, 8, counts, err, sizeof err), 0);
    assert_int_equal(counts[0], 3);
    assert_int_equal(counts[2], 2);
    assert_int_equal(pipeline_parse_layers("8,0,0", 3, 8, counts, err, sizeof err), 0); /* stages of embedding, head */
    const char *bad[] = {"3,3", "3,3,3", "4,5,-1", "3,x,2", "3;3;2", "", "3,3,2,0", "9,0,-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(pipeline_parse_layers(bad[i], 3, 8, counts, err, sizeof err), -1);
        assert_non_null(strstr(err, "pp_layers"));
    }
    /* the split it gives is the one the stages take */
    int l0, l1;
    assert_int_equal(pipeline_parse_layers("1,3", 2, 4, counts, err, sizeof err), 0);
    assert_int_equal(pipeline_stage_layers(4, 2, 1, counts, &l0, &l1), 0);
    assert_int_equal(l0, 1);
    assert_int_equal(l1, 4);
}

/* ---- the interleaved schedule ---- */

enum { MAX_V = 3, MAX_OPS = 2 * MAX_M * MAX_V };

/* Every (chunk, micro-batch) forward once, then backward once; each
 * chunk's forwards and backwards in micro-batch order; per chunk the
 * number in flight reaches exactly its slots and never shares slot
 * k mod slots. Returns the forwards before the first backward. */
static int check_interleaved(int p, int s, int m, int v) {
    struct pipe_op ops[MAX_OPS];
    assert_int_equal(schedule_order_v(SCHEDULE_INTERLEAVED, p, s, m, v, ops), 2 * m * v);
    int next_f[MAX_V] = {0}, next_b[MAX_V] = {0}, most[MAX_V] = {0}, warmup = -1, forwards = 0;
    bool live[MAX_V][MAX_M] = {{false}};
    for (int i = 0; i < 2 * m * v; i++) {
        int c = ops[i].chunk, mb = ops[i].micro_batch;
        assert_true(c >= 0 && c < v && mb >= 0 && mb < m);
        int slots = schedule_chunk_slots(SCHEDULE_INTERLEAVED, p, s, m, v, c);
        if (ops[i].kind == PIPE_FORWARD) {
            assert_int_equal(mb, next_f[c]++);
            for (int j = 0; j < m; j++) assert_false(live[c][j] && j % slots == mb % slots);
            live[c][mb] = true;
            forwards++;
        } else {
            if (warmup < 0) warmup = forwards;
            assert_int_equal(mb, next_b[c]++);
            assert_true(live[c][mb]);
            live[c][mb] = false;
        }
        int in_flight = 0;
        for (int j = 0; j < m; j++) in_flight += live[c][j];
        assert_true(in_flight <= slots);
        most[c] = in_flight > most[c] ? in_flight : most[c];
    }
    for (int c = 0; c < v; c++) {
        assert_int_equal(next_b[c], m);
        assert_int_equal(most[c], schedule_chunk_slots(SCHEDULE_INTERLEAVED, p, s, m, v, c));
    }
    return warmup;
}

static void test_interleaved_order_warmup_and_slots(void **state) {
    (void)state;
    for (int p = 2; p <= 4; p++)
        for (int v = 2; v <= MAX_V; v++)
            for (int m = p; m <= MAX_M; m += p)
                for (int s = 0; s < p; s++) {
                    int expect = (p - s - 1) * 2 + (v - 1) * p;
                    expect = expect < m * v ? expect : m * v;
                    assert_int_equal(schedule_warmup(SCHEDULE_INTERLEAVED, p, s, m, v), expect);
                    /* the steady state opens with a forward */
                    assert_int_equal(check_interleaved(p, s, m, v), expect < m * v ? expect + 1 : m * v);
                }
    /* p 2, v 2, m 4 by hand (Megatron-LM's order): stage 0 warms up with
     * 2 + 2 = 4 forwards: micro-batches 0, 1 of chunk 0, then of chunk 1 */
    struct pipe_op ops[16];
    schedule_order_v(SCHEDULE_INTERLEAVED, 2, 0, 4, 2, ops);
    const char *expect0[] = {"F0.0", "F0.1", "F1.0", "F1.1", "F0.2", "B1.0", "F0.3", "B1.1",
                             "F1.2", "B0.0", "F1.3", "B0.1", "B1.2", "B1.3", "B0.2", "B0.3"};
    for (int i = 0; i < 16; i++) {
        char tok[16];
        snprintf(tok, sizeof tok, "%c%d.%d", ops[i].kind == PIPE_FORWARD ? 'F' : 'B', ops[i].chunk,
                 ops[i].micro_batch);
        assert_string_equal(tok, expect0[i]);
    }
    /* its chunks' slots: 4 of chunk 0 in flight (F0.0 F0.1 F0.2 F0.3 before B0.0), 2 of chunk 1 */
    assert_int_equal(schedule_chunk_slots(SCHEDULE_INTERLEAVED, 2, 0, 4, 2, 0), 4);
    assert_int_equal(schedule_chunk_slots(SCHEDULE_INTERLEAVED, 2, 0, 4, 2, 1), 2);
    /* v = 1 schedules: the chunk slots are schedule_slots */
    for (int p = 1; p <= MAX_P; p++)
        for (int s = 0; s < p; s++)
            for (int m = 1; m <= MAX_M; m++) {
                assert_int_equal(schedule_chunk_slots(SCHEDULE_1F1B, p, s, m, 1, 0), schedule_slots(SCHEDULE_1F1B, p, s, m));
                assert_int_equal(schedule_chunk_slots(SCHEDULE_GPIPE, p, s, m, 1, 0), schedule_slots(SCHEDULE_GPIPE, p, s, m));
            }
}

static void test_interleaved_refusals(void **state) {
    (void)state;
    struct pipe_op ops[MAX_OPS];
    assert_false(schedule_runs(SCHEDULE_INTERLEAVED, 2, 3, 2)); /* m not a multiple of p */
    assert_int_equal(schedule_order_v(SCHEDULE_INTERLEAVED, 2, 0, 3, 2, ops), -1);
    assert_int_equal(schedule_chunk_slots(SCHEDULE_INTERLEAVED, 3, 0, 4, 2, 0), 0);
    assert_false(schedule_runs(SCHEDULE_INTERLEAVED, 1, 2, 2)); /* one stage */
    assert_false(schedule_runs(SCHEDULE_INTERLEAVED, 2, 2, 1)); /* one chunk: that is 1f1b */
    assert_false(schedule_runs(SCHEDULE_1F1B, 2, 2, 2));        /* chunks need interleaved */
    assert_false(schedule_runs(SCHEDULE_INTERLEAVED, 2, 2, RANK_MAX_CHUNKS + 1));
    assert_true(schedule_runs(SCHEDULE_INTERLEAVED, 2, 4, 2));
    assert_true(schedule_runs(SCHEDULE_1F1B, 3, 5, 1));
}

/* ---- every stage's order run together, as the pipeline runs them ----
 * Rank r steps through its ops. An op on virtual stage j = c p + r:
 *  forward:  waits for the sends of the micro-batch that held its slot
 *            before (matched once their receivers reached the receiving
 *            op: rendezvous, the worst case), then receives: stage j - 1's
 *            forward of the same micro-batch must be done; after it, a
 *            first virtual stage waits for its slot's old activation send;
 *  backward: waits for its slot's activation send, then receives: stage
 *            j + 1's backward of the same micro-batch must be done.
 * The run must finish: no rank blocks forever. */
struct sim {
    enum schedule_kind k;
    int p, m, v, n;
    struct pipe_op ops[MAX_P][MAX_OPS];
    int pos[MAX_P][2][MAX_V][MAX_M]; /* where (kind, chunk, micro-batch) is in the rank's order */
    int pc[MAX_P];
    bool posted[MAX_P]; /* the current op has passed its waits and posted its receive */
};

static int stage_rank(const struct sim *x, int j) { return j % x->p; }
static int stage_chunk(const struct sim *x, int j) { return j / x->p; }
static bool done(const struct sim *x, int j, enum pipe_op_kind kind, int mb) {
    int r = stage_rank(x, j);
    return x->pos[r][kind][stage_chunk(x, j)][mb] < x->pc[r];
}
static bool reached(const struct sim *x, int j, enum pipe_op_kind kind, int mb) {
    int r = stage_rank(x, j), at = x->pos[r][kind][stage_chunk(x, j)][mb];
    return at < x->pc[r] || (at == x->pc[r] && x->posted[r]);
}

/* One move of rank r; false when it is blocked. */
static bool sim_move(struct sim *x, int r) {
    if (x->pc[r] == x->n) return false;
    struct pipe_op op = x->ops[r][x->pc[r]];
    int j = op.chunk * x->p + r, last = x->p * x->v - 1, k = op.micro_batch;
    int slots = schedule_chunk_slots(x->k, x->p, r, x->m, x->v, op.chunk), old = k - slots;
    if (op.kind == PIPE_FORWARD) {
        if (!x->posted[r]) {
            if (j > 0 && old >= 0 && (!reached(x, j - 1, PIPE_BACKWARD, old) ||
                                      (j < last && !reached(x, j + 1, PIPE_FORWARD, old))))
                return false;
            x->posted[r] = true;
            return true;
        }
        if (j > 0 && !done(x, j - 1, PIPE_FORWARD, k)) return false;
        if (j == 0 && old >= 0 && j < last && !reached(x, j + 1, PIPE_FORWARD, old)) return false;
    } else {
        if (!x->posted[r]) {
            if (j < last && !reached(x, j + 1, PIPE_FORWARD, k)) return false;
            x->posted[r] = true;
            return true;
        }
        if (j < last && !done(x, j + 1, PIPE_BACKWARD, k)) return false;
    }
    x->pc[r]++;
    x->posted[r] = false;
    return true;
}

static void check_runs_together(enum schedule_kind k, int p, int m, int v) {
    static struct sim x;
    memset(&x, 0, sizeof x);
    x.k = k, x.p = p, x.m = m, x.v = v, x.n = 2 * m * v;
    for (int r = 0; r < p; r++) {
        assert_int_equal(schedule_order_v(k, p, r, m, v, x.ops[r]), x.n);
        for (int i = 0; i < x.n; i++) x.pos[r][x.ops[r][i].kind][x.ops[r][i].chunk][x.ops[r][i].micro_batch] = i;
    }
    for (bool moved = true; moved;) {
        moved = false;
        for (int r = 0; r < p; r++) moved = sim_move(&x, r) || moved;
    }
    for (int r = 0; r < p; r++) assert_int_equal(x.pc[r], x.n);
}

static void test_orders_run_together(void **state) {
    (void)state;
    for (int p = 1; p <= MAX_P; p++)
        for (int m = 1; m <= MAX_M; m++) {
            check_runs_together(SCHEDULE_GPIPE, p, m, 1);
            check_runs_together(SCHEDULE_1F1B, p, m, 1);
            for (int v = 2; v <= MAX_V && p >= 2 && m % p == 0; v++) check_runs_together(SCHEDULE_INTERLEAVED, p, m, v);
        }
}

/* Rank s holds chunks s, s + p, ...: the embedding in chunk 0 of rank 0,
 * the head in the last chunk of rank p - 1; pp_layers gives p v counts. */
static void test_interleaved_rank_desc(void **state) {
    (void)state;
    struct rank_desc d;
    assert_int_equal(pipeline_rank_desc_v(8, 2, 2, 1, 1, 0, NULL, &d), 0);
    assert_int_equal(d.n_chunks, 2);
    assert_true(d.chunk[0].l0 == 2 && d.chunk[0].l1 == 4 && d.chunk[1].l0 == 6 && d.chunk[1].l1 == 8);
    assert_true(d.has_head && !d.has_embed);
    assert_int_equal(rank_layers(&d), 4);
    assert_int_equal(rank_layer_at(&d, 2), 6);
    assert_int_equal(rank_layer_index(&d, 7), 3);
    assert_int_equal(rank_layer_index(&d, 4), -1);
    char text[64];
    rank_holds_text(&d, text, sizeof text);
    assert_string_equal(text, "2-3,6-7 H");
    int counts[4] = {1, 3, 2, 2};
    assert_int_equal(pipeline_rank_desc_v(8, 2, 2, 0, 1, 0, counts, &d), 0);
    assert_true(d.has_embed && d.chunk[0].l0 == 0 && d.chunk[0].l1 == 1 && d.chunk[1].l0 == 4 && d.chunk[1].l1 == 6);
    assert_int_equal(pipeline_rank_desc_v(8, 2, RANK_MAX_CHUNKS + 1, 0, 1, 0, NULL, &d), -1);
    /* v = 1 is the one range */
    assert_int_equal(pipeline_rank_desc_v(5, 2, 1, 0, 1, 0, NULL, &d), 0);
    assert_true(d.n_chunks == 1 && d.chunk[0].l0 == 0 && d.chunk[0].l1 == 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interleaved_order_warmup_and_slots),
        cmocka_unit_test(test_interleaved_refusals),
        cmocka_unit_test(test_orders_run_together),
        cmocka_unit_test(test_interleaved_rank_desc),
        cmocka_unit_test(test_gpipe_holds_every_micro_batch),
        cmocka_unit_test(test_1f1b_warmup_and_slots),
        cmocka_unit_test(test_parse_layers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
