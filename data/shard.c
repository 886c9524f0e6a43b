/* llm.c token shards (include/data.h): a 256-int32 header (magic, version,
 * token count, the rest zero) followed by the tokens, uint16 (GPT-2's
 * format) or uint32 (LLaMA 3's). Both are stored in the host's byte
 * order, as llm.c does; every machine we target is little-endian. */
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

const struct shard_format_info *shard_format_info(enum shard_format f) {
    static const struct shard_format_info formats[SHARD_NUM_FORMATS] = {
        [SHARD_GPT2] = {20240520, 1, 2, "GPT-2 (uint16 tokens)"},
        [SHARD_LLAMA3] = {20240801, 7, 4, "LLaMA 3 (uint32 tokens)"},
    };
    return &formats[f];
}

/* Checks the header against the file size; on success *n is the token
 * count and *f the format. */
static int check_header(const char *path, const int32_t *header, long long file_bytes, size_t *n,
                        enum shard_format *f, char err[DATA_ERR_LEN]) {
    const struct shard_format_info *fi = NULL;
    for (int k = 0; k < SHARD_NUM_FORMATS && !fi; k++)
        if (header[0] == shard_format_info((enum shard_format)k)->magic) {
            *f = (enum shard_format)k;
            fi = shard_format_info(*f);
        }
    if (!fi) {
        snprintf(err, DATA_ERR_LEN, "%.300s: bad magic %d (expected %d, GPT-2's, or %d, LLaMA 3's): not a token shard",
                 path, (int)header[0], shard_format_info(SHARD_GPT2)->magic, shard_format_info(SHARD_LLAMA3)->magic);
        return -1;
    }
    if (header[1] != fi->version) {
        snprintf(err, DATA_ERR_LEN, "%.300s: unsupported version %d of a %s shard (expected %d)", path,
                 (int)header[1], fi->name, fi->version);
        return -1;
    }
    if (header[2] < 1) {
        snprintf(err, DATA_ERR_LEN, "%.300s: header declares %d tokens; a shard needs at least 1", path,
                 (int)header[2]);
        return -1;
    }
    long long want = SHARD_HEADER_BYTES + (long long)fi->token_bytes * header[2];
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
    enum shard_format format = SHARD_GPT2;
    if (read_exact(f, header, sizeof header, path, err) != 0 ||
        check_header(path, header, (long long)st.st_size, &n, &format, err) != 0) {
        fclose(f);
        return -1;
    }
    size_t width = (size_t)shard_format_info(format)->token_bytes;
    char *tokens = malloc(n * width);
    if (!tokens) {
        snprintf(err, DATA_ERR_LEN, "%.300s: out of memory for %zu tokens", path, n);
        fclose(f);
        return -1;
    }
    uint32_t crc = crc32c(0, header, sizeof header);
    struct token_shard got = {.tokens = tokens, .format = format, .n = n};
    int rc = 0;
    for (size_t at = 0; rc == 0 && at < n; at += SHARD_READ_TOKENS) {
        size_t k = n - at < SHARD_READ_TOKENS ? n - at : SHARD_READ_TOKENS;
        rc = read_exact(f, tokens + at * width, k * width, path, err);
        if (rc == 0) crc = crc32c(crc, tokens + at * width, k * width);
        for (size_t i = at; rc == 0 && i < at + k; i++) {
            uint32_t t = shard_token(&got, i);
            if (t >= (uint32_t)vocab_size) {
                snprintf(err, DATA_ERR_LEN, "%.300s: token %u at position %zu is >= vocab_size %d", path, t, i,
                         vocab_size);
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
    out->format = format;
    out->n = n;
    out->crc = crc;
    out->file_bytes = (uint64_t)st.st_size;
    return 0;
}

int shard_write_temp(struct atomic_file *af, const char *path, enum shard_format f, const void *tokens, size_t n,
                     char err[DATA_ERR_LEN]) {
    if (n < 1 || n > INT32_MAX) {
        snprintf(err, DATA_ERR_LEN, "%.300s: cannot write a shard of %zu tokens (must be 1..%d)", path, n,
                 INT32_MAX);
        return -1;
    }
    int32_t header[SHARD_HEADER_INTS] = {0};
    const struct shard_format_info *fi = shard_format_info(f);
    header[0] = fi->magic;
    header[1] = fi->version;
    header[2] = (int32_t)n;
    /* atomic_write and atomic_complete remove the temp file themselves on failure. */
    if (atomic_open(af, path, err) != 0 || atomic_write(af, header, sizeof header, err) != 0 ||
        atomic_write(af, tokens, n * (size_t)fi->token_bytes, err) != 0 || atomic_complete(af, err) != 0)
        return -1;
    return 0;
}

void shard_free(struct token_shard *s) {
    free(s->tokens);
    s->tokens = NULL;
    s->n = 0;
}
