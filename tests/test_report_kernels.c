/* The kernel-time table (train/report/report_kernels.c) on a made-up profile: the
 * kinds with calls, per step, their share of the step, the profiled total
 * and the rest; a JSON record per kind; nothing at all without a profile
 * (the CPU build's runs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../train/report/report.h"

/* report_kernels' output into a string (caller frees). */
static char *printed(const struct trainer *tr, int steps, char **json_text) {
    char *text = NULL, *js = NULL;
    size_t n = 0, nj = 0;
    FILE *out = open_memstream(&text, &n), *json = open_memstream(&js, &nj);
    assert_non_null(out);
    assert_non_null(json);
    report_kernels(out, json, tr, steps);
    fclose(out);
    fclose(json);
    *json_text = js;
    return text;
}

static void test_table(void **state) {
    (void)state;
    static struct trainer tr; /* large: not on the stack */
    memset(&tr, 0, sizeof tr);
    snprintf(tr.dev.name, sizeof tr.dev.name, "test gpu");
    tr.train_seconds = 2.0; /* 4 steps of 0.5 s */
    tr.flops.profile[KERNEL_MATMUL_BWD] = (struct kernel_time){.seconds = 1.0, .calls = 68};
    tr.flops.profile[KERNEL_LAYERNORM_FWD] = (struct kernel_time){.seconds = 0.2, .calls = 36};
    char *js, *text = printed(&tr, 4, &js);
    assert_non_null(strstr(text, "test gpu"));
    assert_non_null(strstr(text, "  matmul backward             17.0     250.000    50.0%\n"));
    assert_non_null(strstr(text, "  layernorm forward            9.0      50.000    10.0%\n"));
    assert_null(strstr(text, "gelu")); /* no calls, no row */
    assert_non_null(strstr(text, "  kernels                              300.000    60.0%\n"));
    assert_non_null(strstr(text, "  the rest                             200.000    40.0%"));
    assert_non_null(strstr(js, "{\"type\":\"kernel\",\"rank\":0,\"kind\":\"matmul backward\",\"calls_per_step\":17.0,"
                               "\"ms_per_step\":250.000000}\n"));
    free(text);
    free(js);
}

static void test_nothing_without_a_profile(void **state) {
    (void)state;
    static struct trainer tr;
    memset(&tr, 0, sizeof tr);
    tr.train_seconds = 1.0;
    char *js, *text = printed(&tr, 3, &js);
    assert_string_equal(text, "");
    assert_string_equal(js, "");
    free(text);
    free(js);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_nothing_without_a_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
