/* The comm table per group (train/report/report_memory.c: rank_stats_collect and
 * report_comm), on made-up counters: the dp rows stay as they were, any
 * other group shows up once some rank used it, with its kinds and "-" as
 * theory, and the rank stats carry every group's counters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../train/theory/accounting.h"
#include "../train/report/report.h"
#include "grid_single.h"

static struct config small_config(void) {
    struct config c;
    config_defaults(&c);
    c.n_layer = 2;
    c.d_model = 32;
    c.n_head = 4;
    c.seq_len = 16;
    c.vocab_size = 200;
    c.zero = 0;
    return c;
}

/* Rank stats gather as one array of doubles (train_main.c). */
static void test_rank_stats_are_doubles(void **state) {
    (void)state;
    assert_int_equal(RANK_STATS_DOUBLES * sizeof(double), sizeof(struct rank_stats));
    assert_int_equal(offsetof(struct rank_stats, device_total) + sizeof(double), sizeof(struct rank_stats));
}

static void test_collect_copies_every_group(void **state) {
    (void)state;
    struct grid g;
    grid_init_single(&g);
    struct config cfg = small_config();
    struct trainer tr = {.cfg = &cfg, .grid = &g};
    for (int k = 0; k < GROUP_NUM; k++) {
        struct comm_counters *cc = &grid_group(&g, (enum grid_group)k)->counters;
        for (int j = 0; j < COLL_NUM_KINDS; j++) {
            cc->bytes[j] = 1000.0 * k + j;
            cc->calls[j] = 10 * k + j;
        }
        cc->seconds = 0.5 * k;
        cc->exposed_seconds = 0.25 * k;
    }
    struct rank_stats s;
    rank_stats_collect(&tr, &s);
    for (int k = 0; k < GROUP_NUM; k++) {
        for (int j = 0; j < COLL_NUM_KINDS; j++) {
            assert_true(s.comm[k].bytes[j] == 1000.0 * k + j);
            assert_true(s.comm[k].calls[j] == 10.0 * k + j);
        }
        assert_true(s.comm[k].seconds == 0.5 * k);
        assert_true(s.comm[k].exposed_seconds == 0.25 * k);
    }
}

/* The line after `after` (a unique substring) that starts with `name`. */
static const char *find_row(const char *text, const char *after, const char *name) {
    const char *p = strstr(text, after);
    if (!p) return NULL;
    char want[64];
    snprintf(want, sizeof want, "\n  %s ", name);
    return strstr(p, want);
}

static void test_report_shows_groups_with_traffic(void **state) {
    (void)state;
    struct grid g;
    grid_init_single(&g);
    struct config cfg = small_config();
    struct trainer tr = {.cfg = &cfg, .grid = &g, .train_seconds = 2.0};
    enum { N = 2, STEPS = 4 };
    struct rank_stats ranks[N] = {0};
    struct comm_theory th = theory_trainer_comm(&cfg, rank_place_dp(N, 0));
    for (int r = 0; r < N; r++) {
        struct rank_comm *dp = &ranks[r].comm[GROUP_DP];
        dp->bytes[COLL_ALL_REDUCE] = STEPS * th.all_reduce;
        dp->calls[COLL_ALL_REDUCE] = STEPS;
        dp->bytes[COLL_SCALAR] = STEPS * 8.0;
        dp->calls[COLL_SCALAR] = STEPS;
        dp->seconds = 0.4;
        dp->exposed_seconds = 0.1;
    }
    /* the tie pair: only rank 1 has sent and received, both maxed */
    struct rank_comm *tie1 = &ranks[1].comm[GROUP_TIE];
    tie1->bytes[COLL_SEND] = STEPS * 400.0;
    tie1->calls[COLL_SEND] = STEPS;
    tie1->bytes[COLL_RECV] = STEPS * 300.0;
    tie1->calls[COLL_RECV] = STEPS;
    tie1->bytes[COLL_ALL_REDUCE_MAX] = STEPS * 4.0;
    tie1->calls[COLL_ALL_REDUCE_MAX] = 2 * STEPS;
    ranks[0].comm[GROUP_TIE].seconds = 0.2;
    ranks[0].comm[GROUP_TIE].exposed_seconds = 0.2;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    report_comm(out, NULL, &tr, ranks, N, STEPS);
    fclose(out);

    /* dp as before: its kinds with theory, scalars, model total, ZeRO's line */
    assert_non_null(strstr(text, "bytes each rank sends (ring volumes), averaged over 4 steps"));
    assert_non_null(strstr(text, "  [dp] data parallel, 1 rank per group on rank 0\n"));
    const char *ar = find_row(text, "[dp]", "all-reduce");
    assert_non_null(ar);
    double m0, m1, theory;
    assert_int_equal(sscanf(ar, " all-reduce %lf %lf %lf", &m0, &m1, &theory), 3);
    assert_true(m0 == th.all_reduce && m1 == th.all_reduce);
    assert_true(theory == th.all_reduce);
    assert_non_null(find_row(text, "[dp]", "reduce-scatter"));
    assert_non_null(find_row(text, "[dp]", "all-gather"));
    assert_non_null(find_row(text, "[dp]", "scalars"));
    assert_non_null(find_row(text, "[dp]", "model total"));
    assert_non_null(strstr(text, "  ZeRO's formula with Psi: "));
    /* unused kinds and groups stay out */
    const char *tie = strstr(text, "  [tie] first and last pipeline stage");
    assert_non_null(tie);
    assert_null(strstr(text, "[tp]"));
    assert_null(strstr(text, "[pp]"));
    const char *dp_max = find_row(text, "[dp]", "all-reduce-max");
    assert_true(dp_max == NULL || dp_max > tie);
    /* tie rows: rank 0 sent nothing, rank 1 its payload per step; no theory */
    char name[32], dash[8];
    double t0, t1;
    const char *send = find_row(text, "[tie]", "send");
    assert_non_null(send);
    assert_int_equal(sscanf(send, " %31s %lf %lf %7s", name, &t0, &t1, dash), 4);
    assert_true(t0 == 0.0 && t1 == 400.0);
    assert_string_equal(dash, "-");
    const char *recv = find_row(text, "[tie]", "recv");
    assert_non_null(recv);
    assert_int_equal(sscanf(recv, " %31s %lf %lf %7s", name, &t0, &t1, dash), 4);
    assert_true(t0 == 0.0 && t1 == 300.0);
    assert_non_null(strstr(send, "1.0 calls per step; payload n x dtype size\n"));
    assert_non_null(strstr(recv, "1.0 calls per step; payload received, not sent\n"));
    const char *max = find_row(text, "[tie]", "all-reduce-max");
    assert_non_null(max);
    assert_int_equal(sscanf(max, " %31s %lf %lf %7s", name, &t0, &t1, dash), 4);
    assert_true(t0 == 0.0 && t1 == 4.0);
    assert_non_null(strstr(max, "2.0 calls per step\n")); /* the busiest rank's */
    assert_null(find_row(text, "[tie]", "all-reduce "));
    const char *total = find_row(text, "[tie]", "total sent");
    assert_non_null(total);
    assert_int_equal(sscanf(total, " total sent %lf %lf %7s", &t0, &t1, dash), 3);
    assert_true(t0 == 0.0 && t1 == 404.0); /* send + max, not recv */
    /* time: every group on rank 0, then per group */
    assert_non_null(strstr(text, "time in collectives: 150.0 ms per step on rank 0 (30% of the step): dp 100.0 ms, "
                                 "tie 50.0 ms\n"));
    /* the exposed part: what the compute thread waited */
    assert_non_null(strstr(text, "  exposed (compute thread waiting): 75.0 ms per step on rank 0 (15% of the step): "
                                 "dp 25.0 ms, tie 50.0 ms\n"));
    free(text);
}

/* Only dp in use: the time line is what it was, without a breakdown. */
static void test_report_dp_only_time_line(void **state) {
    (void)state;
    struct grid g;
    grid_init_single(&g);
    struct config cfg = small_config();
    struct trainer tr = {.cfg = &cfg, .grid = &g, .train_seconds = 1.0};
    struct rank_stats ranks[1] = {0};
    ranks[0].comm[GROUP_DP].calls[COLL_ALL_REDUCE] = 2;
    ranks[0].comm[GROUP_DP].seconds = 0.1;
    ranks[0].comm[GROUP_DP].exposed_seconds = 0.04;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    report_comm(out, NULL, &tr, ranks, 1, 2);
    fclose(out);
    assert_non_null(strstr(text, "  time in collectives: 50.0 ms per step on rank 0 (10% of the step)\n"));
    assert_non_null(strstr(text, "  exposed (compute thread waiting): 20.0 ms per step on rank 0 (4% of the step)\n"));
    assert_null(strstr(text, "[tie]"));
    free(text);
}

/* The JSON records: one per rank for each row the table shows, with that
 * rank's own bytes and calls per step and the theory (null where "-"). */
static void test_report_comm_json(void **state) {
    (void)state;
    struct grid g;
    grid_init_single(&g);
    struct config cfg = small_config();
    struct trainer tr = {.cfg = &cfg, .grid = &g, .train_seconds = 1.0};
    enum { N = 2, STEPS = 4 };
    struct rank_stats ranks[N] = {0};
    struct comm_theory th = theory_trainer_comm(&cfg, rank_place_dp(N, 0));
    for (int r = 0; r < N; r++) {
        ranks[r].comm[GROUP_DP].bytes[COLL_ALL_REDUCE] = STEPS * th.all_reduce;
        ranks[r].comm[GROUP_DP].calls[COLL_ALL_REDUCE] = 3 * STEPS;
    }
    ranks[1].comm[GROUP_TIE].bytes[COLL_SEND] = STEPS * 400.0;
    ranks[1].comm[GROUP_TIE].calls[COLL_SEND] = 2; /* half a call per step */
    char *text = NULL, *js = NULL;
    size_t len = 0, js_len = 0;
    FILE *out = open_memstream(&text, &len), *json = open_memstream(&js, &js_len);
    assert_non_null(out);
    assert_non_null(json);
    report_comm(out, json, &tr, ranks, N, STEPS);
    fclose(out);
    fclose(json);
    char want[256];
    for (int r = 0; r < N; r++) {
        snprintf(want, sizeof want,
                 "{\"type\":\"comm\",\"rank\":%d,\"group\":\"dp\",\"kind\":\"all-reduce\",\"bytes_per_step\":%.17g,"
                 "\"calls_per_step\":3,\"theory_bytes_per_step\":%.17g}\n",
                 r, th.all_reduce, th.all_reduce);
        assert_non_null(strstr(js, want));
    }
    assert_non_null(strstr(js, "{\"type\":\"comm\",\"rank\":0,\"group\":\"tie\",\"kind\":\"send\",\"bytes_per_step\":0,"
                               "\"calls_per_step\":0,\"theory_bytes_per_step\":null}\n"));
    assert_non_null(strstr(js, "{\"type\":\"comm\",\"rank\":1,\"group\":\"tie\",\"kind\":\"send\",\"bytes_per_step\":400,"
                               "\"calls_per_step\":0.5,\"theory_bytes_per_step\":null}\n"));
    /* dp: all-reduce, reduce-scatter, all-gather, scalars (always shown);
     * tie: send. Each on both ranks; no recv, no tp. */
    int lines = 0;
    for (const char *p = js; (p = strchr(p, '\n')); p++) lines++;
    assert_int_equal(lines, 5 * N);
    assert_null(strstr(js, "\"recv\""));
    assert_null(strstr(js, "\"tp\""));
    /* and the printed table is the same with or without JSON */
    char *plain = NULL;
    size_t plain_len = 0;
    out = open_memstream(&plain, &plain_len);
    assert_non_null(out);
    report_comm(out, NULL, &tr, ranks, N, STEPS);
    fclose(out);
    assert_string_equal(plain, text);
    free(plain);
    free(text);
    free(js);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_stats_are_doubles),
        cmocka_unit_test(test_collect_copies_every_group),
        cmocka_unit_test(test_report_shows_groups_with_traffic),
        cmocka_unit_test(test_report_dp_only_time_line),
        cmocka_unit_test(test_report_comm_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
