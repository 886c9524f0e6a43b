/* The progress line: the ETA from the mean step time (the first step, a
 * warm-up, left out), its format for people, and the line shown as its
 * own line in a log and rewritten in place on a terminal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../train/measure/progress.h"

static void expect_eta(double seconds, const char *want) {
    char out[PROGRESS_ETA_LEN];
    progress_format_eta(seconds, out);
    if (strcmp(out, want) != 0) fail_msg("%.3f s -> \"%s\", expected \"%s\"", seconds, out, want);
}

static void test_format(void **state) {
    (void)state;
    expect_eta(0.0, "0s");
    expect_eta(12.0, "12s");
    expect_eta(12.4, "12s");
    expect_eta(59.5, "1m00s"); /* rounded to the second, then split */
    expect_eta(185.0, "3m05s");
    expect_eta(3599.0, "59m59s");
    expect_eta(3600.0, "1h00m");
    expect_eta(3725.0, "1h02m");
    expect_eta(86399.0, "23h59m");
    expect_eta(3 * 86400.0 + 4 * 3600.0 + 59.0, "3d04h");
    expect_eta(-1.0, "?");
    expect_eta(0.0 / 0.0, "?");
    expect_eta(1e300, "?");
}

static void test_eta_skips_the_first_step(void **state) {
    (void)state;
    struct progress p;
    progress_init(&p, false);
    assert_true(progress_eta_seconds(&p, 10) < 0); /* nothing timed */
    progress_step(&p, 5.0);                        /* the warm-up step */
    assert_true(progress_eta_seconds(&p, 10) < 0); /* no mean yet */
    progress_step(&p, 1.0);
    progress_step(&p, 2.0);
    assert_true(progress_eta_seconds(&p, 10) == 15.0); /* mean 1.5 s x 10 */
    assert_true(progress_eta_seconds(&p, 0) == 0.0);
}

/* What progress_show wrote to a temporary file. */
static char *shown(bool tty, const bool keep[], int n) {
    FILE *f = tmpfile();
    assert_non_null(f);
    struct progress p;
    progress_init(&p, tty);
    char line[32];
    for (int i = 0; i < n; i++) {
        snprintf(line, sizeof line, "step %d", i + 1);
        progress_show(&p, f, line, keep[i]);
    }
    progress_end_line(&p, f);
    long size = ftell(f);
    char *s = calloc(1, (size_t)size + 1);
    assert_non_null(s);
    rewind(f);
    assert_int_equal(fread(s, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    return s;
}

static void test_log_and_terminal(void **state) {
    (void)state;
    const bool keep[] = {false, true, false, false};
    char *log = shown(false, keep, 4), *tty = shown(true, keep, 4);
    assert_string_equal(log, "step 1\nstep 2\nstep 3\nstep 4\n");
    /* step 2 kept; step 4 ended by progress_end_line */
    assert_string_equal(tty, "\rstep 1\033[K\rstep 2\033[K\n\rstep 3\033[K\rstep 4\033[K\n");
    free(log), free(tty);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_eta_skips_the_first_step),
        cmocka_unit_test(test_log_and_terminal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
