/* The run configuration from the command line: dash/underscore keys,
 * the order of --config and the other flags (the command line wins),
 * --help, and malformed argv. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../train/config/config.h"
#include "config_fixture.h"

/* argv for config_parse_args from a NULL-terminated list (argv[0] added). */
static int parse(struct config *c, bool *help, char err[CONFIG_ERR_LEN], ...) {
    char *argv[32] = {"train"};
    int argc = 1;
    va_list ap;
    va_start(ap, err);
    for (char *a; (a = va_arg(ap, char *));) {
        assert_true(argc < 31);
        argv[argc++] = a;
    }
    va_end(ap);
    argv[argc] = NULL;
    return config_parse_args(c, argc, argv, help, err);
}

static void test_dash_and_underscore_flags(void **state) {
    (void)state;
    struct config c;
    bool help = true;
    char err[CONFIG_ERR_LEN] = "";
    config_defaults(&c);
    assert_int_equal(parse(&c, &help, err, "--init-from", "x", NULL), 0);
    assert_false(help);
    assert_string_equal(c.init_from, "x");
    config_defaults(&c);
    assert_int_equal(parse(&c, &help, err, "--init_from", "y", NULL), 0);
    assert_string_equal(c.init_from, "y");
    config_defaults(&c);
    assert_int_equal(parse(&c, &help, err, "--save-state-every", "5", "--param-dtype", "fp32", NULL), 0);
    assert_int_equal(c.save_state_every, 5);
    assert_int_equal(c.param_dtype, DTYPE_FP32);
    /* unknown flags are errors that name the flag */
    assert_int_equal(parse(&c, &help, err, "--init-frm", "x", NULL), -1);
    assert_non_null(strstr(err, "unknown key"));
    assert_non_null(strstr(err, "init-frm"));
}

static void test_command_line_overrides_file(void **state) {
    (void)state;
    char path[64];
    write_temp(path, "n_layer = 6\nlr = 0.005\nsteps = 40\n");
    struct config c;
    bool help;
    char err[CONFIG_ERR_LEN] = "";

    config_defaults(&c); /* --config first */
    assert_int_equal(parse(&c, &help, err, "--config", path, "--n_layer", "3", NULL), 0);
    assert_int_equal(c.n_layer, 3);
    assert_true(c.lr == 0.005f);
    assert_int_equal(c.steps, 40);

    config_defaults(&c); /* --config last: the command line still wins */
    assert_int_equal(parse(&c, &help, err, "--n_layer", "3", "--steps", "7", "--config", path, NULL), 0);
    assert_int_equal(c.n_layer, 3);
    assert_int_equal(c.steps, 7);
    assert_true(c.lr == 0.005f);

    config_defaults(&c); /* in between */
    assert_int_equal(parse(&c, &help, err, "--lr", "0.25", "--config", path, "--n-layer", "9", NULL), 0);
    assert_int_equal(c.n_layer, 9);
    assert_true(c.lr == 0.25f);
    assert_int_equal(c.steps, 40);

    config_defaults(&c); /* repeated flags: the last one wins */
    assert_int_equal(parse(&c, &help, err, "--steps", "1", "--steps", "2", NULL), 0);
    assert_int_equal(c.steps, 2);

    config_defaults(&c); /* a bad file is reported through the command line */
    assert_int_equal(parse(&c, &help, err, "--config", "/nonexistent/a.conf", NULL), -1);
    assert_non_null(strstr(err, "/nonexistent/a.conf"));
    unlink(path);
}

static void test_help(void **state) {
    (void)state;
    struct config c, ref;
    config_defaults(&ref);
    bool help = false;
    char err[CONFIG_ERR_LEN] = "";
    config_defaults(&c);
    assert_int_equal(parse(&c, &help, err, "--help", NULL), 0);
    assert_true(help);
    help = false;
    assert_int_equal(parse(&c, &help, err, "--steps", "5", "-h", NULL), 0);
    assert_true(help);
    assert_memory_equal(&c, &ref, sizeof c); /* --help applies nothing */
    help = true;
    assert_int_equal(parse(&c, &help, err, NULL), 0);
    assert_false(help);
    assert_memory_equal(&c, &ref, sizeof c);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    config_print_help(f, "train", false);
    fclose(f);
    assert_non_null(strstr(buf, "usage: train"));
    assert_non_null(strstr(buf, "--n_layer"));
    assert_non_null(strstr(buf, "--peak_flops"));
    assert_non_null(strstr(buf, "{fp32|bf16}"));
    free(buf);
}

static void test_malformed_argv(void **state) {
    (void)state;
    struct config c;
    bool help;
    char err[CONFIG_ERR_LEN] = "";
    config_defaults(&c);
    assert_int_equal(parse(&c, &help, err, "--steps", "5", "--lr", NULL), -1);
    assert_non_null(strstr(err, "--lr"));
    assert_non_null(strstr(err, "needs a value"));
    assert_int_equal(parse(&c, &help, err, "--config", NULL), -1);
    assert_non_null(strstr(err, "--config"));
    assert_int_equal(parse(&c, &help, err, "extra", NULL), -1);
    assert_non_null(strstr(err, "extra"));
    assert_int_equal(parse(&c, &help, err, "--steps", "5", "extra", "6", NULL), -1);
    assert_non_null(strstr(err, "extra"));
    assert_int_equal(parse(&c, &help, err, "-steps", "5", NULL), -1);
    assert_int_equal(parse(&c, &help, err, "--steps", "--lr", NULL), -1); /* "--lr" is not a number */
    assert_non_null(strstr(err, "steps"));
}

/* --key=value is one argument, beside --key value, --config included. */
static void test_key_equals_value(void **state) {
    (void)state;
    char path[64];
    write_temp(path, "n_layer = 6\n");
    struct config c;
    bool help;
    char err[CONFIG_ERR_LEN] = "";
    config_defaults(&c);
    char conf[80];
    snprintf(conf, sizeof conf, "--config=%s", path);
    if (parse(&c, &help, err, "--steps=2", "--lr", "0.01", "--sample-prompt=a=b", conf, NULL) != 0) fail_msg("%s", err);
    unlink(path);
    assert_int_equal(c.steps, 2);
    assert_true(c.lr == 0.01f);
    assert_string_equal(c.sample_prompt, "a=b");
    assert_int_equal(c.n_layer, 6);
    assert_int_equal(parse(&c, &help, err, "--steps=", NULL), -1); /* an empty value is still a bad number */
    assert_non_null(strstr(err, "for steps"));
    assert_int_equal(parse(&c, &help, err, "--stepz=3", NULL), -1);
    assert_non_null(strstr(err, "'stepz'"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dash_and_underscore_flags),
        cmocka_unit_test(test_command_line_overrides_file),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_malformed_argv),
        cmocka_unit_test(test_key_equals_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
