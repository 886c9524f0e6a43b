/* What every harness shares. libFuzzer hands an input as bytes, while the
 * readers under test open a path: fuzz_input_path puts the bytes in an
 * anonymous in-memory file (memfd) and returns a path that opens it,
 * /proc/self/fd/N. Nothing touches the disk and nothing is left behind.
 * FUZZ_CHECK is the harnesses' assert: it stays on in every build and
 * aborts, so libFuzzer records the input as a crash. */
#ifndef SHARDLAB_FUZZ_INPUT_H
#define SHARDLAB_FUZZ_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FUZZ_CHECK(cond)                                                                \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);    \
            abort();                                                                    \
        }                                                                               \
    } while (0)

/* A failed call must leave a message: a NUL-terminated, non-empty string
 * inside its buffer (the harness fills the buffer with 'x' first). */
static inline void fuzz_check_message(const char *err, size_t len) {
    FUZZ_CHECK(memchr(err, '\0', len) != NULL);
    FUZZ_CHECK(err[0] != '\0');
}

static inline const char *fuzz_input_path(const uint8_t *data, size_t size) {
    /* One memfd per process, rewritten for every input: libFuzzer's entry
     * point takes no context, so the descriptor has to live here. */
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("shardlab-fuzz-input", 0);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0) {
        perror("ftruncate");
        abort();
    }
    for (size_t done = 0; done < size;) {
        ssize_t k = pwrite(fd, data + done, size - done, (off_t)done);
        if (k <= 0) {
            perror("pwrite");
            abort();
        }
        done += (size_t)k;
    }
    return path;
}

#endif
