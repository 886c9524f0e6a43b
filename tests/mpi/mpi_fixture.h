/* Shared by the multi-rank tests: collective assertions and the corpus
 * shard they train on. Header-only: each test is one program. */
#ifndef SHARDLAB_TEST_MPI_FIXTURE_H
#define SHARDLAB_TEST_MPI_FIXTURE_H

#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "data.h"
#include "../shard_write.h"

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

/* A scratch folder of this rank's, /tmp/shardlab_<test>_r<rank>_XXXXXX,
 * holding the corpus shard the test trains on (`bytes` of the bundled
 * text). Returns 0 or -1. */
static inline int scratch_open(char *dir, size_t dir_len, char *shard, size_t shard_len, const char *test, int rank,
                               size_t bytes) {
    snprintf(dir, dir_len, "/tmp/shardlab_%s_r%d_XXXXXX", test, rank);
    if (!mkdtemp(dir)) return -1;
    snprintf(shard, shard_len, "%s/train.bin", dir);
    return write_corpus_shard(shard, bytes);
}

/* Removes the folder and what is in it. Returns system()'s status. */
static inline int scratch_close(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

#endif
