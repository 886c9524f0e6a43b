/* libFuzzer harness: token shards (shard_read) and the batch loader over
 * one shard (loader_open, loader_next across an epoch boundary,
 * loader_seek). Properties checked beyond "no crash, no undefined
 * behaviour, no leak":
 *  - every refusal leaves a message;
 *  - an accepted shard holds exactly the file's tokens, all < vocab_size;
 *  - every sample the loader hands out is T+1 consecutive tokens of the
 *    shard (targets are inputs shifted by one). */
#include "data.h"
#include "fuzz_input.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { HEADER_BYTES = SHARD_HEADER_INTS * 4 };

/* A few loader geometries: B, T, dp_rank, dp_size, shuffle. */
static const struct geometry {
    int B, T, dp_rank, dp_size;
    bool shuffle;
} GEOMETRIES[] = {
    {1, 1, 0, 1, false},
    {2, 3, 0, 1, true},
    {1, 4, 1, 2, true},
};

static void check_loader(const char *path, const struct token_shard *sh, int vocab, const struct geometry *g) {
    struct data_loader dl;
    char err[DATA_ERR_LEN];
    memset(err, 'x', sizeof err);
    if (loader_open(&dl, path, vocab, g->B, g->T, g->dp_rank, g->dp_size, g->shuffle, 7, err) != 0) {
        fuzz_check_message(err, sizeof err);
        return;
    }
    FUZZ_CHECK(dl.n_samples == (sh->n - 1) / (size_t)g->T);
    size_t bt = (size_t)g->B * (size_t)g->T;
    int32_t *in = malloc(bt * sizeof *in), *tg = malloc(bt * sizeof *tg);
    FUZZ_CHECK(in && tg);
    /* one epoch and a bit, so the loader wraps and reshuffles once */
    size_t calls = dl.n_samples / ((size_t)g->B * (size_t)g->dp_size) + 2;
    for (size_t k = 0; k < calls; k++) {
        loader_next(&dl, in, tg);
        for (int b = 0; b < g->B; b++) {
            const int32_t *x = in + (size_t)b * g->T, *y = tg + (size_t)b * g->T;
            for (int t = 0; t + 1 < g->T; t++) FUZZ_CHECK(y[t] == x[t + 1]);
            for (int t = 0; t < g->T; t++) FUZZ_CHECK(x[t] >= 0 && x[t] < vocab && y[t] >= 0 && y[t] < vocab);
        }
    }
    struct loader_position end = {3, dl.n_samples}, past = {0, dl.n_samples + 1};
    FUZZ_CHECK(loader_seek(&dl, end, err) == 0);
    loader_next(&dl, in, tg);
    memset(err, 'x', sizeof err);
    FUZZ_CHECK(loader_seek(&dl, past, err) != 0);
    fuzz_check_message(err, sizeof err);
    free(in);
    free(tg);
    loader_close(&dl);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_input_path(data, size);
    static const int vocabs[] = {BYTE_VOCAB, 65536};
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        struct token_shard sh;
        char err[DATA_ERR_LEN];
        memset(err, 'x', sizeof err);
        if (shard_read(path, vocabs[v], &sh, err) != 0) {
            fuzz_check_message(err, sizeof err);
            FUZZ_CHECK(sh.tokens == NULL && sh.n == 0);
            continue;
        }
        size_t width = (size_t)shard_format_info(sh.format)->token_bytes;
        FUZZ_CHECK(size == HEADER_BYTES + width * sh.n);
        FUZZ_CHECK(memcmp(sh.tokens, data + HEADER_BYTES, width * sh.n) == 0);
        for (size_t i = 0; i < sh.n; i++) FUZZ_CHECK(shard_token(&sh, i) < (uint32_t)vocabs[v]);
        for (size_t k = 0; k < sizeof GEOMETRIES / sizeof GEOMETRIES[0]; k++)
            check_loader(path, &sh, vocabs[v], &GEOMETRIES[k]);
        shard_free(&sh);
    }
    return 0;
}
