/* Shared by the config tests (test_config_errors.c, test_config_args.c;
 * one program each): a temp file holding a config's text. Header-only:
 * the test includes cmocka first. */
#ifndef SHARDLAB_TEST_CONFIG_FIXTURE_H
#define SHARDLAB_TEST_CONFIG_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

/* A temp file holding `text`; the caller unlinks it. */
static inline void write_temp(char path[64], const char *text) {
    snprintf(path, 64, "/tmp/test_config.XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

#endif
