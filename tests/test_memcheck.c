/* The memory check before allocation: available memory read from meminfo
 * and cgroup v1/v2 files (a fake root), the refusal's breakdown and levers
 * against the theory's own numbers, and a trainer refusing an oversized
 * config before it allocates anything. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../train/run/run.h"
#include "../train/theory/accounting.h"
#include "../train/run/run_memcheck.h"
#include "../train/report/report.h"
#include "grid_single.h"

static char ROOT[64];

static void put(const char *rel, const char *text) {
    char path[256], dir[256];
    snprintf(path, sizeof path, "%s/%s", ROOT, rel);
    for (char *p = path + strlen(ROOT) + 1; (p = strchr(p, '/')); p++) { /* mkdir -p */
        snprintf(dir, sizeof dir, "%.*s", (int)(p - path), path);
        mkdir(dir, 0700);
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state) {
    (void)state;
    snprintf(ROOT, sizeof ROOT, "/tmp/shardlab_test_memcheck_XXXXXX");
    return mkdtemp(ROOT) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", ROOT);
    return system(cmd);
}

static const char MEMINFO[] = "MemTotal:       24684092 kB\nMemFree:  100 kB\nMemAvailable:   8000000 kB\n";

/* No cgroup limit anywhere: MemAvailable alone. */
static void test_meminfo_only(void **s) {
    (void)s;
    put("a/proc/meminfo", MEMINFO);
    put("a/proc/self/cgroup", "0::/\n");
    put("a/sys/fs/cgroup/memory.max", "max\n");
    char root[128];
    snprintf(root, sizeof root, "%s/a", ROOT);
    struct mem_available a = memcheck_available(root);
    assert_true(a.meminfo == 8000000.0 * 1024);
    assert_true(a.cgroup < 0);
    assert_true(a.bytes == a.meminfo);
}

/* cgroup v2: the tightest of the group and its parent, the reclaimable
 * cache counted as room. */
static void test_cgroup_v2_nested(void **s) {
    (void)s;
    put("b/proc/meminfo", MEMINFO);
    put("b/proc/self/cgroup", "0::/job/rank\n");
    put("b/sys/fs/cgroup/memory.max", "max\n");
    put("b/sys/fs/cgroup/job/memory.max", "4000000000\n");
    put("b/sys/fs/cgroup/job/memory.current", "1000000000\n");
    put("b/sys/fs/cgroup/job/memory.stat", "anon 1\ninactive_file 200000000\nactive_file 5\n");
    put("b/sys/fs/cgroup/job/rank/memory.max", "6000000000\n");
    put("b/sys/fs/cgroup/job/rank/memory.current", "1000000000\n");
    char root[128];
    snprintf(root, sizeof root, "%s/b", ROOT);
    struct mem_available a = memcheck_available(root);
    assert_int_equal(a.cgroup_version, 2);
    assert_true(a.cgroup == 4000000000.0 - 1000000000.0 + 200000000.0); /* the parent is tighter */
    assert_true(a.bytes == a.cgroup);                                  /* and below MemAvailable */
}

/* cgroup v1's memory controller; its "no limit" value is ignored. */
static void test_cgroup_v1(void **s) {
    (void)s;
    put("c/proc/meminfo", MEMINFO);
    put("c/proc/self/cgroup", "5:cpuacct,cpu:/\n4:memory:/pa/x\n0::/\n");
    put("c/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put("c/sys/fs/cgroup/memory/pa/x/memory.limit_in_bytes", "2147483648\n");
    put("c/sys/fs/cgroup/memory/pa/x/memory.usage_in_bytes", "1073741824\n");
    put("c/sys/fs/cgroup/memory/pa/x/memory.stat", "cache 5\ntotal_inactive_file 1048576\n");
    char root[128];
    snprintf(root, sizeof root, "%s/c", ROOT);
    struct mem_available a = memcheck_available(root);
    assert_int_equal(a.cgroup_version, 1);
    assert_true(a.cgroup == 2147483648.0 - 1073741824.0 + 1048576.0);
    assert_true(a.bytes == a.cgroup);
    /* nothing readable: unknown, and the check is skipped */
    snprintf(root, sizeof root, "%s/none", ROOT);
    a = memcheck_available(root);
    assert_true(a.bytes < 0);
}

static void model_config(struct config *c) {
    config_defaults(c);
    c->n_layer = 4;
    c->d_model = 256;
    c->n_head = 4;
    c->seq_len = 64;
    c->vocab_size = 1000;
    c->micro_batch = 8;
    c->threads = 1;
}

static double need(const struct config *c, int N) { return theory_trainer_memory(c, rank_place_dp(N, 0)).total + RSS_LIBRARY_ALLOWANCE; }

/* "12.34 MiB" as the message writes it */
static void mib(double b, char out[32]) { snprintf(out, 32, "%.1f MiB", b / (1024.0 * 1024.0)); }

/* At the need: fits. One byte less: refused, with each category's bytes,
 * the total, and ZeRO-3 (the only lever below the budget here) marked as
 * fitting while the others are not. */
static void test_judge_breakdown_and_levers(void **s) {
    (void)s;
    struct config c;
    model_config(&c);
    char err[TRAINER_ERR_LEN] = "";
    double total = need(&c, 4);
    assert_int_equal(memcheck_judge(&c, 4, 0, total, "test", err, sizeof err), 0);
    assert_int_equal(memcheck_judge(&c, 4, 0, -1, "test", err, sizeof err), 0); /* unknown: no check */
    struct config z3 = c;
    z3.zero = 3;
    double budget = need(&z3, 4) + 1024; /* ZeRO-3 over 4 fits, nothing else alone does */
    assert_int_equal(memcheck_judge(&c, 4, 0, budget, "MemAvailable test", err, sizeof err), -1);
    char h[32], line[96];
    mib(total, h);
    snprintf(line, sizeof line, "this rank needs %s at start-up", h);
    assert_non_null(strstr(err, line));
    struct memory_need m = theory_trainer_memory(&c, rank_place_dp(4, 0));
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++) {
        if (m.bytes[k] < 1024 * 1024) continue; /* small ones print in KiB or B */
        mib(m.bytes[k], h);
        snprintf(line, sizeof line, "%s %s", mem_category_name((enum mem_category)k), h);
        assert_non_null(strstr(err, line));
    }
    assert_non_null(strstr(err, "libraries 64.0 MiB"));
    assert_non_null(strstr(err, "MemAvailable test"));
    mib(need(&z3, 4), h);
    snprintf(line, sizeof line, "--zero 3 over dp 4: %s (fits)", h);
    assert_non_null(strstr(err, line));
    struct config z1 = c;
    z1.zero = 1;
    mib(need(&z1, 4), h);
    snprintf(line, sizeof line, "--zero 1 over dp 4: %s (no)", h);
    assert_non_null(strstr(err, line));
    struct config o8 = c;
    o8.optimizer = OPTIM_ADAMW8BIT;
    mib(need(&o8, 4), h);
    snprintf(line, sizeof line, "--optimizer adamw8bit: %s (no)", h);
    assert_non_null(strstr(err, line));
    struct config af = c;
    af.optimizer = OPTIM_ADAFACTOR;
    assert_true(need(&af, 4) < need(&o8, 4)); /* n + m floats per matrix: less than a byte a parameter */
    mib(need(&af, 4), h);
    snprintf(line, sizeof line, "--optimizer adafactor (CPU): %s (no)", h);
    assert_non_null(strstr(err, line));
    assert_non_null(strstr(err, "--recompute full"));
    assert_non_null(strstr(err, "--micro_batch 1 (grad_accum x8 keeps the batch)"));
    assert_non_null(strstr(err, "all of these together"));
}

/* The micro-batch lever names the largest divisor of micro_batch that fits. */
static void test_judge_micro_batch(void **s) {
    (void)s;
    struct config c;
    model_config(&c);
    c.seq_len = 1024; /* activations dominate */
    struct config b2 = c;
    b2.micro_batch = 2;
    char err[TRAINER_ERR_LEN], h[32], line[96];
    assert_int_equal(memcheck_judge(&c, 1, 0, need(&b2, 1), "t", err, sizeof err), -1);
    mib(need(&b2, 1), h);
    snprintf(line, sizeof line, "--micro_batch 2 (grad_accum x4 keeps the batch): %s (fits)", h);
    assert_non_null(strstr(err, line));
    assert_null(strstr(err, "over dp")); /* one rank: no ZeRO lever */
    assert_non_null(strstr(err, "more ranks on more hosts"));
}

/* A model far beyond any machine is refused by trainer_open before the
 * engine allocates: nothing is tracked, the message has the breakdown. */
static void test_trainer_refuses_oversized(void **s) {
    (void)s;
    struct grid g;
    grid_init_single(&g);
    struct config c;
    config_defaults(&c);
    c.n_layer = 64;
    c.d_model = 16384;
    c.n_head = 128;
    c.seq_len = 64;
    c.val_data[0] = '\0';
    c.threads = 1;
    struct trainer tr;
    char err[TRAINER_ERR_LEN] = "";
    if (access(c.train_data, R_OK) != 0) skip(); /* make data */
    assert_int_equal(trainer_open(&tr, &c, &g, NULL, err), -1);
    assert_non_null(strstr(err, "not enough memory: this rank needs 3."));  /* 3.x TiB */
    assert_non_null(strstr(err, " TiB at start-up"));
    assert_non_null(strstr(err, "master "));
    assert_non_null(strstr(err, "--optimizer adamw8bit"));
    assert_non_null(strstr(err, "--force 1 allocates anyway"));
    assert_int_equal(tr.mem.peak_total, 0); /* refused before allocating */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_meminfo_only),
        cmocka_unit_test(test_cgroup_v2_nested),
        cmocka_unit_test(test_cgroup_v1),
        cmocka_unit_test(test_judge_breakdown_and_levers),
        cmocka_unit_test(test_judge_micro_batch),
        cmocka_unit_test(test_trainer_refuses_oversized),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
