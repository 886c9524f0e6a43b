/* llm.c token shards: a 256-int32 header (magic, version, token count, the
 * rest zero) followed by the tokens as uint16. Both are stored in the host's
 * byte order, as llm.c does; every machine we target is little-endian. */
#include "data.h"
#include "crc32c.h"
#include "fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shard files are little-endian; a big-endian host would need byte swapping here"
#endif

enum {
    SHARD_HEADER_BYTES = SHARD_HEADER_INTS * (int)sizeof(int32_t),
    /* tokens read, checked and checksummed per piece, while the piece is in cache */
    SHARD_READ_TOKENS = 1 << 19
};

/* Checks the header against the file size; on success *n is the token count. */
static int check_header(const char *path, const int32_t *header, long long file_bytes, size_t *n,
                        char err[DATA_ERR_LEN]) {
    if (header[0] != SHARD_MAGIC) {
        snprintf(err, DATA_ERR_LEN, "%.300s: bad magic %d (expected %d): not a token shard", path,
                 (int)header[0], SHARD_MAGIC);
        return -1;
    }
    if (header[1] != SHARD_VERSION) {
        snprintf(err, DATA_ERR_LEN, "%.300s: unsupported version %d (expected %d)", path, (int)header[1],
                 SHARD_VERSION);
        return -1;
    }
    if (header[2] < 1) {
        snprintf(err, DATA_ERR_LEN, "%.300s: header declares %d tokens; a shard needs at least 1", path,
                 (int)header[2]);
        return -1;
    }
    long long want = SHARD_HEADER_BYTES + 2LL * header[2];
    if (file_bytes != want) {
        snprintf(err, DATA_ERR_LEN, "%.300s: file is %lld bytes but the header declares %d tokens (%lld bytes): %s",
                 path, file_bytes, (int)header[2], want, file_bytes < want ? "truncated" : "trailing bytes");
        return -1;
    }
    *n = (size_t)header[2];
    return 0;
}

int shard_read(const char *path, int vocab_size, struct token_shard *out, char err[DATA_ERR_LEN]) {
    out->tokens = NULL;
    out->n = 0;
    /* a regular file, checked before opening: opening a FIFO blocks until a
     * writer comes, and a directory would read as a truncated shard */
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, DATA_ERR_LEN, "cannot open %.300s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, DATA_ERR_LEN, "%.300s is %s, not a token shard (a regular file)", path,
                 S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "not a regular file");
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, DATA_ERR_LEN, "cannot open %.300s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fileno(f), &st) != 0) {
        snprintf(err, DATA_ERR_LEN, "cannot stat %.300s: %s", path, strerror(errno));
        fclose(f);
        return -1;
    }
    int32_t header[SHARD_HEADER_INTS];
    size_t n = 0;
    if (read_exact(f, header, sizeof header, path, err) != 0 ||
        check_header(path, header, (long long)st.st_size, &n, err) != 0) {
        fclose(f);
        return -1;
    }
    uint16_t *tokens = malloc(n * sizeof *tokens);
    if (!tokens) {
        snprintf(err, DATA_ERR_LEN, "%.300s: out of memory for %zu tokens", path, n);
        fclose(f);
        return -1;
    }
    uint32_t crc = crc32c(0, header, sizeof header);
    int rc = 0;
    for (size_t at = 0; rc == 0 && at < n; at += SHARD_READ_TOKENS) {
        size_t k = n - at < SHARD_READ_TOKENS ? n - at : SHARD_READ_TOKENS;
        rc = read_exact(f, tokens + at, k * sizeof *tokens, path, err);
        if (rc == 0) crc = crc32c(crc, tokens + at, k * sizeof *tokens);
        for (size_t i = at; rc == 0 && i < at + k; i++) {
            if (tokens[i] >= vocab_size) {
                snprintf(err, DATA_ERR_LEN, "%.300s: token %d at position %zu is >= vocab_size %d", path,
                         (int)tokens[i], i, vocab_size);
                rc = -1;
            }
        }
    }
    fclose(f);
    if (rc != 0) {
        free(tokens);
        return -1;
    }
    out->tokens = tokens;
    out->n = n;
    out->crc = crc;
    out->file_bytes = (uint64_t)st.st_size;
    return 0;
}

int shard_write_temp(struct atomic_file *af, const char *path, const uint16_t *tokens, size_t n,
                     char err[DATA_ERR_LEN]) {
    if (n < 1 || n > INT32_MAX) {
        snprintf(err, DATA_ERR_LEN, "%.300s: cannot write a shard of %zu tokens (must be 1..%d)", path, n,
                 INT32_MAX);
        return -1;
    }
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = SHARD_MAGIC;
    header[1] = SHARD_VERSION;
    header[2] = (int32_t)n;
    /* atomic_write and atomic_complete remove the temp file themselves on failure. */
    if (atomic_open(af, path, err) != 0 || atomic_write(af, header, sizeof header, err) != 0 ||
        atomic_write(af, tokens, n * sizeof *tokens, err) != 0 || atomic_complete(af, err) != 0)
        return -1;
    return 0;
}

int shard_write(const char *path, const uint16_t *tokens, size_t n, char err[DATA_ERR_LEN]) {
    struct atomic_file af;
    return shard_write_temp(&af, path, tokens, n, err) == 0 ? atomic_place(&af, err) : -1;
}

void shard_free(struct token_shard *s) {
    free(s->tokens);
    s->tokens = NULL;
    s->n = 0;
}
