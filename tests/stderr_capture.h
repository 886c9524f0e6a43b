/* For tests that check an error message: what a call writes to stderr,
 * captured in a temporary file between begin and end. Header-only. */
#ifndef SHARDLAB_TEST_STDERR_CAPTURE_H
#define SHARDLAB_TEST_STDERR_CAPTURE_H

#include <stdio.h>
#include <unistd.h>

struct stderr_capture {
    int saved_fd;
    FILE *file;
};

/* 0, or -1 (stderr untouched) when no temporary file could be made. */
static inline int stderr_capture_begin(struct stderr_capture *s) {
    fflush(stderr);
    s->saved_fd = -1;
    s->file = tmpfile();
    if (!s->file) return -1;
    s->saved_fd = dup(fileno(stderr));
    if (s->saved_fd < 0 || dup2(fileno(s->file), fileno(stderr)) < 0) {
        if (s->saved_fd >= 0) close(s->saved_fd);
        fclose(s->file);
        s->file = NULL;
        return -1;
    }
    return 0;
}

/* Restores stderr; text gets what was written (at most len - 1 chars),
 * "" after a failed begin. */
static inline void stderr_capture_end(struct stderr_capture *s, char *text, size_t len) {
    text[0] = '\0';
    if (!s->file) return;
    fflush(stderr);
    dup2(s->saved_fd, fileno(stderr));
    close(s->saved_fd);
    rewind(s->file);
    size_t got = fread(text, 1, len - 1, s->file);
    text[got] = '\0';
    fclose(s->file);
}

#endif
