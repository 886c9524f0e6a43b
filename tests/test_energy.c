/* The energy meters (train/measure/energy.h) on a fake powercap tree: a temp
 * directory laid out as Linux's /sys/class/powercap (intel-rapl:N zones,
 * name, energy_uj, max_energy_range_uj). Which zones count (packages and
 * their DRAM, not core, uncore, psys or the MMIO copy), joules from the
 * counters' deltas, the wrap past max_energy_range_uj, and "not
 * available" with the reason for a missing tree, no package zone, an
 * unreadable or garbled counter, a missing range and a counter that
 * disappears mid-run. NVML: whatever this host has, the meter either
 * opens or says why. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "../train/measure/energy.h"

/* |got - want| <= tol (this cmocka has no double assertion) */
#define assert_near(got, want, tol) assert_true(fabs((got) - (want)) <= (tol))

struct tree {
    char root[64];
};

static void put(const struct tree *t, const char *zone, const char *file, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", t->root, zone);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", t->root, zone, file);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A zone with its name, counter and range (the sysfs files end in "\n"). */
static void zone(const struct tree *t, const char *dir, const char *name, unsigned long long uj,
                 unsigned long long range) {
    char v[32];
    put(t, dir, "name", name);
    snprintf(v, sizeof v, "%llu\n", uj);
    put(t, dir, "energy_uj", v);
    snprintf(v, sizeof v, "%llu\n", range);
    put(t, dir, "max_energy_range_uj", v);
}

static void counter(const struct tree *t, const char *dir, unsigned long long uj) {
    char v[32];
    snprintf(v, sizeof v, "%llu\n", uj);
    put(t, dir, "energy_uj", v);
}

static int setup(void **state) {
    struct tree *t = calloc(1, sizeof *t);
    snprintf(t->root, sizeof t->root, "/tmp/shardlab_powercap_XXXXXX");
    assert_non_null(mkdtemp(t->root));
    *state = t;
    return 0;
}

static int teardown(void **state) {
    struct tree *t = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->root);
    assert_int_equal(system(cmd), 0);
    free(t);
    return 0;
}

enum { RANGE = 262143328850ULL }; /* a Xeon package's max_energy_range_uj */

/* Two packages with core and DRAM subzones, a psys zone and the MMIO
 * interface's copy of package 0: the packages and DRAM count, the rest
 * would count them again. */
static void test_zones_and_joules(void **state) {
    struct tree *t = *state;
    zone(t, "intel-rapl:0", "package-0\n", 1000000, RANGE);
    zone(t, "intel-rapl:0:0", "core\n", 500, RANGE);
    zone(t, "intel-rapl:0:1", "dram\n", 2000000, RANGE);
    zone(t, "intel-rapl:1", "package-1\n", 3000000, RANGE);
    zone(t, "intel-rapl:2", "psys\n", 9000000, RANGE);
    zone(t, "intel-rapl-mmio:0", "package-0\n", 1000000, RANGE);
    put(t, "intel-rapl", "enabled", "1\n"); /* the control type's own folder */
    struct energy_meter m;
    assert_int_equal(energy_open_rapl(&m, t->root), 0);
    assert_true(energy_available(&m));
    assert_int_equal(m.n, 3);
    assert_string_equal(m.what, "RAPL package-0, dram, package-1");
    assert_true(m.joules == 0.0);
    counter(t, "intel-rapl:0", 1000000 + 40000000);  /* 40 J */
    counter(t, "intel-rapl:0:0", 500 + 99000000);    /* core: inside the package's count */
    counter(t, "intel-rapl:0:1", 2000000 + 5000000); /* 5 J */
    counter(t, "intel-rapl:1", 3000000 + 35000000);  /* 35 J */
    counter(t, "intel-rapl:2", 9000000 + 77000000);  /* psys: not counted */
    assert_int_equal(energy_read(&m), 0);
    assert_near(m.joules, 80.0, 1e-9);
    assert_int_equal(energy_read(&m), 0); /* nothing moved: nothing added */
    assert_near(m.joules, 80.0, 1e-9);
    energy_close(&m);
}

/* The counter wraps to 0 past max_energy_range_uj: (range - last) + now. */
static void test_wrap_around(void **state) {
    struct tree *t = *state;
    zone(t, "intel-rapl:0", "package-0\n", 900000, 1000000);
    struct energy_meter m;
    assert_int_equal(energy_open_rapl(&m, t->root), 0);
    counter(t, "intel-rapl:0", 100000);
    assert_int_equal(energy_read(&m), 0);
    assert_near(m.joules, 0.2, 1e-12);
    counter(t, "intel-rapl:0", 400000);
    assert_int_equal(energy_read(&m), 0);
    assert_near(m.joules, 0.5, 1e-12);
    assert_true(energy_counter_delta(10, 25, 100) == 15);
    assert_true(energy_counter_delta(90, 5, 100) == 15);
    assert_true(energy_counter_delta(RANGE - 1, 0, RANGE) == 1);
    energy_close(&m);
}

/* Each way the tree can fall short: not available, and the reason names
 * the file and the error. */
static void test_not_available(void **state) {
    struct tree *t = *state;
    struct energy_meter m;
    char missing[128];
    snprintf(missing, sizeof missing, "%s/none", t->root);
    assert_int_equal(energy_open_rapl(&m, missing), -1);
    assert_false(energy_available(&m));
    assert_non_null(strstr(m.why, "/none: No such file or directory"));

    assert_int_equal(energy_open_rapl(&m, t->root), -1); /* an empty tree */
    assert_non_null(strstr(m.why, "no RAPL package zone"));
    zone(t, "intel-rapl:0", "psys\n", 1, RANGE);
    assert_int_equal(energy_open_rapl(&m, t->root), -1); /* psys alone is not a package */
    assert_non_null(strstr(m.why, "no RAPL package zone"));

    zone(t, "intel-rapl:1", "package-0\n", 1, RANGE);
    char path[256];
    snprintf(path, sizeof path, "%s/intel-rapl:1/energy_uj", t->root);
    unlink(path);
    assert_int_equal(mkdir(path, 0755), 0); /* unreadable as a file, for root too */
    assert_int_equal(energy_open_rapl(&m, t->root), -1);
    assert_non_null(strstr(m.why, "intel-rapl:1/energy_uj: Is a directory"));
    rmdir(path);

    put(t, "intel-rapl:1", "energy_uj", "n/a\n");
    assert_int_equal(energy_open_rapl(&m, t->root), -1);
    assert_non_null(strstr(m.why, "intel-rapl:1/energy_uj: not a counter"));

    counter(t, "intel-rapl:1", 5);
    snprintf(path, sizeof path, "%s/intel-rapl:1/max_energy_range_uj", t->root);
    unlink(path);
    assert_int_equal(energy_open_rapl(&m, t->root), -1);
    assert_non_null(strstr(m.why, "intel-rapl:1/max_energy_range_uj: No such file or directory"));
}

/* A counter that goes away, or reads past its range, mid-run: the meter
 * turns off with the reason and keeps the joules it had. */
static void test_fails_mid_run(void **state) {
    struct tree *t = *state;
    zone(t, "intel-rapl:0", "package-0\n", 0, 1000000);
    struct energy_meter m;
    assert_int_equal(energy_open_rapl(&m, t->root), 0);
    counter(t, "intel-rapl:0", 250000);
    assert_int_equal(energy_read(&m), 0);
    counter(t, "intel-rapl:0", 2000000);
    assert_int_equal(energy_read(&m), -1);
    assert_false(energy_available(&m));
    assert_non_null(strstr(m.why, "a value past max_energy_range_uj"));
    assert_near(m.joules, 0.25, 1e-12);
    assert_int_equal(energy_read(&m), -1); /* stays off */

    assert_int_equal(energy_open_rapl(&m, t->root), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/intel-rapl:0/energy_uj", t->root);
    unlink(path);
    assert_int_equal(energy_read(&m), -1);
    assert_non_null(strstr(m.why, "intel-rapl:0/energy_uj: No such file or directory"));
}

/* NVML: on a host with the driver and a GPU at that bus id the meter
 * opens; elsewhere (this CPU host, CI) it says which step failed. */
static void test_nvml_opens_or_says_why(void **state) {
    (void)state;
    struct energy_meter m;
    int rc = energy_open_nvml(&m, "0000:00:00.0");
    if (rc == 0) {
        assert_int_equal(m.source, ENERGY_NVML);
        assert_int_equal(energy_read(&m), 0);
    } else {
        assert_false(energy_available(&m));
        assert_true(strstr(m.why, "libnvidia-ml.so.1") || strstr(m.why, "nvmlInit") || strstr(m.why, "NVML finds no GPU") ||
                    strstr(m.why, "nvmlDeviceGetTotalEnergyConsumption"));
        assert_null(m.lib);
    }
    energy_close(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_zones_and_joules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrap_around, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_available, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fails_mid_run, setup, teardown),
        cmocka_unit_test(test_nvml_opens_or_says_why),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
