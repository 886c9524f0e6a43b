/* A GPT-2 shard (uint16 tokens) written atomically (temp file, fsync,
 * rename): the library's writer, shard_write_temp, then atomic_place
 * (include/data.h, include/fileio.h). Test code only: the tests and the
 * fuzz seeds write their corpora through it; data/prepare_main.c writes
 * both formats through the two calls itself. */
#ifndef SHARDLAB_TESTS_SHARD_WRITE_H
#define SHARDLAB_TESTS_SHARD_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"

static inline int shard_write(const char *path, const uint16_t *tokens, size_t n, char err[DATA_ERR_LEN]) {
    struct atomic_file af;
    return shard_write_temp(&af, path, SHARD_GPT2, tokens, n, err) == 0 ? atomic_place(&af, err) : -1;
}

#endif
