/* Shared by the multi-rank tests: collective assertions and the corpus
 * shard they train on. Header-only: each test is one program. */
#ifndef SHARDLAB_TEST_MPI_FIXTURE_H
#define SHARDLAB_TEST_MPI_FIXTURE_H

#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "data.h"

/* true on every rank iff ok on every rank: asserts stay collective, so a
 * failure on one rank cannot leave the others waiting in a collective */
static inline bool all_ok(bool ok) {
    int mine = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all == 1;
}

/* The first `bytes` of the bundled corpus as a byte-token shard at path.
 * Tests run from the repository root. Returns 0 or -1. */
static inline int write_corpus_shard(const char *path, size_t bytes) {
    FILE *f = fopen("data/kjv.txt", "rb");
    if (!f) return -1;
    unsigned char *text = malloc(bytes);
    uint16_t *tok = malloc(bytes * sizeof *tok);
    size_t n = text && tok ? fread(text, 1, bytes, f) : 0;
    fclose(f);
    int rc = -1;
    if (n > 0) {
        tokenize_bytes(text, n, tok);
        char err[DATA_ERR_LEN];
        rc = shard_write(path, tok, n, err);
    }
    free(text);
    free(tok);
    return rc;
}

#endif
