/* The run configuration's error messages: unknown keys (with the list of
 * valid ones), bad numbers, bad choices (naming the choices), and config
 * files: file:line, a directory, lines longer than any buffer, NUL bytes.
 * A refused value changes nothing. */
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

static void test_unknown_key(void **state) {
    (void)state;
    struct config c, ref;
    config_defaults(&c);
    config_defaults(&ref);
    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(config_set(&c, "n_layers", "3", err), -1);
    assert_non_null(strstr(err, "unknown key"));
    assert_non_null(strstr(err, "'n_layers'"));
    assert_non_null(strstr(err, "n_layer,")); /* the list of valid keys */
    assert_non_null(strstr(err, "d_model"));
    assert_non_null(strstr(err, "micro_batch"));
    assert_memory_equal(&c, &ref, sizeof c); /* nothing changed */

    /* A very long unknown key must not overflow err. */
    char longkey[2000];
    memset(longkey, 'x', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    assert_int_equal(config_set(&c, longkey, "1", err), -1);
    assert_true(strlen(err) < CONFIG_ERR_LEN);
    assert_non_null(strstr(err, "unknown key"));

    /* '-' maps to '_' for every key, not only on the command line. */
    assert_int_equal(config_set(&c, "micro-batch", "7", err), 0);
    assert_int_equal(c.micro_batch, 7);
}

static void test_file_errors_name_file_and_line(void **state) {
    (void)state;
    char path[64], want[128];
    write_temp(path, "# a comment\n\nn_layer = 3   # trailing comment\nn_laer = 4\nd_model = 96\n");
    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(config_load_file(&c, path, err), -1);
    snprintf(want, sizeof want, "%s:4:", path);
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(err, "unknown key"));
    assert_non_null(strstr(err, "n_laer"));
    assert_int_equal(c.n_layer, 3);  /* lines before the error applied */
    assert_int_equal(c.d_model, 64); /* loading stops at the error */
    unlink(path);

    write_temp(path, "n_layer = 3\r\nd_model 96\n");
    config_defaults(&c);
    assert_int_equal(config_load_file(&c, path, err), -1);
    snprintf(want, sizeof want, "%s:2:", path);
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(err, "key = value"));
    assert_int_equal(c.n_layer, 3); /* CRLF line endings are fine */
    unlink(path);

    write_temp(path, "\n\nsteps = abc\n");
    config_defaults(&c);
    assert_int_equal(config_load_file(&c, path, err), -1);
    snprintf(want, sizeof want, "%s:3:", path);
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(err, "steps"));
    assert_non_null(strstr(err, "abc"));
    unlink(path);

    config_defaults(&c);
    assert_int_equal(config_load_file(&c, "/nonexistent/dir/x.conf", err), -1);
    assert_non_null(strstr(err, "/nonexistent/dir/x.conf"));
}

/* A directory used to read as an empty config (defaults, silently). */
static void test_directory_config(void **state) {
    (void)state;
    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(config_load_file(&c, "/tmp", err), -1);
    assert_non_null(strstr(err, "config /tmp is a directory"));
}

/* A line is read whole, however long: a comment of more than 1023
 * characters stays a comment (a fixed 1024-byte buffer parsed its tail as
 * a line of its own, so this one set steps = 7), and a NUL byte is refused
 * with the line's number. */
static void test_long_lines_and_nul(void **state) {
    (void)state;
    char text[1100], path[64];
    text[0] = '#';
    memset(text + 1, 'x', 1022);
    snprintf(text + 1023, sizeof text - 1023, "steps = 7\nn_layer = 5\n");
    write_temp(path, text);
    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN] = "";
    if (config_load_file(&c, path, err) != 0) fail_msg("%s", err);
    assert_int_equal(c.steps, 100);
    assert_int_equal(c.n_layer, 5);
    unlink(path);

    static const char with_nul[] = "n_layer = 3\nsteps = 5\0 = 9\nd_model = 32\n";
    FILE *f = fmemopen((void *)with_nul, sizeof with_nul - 1, "r");
    assert_non_null(f);
    config_defaults(&c);
    assert_int_equal(config_load_stream(&c, f, "mem.conf", err), -1);
    fclose(f);
    assert_non_null(strstr(err, "mem.conf:2: NUL byte in the line"));
    assert_int_equal(c.n_layer, 3);
    assert_int_equal(c.steps, 100);
}

static void expect_bad(const char *key, const char *value) {
    struct config c, ref;
    config_defaults(&c);
    config_defaults(&ref);
    char err[CONFIG_ERR_LEN] = "";
    if (config_set(&c, key, value, err) != -1) fail_msg("%s = '%s' was accepted", key, value);
    if (!strstr(err, key)) fail_msg("%s = '%s': error does not name the key: %s", key, value, err);
    assert_memory_equal(&c, &ref, sizeof c);
}

static void test_bad_numbers(void **state) {
    (void)state;
    expect_bad("steps", "abc");
    expect_bad("steps", "-1");
    expect_bad("steps", "3.5");
    expect_bad("steps", "");
    expect_bad("steps", "10x");
    expect_bad("steps", "99999999999999999999"); /* overflows long long */
    expect_bad("steps", "3000000000");           /* overflows int */
    expect_bad("n_layer", "0");
    expect_bad("n_layer", "1e2");
    expect_bad("micro_batch", "3.5");
    expect_bad("lr", "1e999");
    expect_bad("lr", "abc");
    expect_bad("lr", "nan");
    expect_bad("lr", "inf");
    expect_bad("lr", "-0.1");
    expect_bad("min_lr_frac", "1.5");
    expect_bad("beta2", "1");
    expect_bad("peak_flops", "1e999");
    expect_bad("seed", "-5");
    expect_bad("shuffle", "yes");
    expect_bad("shuffle", "2");

    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(config_set(&c, "steps", "0", err), 0);
    assert_int_equal(c.steps, 0);
    assert_int_equal(config_set(&c, "steps", "2147483647", err), 0);
    assert_int_equal(c.steps, 2147483647);
    assert_int_equal(config_set(&c, "lr", "6e-4", err), 0);
    assert_true(c.lr == 6e-4f);
    assert_int_equal(config_set(&c, "seed", "1234567890123", err), 0);
    assert_int_equal(c.seed, 1234567890123LL);
    assert_int_equal(config_set(&c, "shuffle", "0", err), 0);
    assert_false(c.shuffle);
    assert_int_equal(config_set(&c, "peak_flops", "9.89e14", err), 0);
    assert_true(c.peak_flops == 9.89e14);
}

/* Ranges that keep a state finite (issue 39): eps, lr and init_std exclude
 * 0 (also -0 and values that round to 0 as a float), each refusal says
 * why, --help gives eps's reason, and lr x weight_decay stays <= 1. */
static void expect_refused_why(const char *key, const char *value, const char *why) {
    expect_bad(key, value);
    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(config_set(&c, key, value, err), -1);
    if (!strstr(err, why)) fail_msg("%s = '%s': the refusal does not say why (%s): %s", key, value, why, err);
}

static void test_ranges_keep_the_state_finite(void **state) {
    (void)state;
    const char *nan_why = "0/0 = NaN", *nothing = "nothing trains";
    expect_refused_why("eps", "0", nan_why);
    expect_refused_why("eps", "-0", nan_why);
    expect_refused_why("eps", "1e-46", nan_why); /* rounds to 0 as a float */
    expect_bad("eps", "1.5");
    expect_refused_why("lr", "0", nothing);
    expect_refused_why("lr", "-0", nothing);
    expect_refused_why("lr", "1e-46", nothing);
    expect_refused_why("init_std", "0", nothing);
    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(config_set(&c, "eps", "1", err), 0);
    assert_int_equal(config_set(&c, "lr", "1e-30", err), 0);
    assert_int_equal(config_set(&c, "init_std", "1e-6", err), 0);

    char *help = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&help, &len);
    config_print_help(f, "train", false);
    fclose(f);
    const char *eps = strstr(help, "--eps ");
    assert_non_null(eps);
    const char *eol = strchr(eps, '\n'), *why = strstr(eps, "in (0, 1]");
    assert_true(why && why < eol && strstr(eps, nan_why) < eol);
    free(help);

    config_defaults(&c);
    assert_int_equal(config_set(&c, "lr", "10", err), 0);
    assert_int_equal(config_set(&c, "weight_decay", "0.2", err), 0);
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "lr 10 x weight_decay 0.2 = 2"));
    assert_non_null(strstr(err, "grow without bound"));
    assert_int_equal(config_set(&c, "weight_decay", "0.1", err), 0);
    assert_int_equal(config_validate(&c, err), 0);
}

/* A config that opens with a UTF-8 byte-order mark loads: the mark is
 * not part of the first key (it read as an unknown key with invisible
 * bytes); one anywhere else is still an error. */
static void test_utf8_bom(void **state) {
    (void)state;
    char path[64];
    write_temp(path, "\xEF\xBB\xBFsteps = 7\nn_layer = 3\n");
    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(config_load_file(&c, path, err), 0);
    assert_int_equal(c.steps, 7);
    assert_int_equal(c.n_layer, 3);
    unlink(path);
    write_temp(path, "steps = 7\n\xEF\xBB\xBFn_layer = 3\n");
    config_defaults(&c);
    assert_int_equal(config_load_file(&c, path, err), -1);
    assert_non_null(strstr(err, ":2: unknown key"));
    unlink(path);
}

static void test_choice_keys(void **state) {
    (void)state;
    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(config_set(&c, "param_dtype", "fp16", err), -1);
    assert_non_null(strstr(err, "param_dtype"));
    assert_non_null(strstr(err, "fp16"));
    assert_non_null(strstr(err, "fp32"));
    assert_non_null(strstr(err, "bf16"));
    assert_int_equal(c.param_dtype, DTYPE_BF16);

    assert_int_equal(config_set(&c, "lr_schedule", "linear", err), -1);
    assert_non_null(strstr(err, "cosine"));
    assert_non_null(strstr(err, "constant"));
    assert_int_equal(config_set(&c, "rounding", "Stochastic", err), -1); /* case matters */
    assert_non_null(strstr(err, "stochastic"));
    assert_int_equal(config_set(&c, "arch", "", err), -1);
    assert_non_null(strstr(err, "gpt2"));
    assert_non_null(strstr(err, "llama"));

    assert_int_equal(config_set(&c, "param_dtype", "fp32", err), 0);
    assert_int_equal(c.param_dtype, DTYPE_FP32);
    assert_int_equal(config_set(&c, "grad_dtype", "fp32", err), 0);
    assert_int_equal(c.grad_dtype, DTYPE_FP32);
    assert_int_equal(config_set(&c, "rounding", "stochastic", err), 0);
    assert_int_equal(c.rounding, ROUND_STOCHASTIC);
    assert_int_equal(config_set(&c, "lr_schedule", "constant", err), 0);
    assert_int_equal(c.lr_schedule, LR_CONSTANT);
    assert_int_equal(config_set(&c, "decay_targets", "all", err), 0);
    assert_int_equal(c.decay_targets, DECAY_ALL);
    assert_int_equal(config_set(&c, "arch", "llama", err), 0);
    assert_int_equal(c.arch, ARCH_LLAMA);
}

/* A key set twice in one file: the later line would win without a word;
 * the error names both lines. */
static void test_key_twice_in_a_file(void **state) {
    (void)state;
    char path[64], want[128];
    write_temp(path, "steps = 3\nlr = 0.1\nsteps = 4\n");
    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(config_load_file(&c, path, err), -1);
    snprintf(want, sizeof want, "%s:3: steps is set twice, on lines 1 and 3", path);
    if (!strstr(err, want)) fail_msg("%s", err);
    assert_int_equal(c.steps, 3);
    unlink(path);
    write_temp(path, "micro_batch = 3\nmicro-batch = 4\n"); /* one key, two spellings */
    config_defaults(&c);
    assert_int_equal(config_load_file(&c, path, err), -1);
    assert_non_null(strstr(err, "micro_batch is set twice, on lines 1 and 2"));
    unlink(path);
}

/* Bytes of a garbage file that would drive the terminal are shown escaped. */
static void test_control_bytes_escaped(void **state) {
    (void)state;
    char path[64];
    write_temp(path, "\x1b[2J\x1b]0;pwned\x07\n");
    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(config_load_file(&c, path, err), -1);
    unlink(path);
    printf("  %s\n", err);
    assert_null(strchr(err, '\x1b'));
    assert_null(strchr(err, '\x07'));
    assert_non_null(strstr(err, "got '\\x1b[2J\\x1b]0;pwned\\x07'"));
    assert_int_equal(config_set(&c, "steps", "1\x1b[31m", err), -1);
    assert_null(strchr(err, '\x1b'));
    assert_int_equal(config_set(&c, "param_dtype", "\x1b", err), -1);
    assert_null(strchr(err, '\x1b'));
    assert_int_equal(config_set(&c, "\x1bkey", "1", err), -1);
    assert_null(strchr(err, '\x1b'));
}

/* Integer keys' ranges print as integers, not 2.14748e+09. */
static void test_integer_ranges(void **state) {
    (void)state;
    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(config_set(&c, "steps", "-1", err), -1);
    assert_non_null(strstr(err, "expected an integer in [0, 2147483647]"));
    assert_int_equal(config_set(&c, "vocab_size", "1", err), -1);
    assert_non_null(strstr(err, "[2, 1048576]"));
    assert_int_equal(config_set(&c, "lr", "11", err), -1);
    assert_non_null(strstr(err, "expected a number in (0, 10]"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_key),
        cmocka_unit_test(test_file_errors_name_file_and_line),
        cmocka_unit_test(test_directory_config),
        cmocka_unit_test(test_long_lines_and_nul),
        cmocka_unit_test(test_bad_numbers),
        cmocka_unit_test(test_ranges_keep_the_state_finite),
        cmocka_unit_test(test_utf8_bom),
        cmocka_unit_test(test_choice_keys),
        cmocka_unit_test(test_key_twice_in_a_file),
        cmocka_unit_test(test_control_bytes_escaped),
        cmocka_unit_test(test_integer_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
