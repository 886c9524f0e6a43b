/* The batch loader. Every shard is cut into non-overlapping windows of T+1
 * tokens (sample j of a shard starts at token j*T, so consecutive samples
 * share one token: the last target of one is the first input of the next).
 * An epoch visits the samples of all shards in one order; each loader_next
 * consumes the next dp_size*B entries of that order and rank r takes the
 * r-th block of B. The position (epoch, cursor) is all the state there is,
 * so saving it and seeking back to it reproduces the stream exactly. */
#include "data.h"
#include "crc32c.h"
#include "rng.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t global_batch(const struct data_loader *dl) { return (size_t)dl->dp_size * (size_t)dl->B; }

/* The order of epoch `epoch`: identity, or a Fisher-Yates shuffle whose
 * draws are rng values at index epoch*n + k, so each epoch gets its own
 * numbers and any epoch can be regenerated directly on seek. The modulo
 * bias of a 64-bit draw is below 2^-32 for any sample count we can hold. */
static void make_order(struct data_loader *dl, uint64_t epoch) {
    size_t n = dl->n_samples;
    for (size_t i = 0; i < n; i++) dl->order[i] = i;
    if (!dl->shuffle) return;
    uint64_t counter = epoch * (uint64_t)n;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(rng_u64(dl->seed, RNG_STREAM_SHUFFLE, counter++) % (uint64_t)(i + 1));
        size_t tmp = dl->order[i];
        dl->order[i] = dl->order[j];
        dl->order[j] = tmp;
    }
}

static size_t samples_in(size_t n_tokens, int T) { return n_tokens >= 1 ? (n_tokens - 1) / (size_t)T : 0; }

/* Reads every shard the pattern matches, in sorted order, and digests
 * their contents as read (data_content: no second pass over the data). */
static int read_shards(struct data_loader *dl, const char *pattern, int vocab_size, char err[DATA_ERR_LEN]) {
    glob_t g;
    int rc = glob(pattern, GLOB_ERR, NULL, &g);
    if (rc != 0) {
        snprintf(err, DATA_ERR_LEN, "%.300s: %s", pattern,
                 rc == GLOB_NOMATCH ? "no file matches this path or pattern" : "cannot expand this pattern");
        if (rc != GLOB_NOMATCH) globfree(&g);
        return -1;
    }
    dl->shards = calloc(g.gl_pathc, sizeof *dl->shards);
    if (!dl->shards) {
        snprintf(err, DATA_ERR_LEN, "%.300s: out of memory for %zu shards", pattern, (size_t)g.gl_pathc);
        globfree(&g);
        return -1;
    }
    for (size_t i = 0; i < g.gl_pathc; i++) {
        if (shard_read(g.gl_pathv[i], vocab_size, &dl->shards[i], err) != 0) {
            globfree(&g);
            return -1;
        }
        dl->n_shards++;
        const struct token_shard *t = &dl->shards[i];
        dl->content.files++, dl->content.bytes += t->file_bytes;
        dl->content.digest = crc32c(dl->content.digest, &t->crc, sizeof t->crc);
        dl->content.digest = crc32c(dl->content.digest, &t->file_bytes, sizeof t->file_bytes);
    }
    globfree(&g);
    return 0;
}

/* Fills the file-order sample table and allocates the epoch order. */
static int index_samples(struct data_loader *dl, const char *pattern, char err[DATA_ERR_LEN]) {
    size_t n = 0;
    for (int s = 0; s < dl->n_shards; s++) n += samples_in(dl->shards[s].n, dl->T);
    if (n < global_batch(dl)) {
        snprintf(err, DATA_ERR_LEN,
                 "%.300s: %zu samples of %d+1 tokens in %d shard(s), but one global micro-batch needs %zu "
                 "(dp_size %d x B %d)",
                 pattern, n, dl->T, dl->n_shards, global_batch(dl), dl->dp_size, dl->B);
        return -1;
    }
    dl->n_samples = n;
    dl->sample_shard = malloc(n * sizeof *dl->sample_shard);
    dl->sample_start = malloc(n * sizeof *dl->sample_start);
    dl->order = malloc(n * sizeof *dl->order);
    if (!dl->sample_shard || !dl->sample_start || !dl->order) {
        snprintf(err, DATA_ERR_LEN, "%.300s: out of memory indexing %zu samples", pattern, n);
        return -1;
    }
    size_t i = 0;
    for (int s = 0; s < dl->n_shards; s++) {
        for (size_t j = 0; j < samples_in(dl->shards[s].n, dl->T); j++, i++) {
            dl->sample_shard[i] = (size_t)s;
            dl->sample_start[i] = j * (size_t)dl->T;
        }
    }
    return 0;
}

int loader_open(struct data_loader *dl, const char *pattern, int vocab_size, int B, int T, int dp_rank,
                int dp_size, bool shuffle, uint64_t seed, char err[DATA_ERR_LEN]) {
    memset(dl, 0, sizeof *dl);
    if (B < 1 || T < 1 || dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size) {
        snprintf(err, DATA_ERR_LEN, "loader for %.300s: invalid B %d, T %d, dp_rank %d, dp_size %d", pattern, B, T,
                 dp_rank, dp_size);
        return -1;
    }
    if (vocab_size < 1) { /* each shard's tokens are checked against it: a GPT-2 shard's fit uint16 */
        snprintf(err, DATA_ERR_LEN, "loader for %.300s: vocab_size %d: must be at least 1", pattern, vocab_size);
        return -1;
    }
    dl->B = B;
    dl->T = T;
    dl->dp_rank = dp_rank;
    dl->dp_size = dp_size;
    dl->shuffle = shuffle;
    dl->seed = seed;
    if (read_shards(dl, pattern, vocab_size, err) != 0 || index_samples(dl, pattern, err) != 0) {
        loader_close(dl);
        return -1;
    }
    loader_rewind(dl);
    return 0;
}

void loader_next(struct data_loader *dl, int32_t *inputs, int32_t *targets) {
    size_t gb = global_batch(dl);
    /* The tail of an epoch shorter than a global batch is dropped. */
    if (dl->pos.cursor + gb > dl->n_samples) {
        dl->pos.epoch++;
        dl->pos.cursor = 0;
        make_order(dl, dl->pos.epoch);
    }
    size_t first = dl->pos.cursor + (size_t)dl->dp_rank * (size_t)dl->B;
    for (int b = 0; b < dl->B; b++) {
        size_t sample = dl->order[first + (size_t)b];
        const struct token_shard *s = &dl->shards[dl->sample_shard[sample]];
        size_t w = dl->sample_start[sample];
        for (int t = 0; t < dl->T; t++) {
            inputs[(size_t)b * dl->T + t] = (int32_t)shard_token(s, w + (size_t)t);
            targets[(size_t)b * dl->T + t] = (int32_t)shard_token(s, w + (size_t)t + 1);
        }
    }
    dl->pos.cursor += gb;
}

void loader_rewind(struct data_loader *dl) {
    dl->pos.epoch = 0;
    dl->pos.cursor = 0;
    make_order(dl, 0);
}

int loader_seek(struct data_loader *dl, struct loader_position pos, char err[DATA_ERR_LEN]) {
    /* Any cursor up to the end is valid: loader_next wraps when too few
     * samples remain, so a position saved under another dp_size still works. */
    if (pos.cursor > dl->n_samples) {
        snprintf(err, DATA_ERR_LEN, "cannot seek to sample %llu of epoch %llu: the data has only %zu samples",
                 (unsigned long long)pos.cursor, (unsigned long long)pos.epoch, dl->n_samples);
        return -1;
    }
    dl->pos = pos;
    make_order(dl, pos.epoch);
    return 0;
}

void loader_close(struct data_loader *dl) {
    for (int s = 0; s < dl->n_shards; s++) shard_free(&dl->shards[s]);
    free(dl->shards);
    free(dl->sample_shard);
    free(dl->sample_start);
    free(dl->order);
    memset(dl, 0, sizeof *dl);
}
