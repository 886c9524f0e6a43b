/* Tests for data/: shard format checks, the byte tokenizer and the loader's
 * order, sharding across data-parallel ranks, shuffling and resume. Every
 * test writes its shards into its own mkdtemp directory. Loader tests use
 * tokens equal to their position (plus an offset per shard), so the first
 * input token of a sample names the sample. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "data.h"
#include "shard_write.h"

enum { BIG_VOCAB = 65536, MAX_ITEMS = 1024 };
/* llm.c's shard headers (include/data.h), written out here as the files say them */
enum { GPT2_MAGIC = 20240520, LLAMA3_MAGIC = 20240801, LLAMA3_VERSION = 7, LLAMA3_VOCAB = 128256 };

struct fixture {
    char dir[64];
    char path[256];  /* scratch for path_in */
};

static int make_dir(void **state) {
    struct fixture *fx = calloc(1, sizeof *fx);
    if (!fx) return -1;
    snprintf(fx->dir, sizeof fx->dir, "/tmp/shardlab_test_data_XXXXXX");
    if (!mkdtemp(fx->dir)) return -1;
    *state = fx;
    return 0;
}

static int remove_dir(void **state) {
    struct fixture *fx = *state;
    DIR *d = opendir(fx->dir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", fx->dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    int rc = rmdir(fx->dir);
    free(fx);
    return rc;
}

static const char *path_in(struct fixture *fx, const char *name) {
    snprintf(fx->path, sizeof fx->path, "%s/%s", fx->dir, name);
    return fx->path;
}

/* A shard of n tokens first, first+1, ... */
static void write_counting_shard(const char *path, size_t n, uint16_t first) {
    uint16_t *tok = malloc(n * sizeof *tok);
    assert_non_null(tok);
    for (size_t i = 0; i < n; i++) tok[i] = (uint16_t)(first + i);
    char err[DATA_ERR_LEN] = "";
    assert_int_equal(shard_write(path, tok, n, err), 0);
    free(tok);
}

/* A hand-made shard file: header fields as given, n_tokens tokens of value
 * 1, then `extra` stray bytes. */
static void write_raw_shard(const char *path, int32_t magic, int32_t version, int32_t count, size_t n_tokens,
                            size_t extra) {
    int32_t header[SHARD_HEADER_INTS] = {magic, version, count};
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(header, sizeof header, 1, f), 1);
    for (size_t i = 0; i < n_tokens; i++) assert_int_equal(fwrite(&(uint16_t){1}, 2, 1, f), 1);
    for (size_t i = 0; i < extra; i++) assert_int_not_equal(fputc(0, f), EOF);
    assert_int_equal(fclose(f), 0);
}

static void expect_rejected(const char *path, int vocab, const char *cause) {
    struct token_shard s = {0};
    char err[DATA_ERR_LEN] = "";
    assert_int_equal(shard_read(path, vocab, &s, err), -1);
    assert_null(s.tokens);
    if (!strstr(err, cause) || !strstr(err, path)) fail_msg("error '%s' should name '%s' and '%s'", err, path, cause);
}

/* ---- shards ---- */

static void test_shard_round_trip(void **state) {
    struct fixture *fx = *state;
    uint16_t tok[1000];
    for (int i = 0; i < 1000; i++) tok[i] = (uint16_t)(i * 37 + 11);
    char err[DATA_ERR_LEN] = "";
    assert_int_equal(shard_write(path_in(fx, "a.bin"), tok, 1000, err), 0);
    struct token_shard s;
    assert_int_equal(shard_read(path_in(fx, "a.bin"), BIG_VOCAB, &s, err), 0);
    assert_int_equal(s.n, 1000);
    assert_memory_equal(s.tokens, tok, sizeof tok);
    shard_free(&s);
    assert_null(s.tokens);

    FILE *f = fopen(path_in(fx, "a.bin"), "rb");
    assert_non_null(f);
    int32_t header[3];
    assert_int_equal(fread(header, sizeof header, 1, f), 1);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    assert_int_equal(ftell(f), 1024 + 2 * 1000);
    fclose(f);
    assert_int_equal(header[0], 20240520);
    assert_int_equal(header[1], 1);
    assert_int_equal(header[2], 1000);
}

/* LLaMA 3's format: magic 20240801, version 7, uint32 tokens (its
 * 128,256-token vocabulary passes uint16), written and read back, and
 * batched by a loader beside a GPT-2 shard. */
static void test_llama3_shard_round_trip(void **state) {
    struct fixture *fx = *state;
    enum { N = 1000 };
    uint32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)(i * 127 + 65000) % LLAMA3_VOCAB;
    char err[DATA_ERR_LEN] = "";
    struct atomic_file af;
    assert_int_equal(shard_write_temp(&af, path_in(fx, "a.bin"), SHARD_LLAMA3, tok, N, err), 0);
    assert_int_equal(atomic_place(&af, err), 0);
    FILE *f = fopen(path_in(fx, "a.bin"), "rb");
    assert_non_null(f);
    int32_t header[3];
    assert_int_equal(fread(header, sizeof header, 1, f), 1);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    assert_int_equal(ftell(f), 1024 + 4 * N);
    fclose(f);
    assert_int_equal(header[0], LLAMA3_MAGIC);
    assert_int_equal(header[1], LLAMA3_VERSION);
    assert_int_equal(header[2], N);
    struct token_shard s;
    assert_int_equal(shard_read(path_in(fx, "a.bin"), LLAMA3_VOCAB, &s, err), 0);
    assert_int_equal(s.format, SHARD_LLAMA3);
    assert_int_equal(s.n, N);
    assert_memory_equal(s.tokens, tok, sizeof tok);
    for (int i = 0; i < N; i++) assert_int_equal(shard_token(&s, (size_t)i), tok[i]);
    shard_free(&s);
    /* a token past the vocabulary, named with its position */
    expect_rejected(path_in(fx, "a.bin"), 65536, "is >= vocab_size 65536");
    /* the loader reads it as it is, inputs and targets one apart */
    struct data_loader dl;
    assert_int_equal(loader_open(&dl, path_in(fx, "a.bin"), LLAMA3_VOCAB, 2, 4, 0, 1, false, 0, err), 0);
    int32_t in[8], tg[8];
    loader_next(&dl, in, tg);
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 4; t++) {
            assert_int_equal(in[b * 4 + t], (int32_t)tok[b * 4 + t]);
            assert_int_equal(tg[b * 4 + t], (int32_t)tok[b * 4 + t + 1]);
        }
    loader_close(&dl);
}

static void test_loader_mixes_formats(void **state) {
    struct fixture *fx = *state;
    uint16_t small[9];
    uint32_t wide[9];
    for (int i = 0; i < 9; i++) small[i] = (uint16_t)(i + 1), wide[i] = (uint32_t)(100 + i);
    char err[DATA_ERR_LEN] = "";
    struct atomic_file af;
    assert_int_equal(shard_write(path_in(fx, "shard_0.bin"), small, 9, err), 0);
    assert_int_equal(shard_write_temp(&af, path_in(fx, "shard_1.bin"), SHARD_LLAMA3, wide, 9, err), 0);
    assert_int_equal(atomic_place(&af, err), 0);
    struct data_loader dl;
    assert_int_equal(loader_open(&dl, path_in(fx, "shard_*.bin"), BYTE_VOCAB, 1, 8, 0, 1, false, 0, err), 0);
    assert_int_equal(dl.n_samples, 2);
    int32_t in[8], tg[8];
    loader_next(&dl, in, tg);
    assert_int_equal(in[0], 1);
    assert_int_equal(tg[7], 9);
    loader_next(&dl, in, tg);
    assert_int_equal(in[0], 100);
    assert_int_equal(tg[7], 108);
    loader_close(&dl);
}

static void test_shard_rejects_bad_files(void **state) {
    struct fixture *fx = *state;
    write_raw_shard(path_in(fx, "magic.bin"), 20240326, 1, 4, 4, 0);
    expect_rejected(fx->path, 256, "magic");
    write_raw_shard(path_in(fx, "version.bin"), GPT2_MAGIC, 2, 4, 4, 0);
    expect_rejected(fx->path, 256, "version");
    write_raw_shard(path_in(fx, "short.bin"), GPT2_MAGIC, 1, 4, 3, 0);
    expect_rejected(fx->path, 256, "truncated");
    write_raw_shard(path_in(fx, "header_only_part.bin"), GPT2_MAGIC, 1, 4, 0, 0);
    expect_rejected(fx->path, 256, "truncated");
    write_raw_shard(path_in(fx, "long.bin"), GPT2_MAGIC, 1, 4, 4, 1);
    expect_rejected(fx->path, 256, "trailing bytes");
    write_raw_shard(path_in(fx, "empty.bin"), GPT2_MAGIC, 1, 0, 0, 0);
    expect_rejected(fx->path, 256, "at least 1");
    write_raw_shard(path_in(fx, "llama_v1.bin"), LLAMA3_MAGIC, 1, 4, 8, 0);
    expect_rejected(fx->path, 256, "version 1 of a LLaMA 3 (uint32 tokens) shard (expected 7)");
    /* 4 uint32 tokens need 16 bytes: 8 uint16 ones' are 16, 4 are 8 */
    write_raw_shard(path_in(fx, "llama_short.bin"), LLAMA3_MAGIC, LLAMA3_VERSION, 4, 4, 0);
    expect_rejected(fx->path, 256, "truncated");
    expect_rejected(path_in(fx, "missing.bin"), 256, "cannot open");

    FILE *f = fopen(path_in(fx, "tiny.bin"), "wb");  /* shorter than a header */
    assert_non_null(f);
    fputs("abc", f);
    fclose(f);
    expect_rejected(fx->path, 256, "truncated");
}

/* A FIFO would block in open until a writer comes (alarm fails the test
 * instead of hanging it); a directory used to read as "truncated". Both are
 * refused by name before opening, also through the loader's glob. */
static void test_shard_rejects_fifo_and_directory(void **state) {
    struct fixture *fx = *state;
    assert_int_equal(mkfifo(path_in(fx, "pipe.bin"), 0600), 0);
    alarm(10);
    expect_rejected(fx->path, 256, "is a FIFO, not a token shard");
    assert_int_equal(mkdir(path_in(fx, "dir.bin"), 0700), 0);
    expect_rejected(fx->path, 256, "is a directory, not a token shard");
    struct data_loader dl;
    char err[DATA_ERR_LEN] = "";
    assert_int_equal(loader_open(&dl, path_in(fx, "pipe.bin"), 256, 1, 4, 0, 1, false, 0, err), -1);
    assert_non_null(strstr(err, "pipe.bin is a FIFO"));
    alarm(0);
    unlink(path_in(fx, "pipe.bin"));
    rmdir(path_in(fx, "dir.bin"));
}

static void test_shard_rejects_token_beyond_vocab(void **state) {
    struct fixture *fx = *state;
    uint16_t tok[32];
    for (int i = 0; i < 32; i++) tok[i] = (uint16_t)i;
    tok[17] = 300;
    char err[DATA_ERR_LEN] = "";
    assert_int_equal(shard_write(path_in(fx, "x.bin"), tok, 32, err), 0);
    expect_rejected(fx->path, 256, "token 300 at position 17 is >= vocab_size 256");
    struct token_shard s;
    assert_int_equal(shard_read(fx->path, 301, &s, err), 0);  /* fine with a larger vocabulary */
    shard_free(&s);
}

static void test_shard_write_leaves_no_temp_file(void **state) {
    struct fixture *fx = *state;
    write_counting_shard(path_in(fx, "only.bin"), 10, 0);
    char err[DATA_ERR_LEN] = "";
    assert_int_equal(shard_write(path_in(fx, "zero.bin"), (uint16_t[1]){0}, 0, err), -1);
    int entries = 0;
    DIR *d = opendir(fx->dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) entries += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(entries, 1);
}

/* ---- tokenizer ---- */

static void test_tokenizer_round_trip(void **state) {
    (void)state;
    unsigned char text[256];
    uint16_t tok[256];
    for (int i = 0; i < 256; i++) text[i] = (unsigned char)i;
    assert_int_equal(tokenize_bytes(text, 256, tok), 256);
    for (int i = 0; i < 256; i++) {
        assert_int_equal(tok[i], i);
        assert_int_equal((unsigned char)detokenize_byte(tok[i]), text[i]);
    }
    const char *hello = "In the beginning\n\tGod";
    uint16_t htok[32];
    size_t n = tokenize_bytes((const unsigned char *)hello, strlen(hello), htok);
    char back[32] = {0};
    for (size_t i = 0; i < n; i++) back[i] = detokenize_byte(htok[i]);
    assert_string_equal(back, hello);
    assert_int_equal(detokenize_byte(256), '?');
    assert_int_equal(detokenize_byte(50000), '?');
    assert_int_equal(detokenize_byte(-1), '?');
}

/* ---- loader ---- */

/* Opens a loader on one counting shard of n tokens. */
static void open_counting(struct fixture *fx, struct data_loader *dl, size_t n, int B, int T, int rank, int size,
                          bool shuffle, uint64_t seed) {
    write_counting_shard(path_in(fx, "c.bin"), n, 0);
    char err[DATA_ERR_LEN] = "";
    if (loader_open(dl, fx->path, BIG_VOCAB, B, T, rank, size, shuffle, seed, err) != 0) fail_msg("%s", err);
}

/* Runs `steps` batches and records each sample's first input token. */
static size_t record_ids(struct data_loader *dl, int steps, int32_t *ids) {
    int32_t in[256], tg[256];
    size_t k = 0;
    for (int s = 0; s < steps; s++) {
        loader_next(dl, in, tg);
        for (int b = 0; b < dl->B; b++) ids[k++] = in[b * dl->T];
    }
    return k;
}

static void test_loader_targets_shift_inputs(void **state) {
    struct data_loader dl;
    open_counting(*state, &dl, 41, 3, 4, 0, 1, false, 0);
    assert_int_equal(dl.n_samples, 10);  /* windows of 5 tokens starting at 0, 4, ..., 36 */
    int32_t in[12], tg[12];
    loader_next(&dl, in, tg);
    for (int b = 0; b < 3; b++) {
        for (int t = 0; t < 4; t++) {
            assert_int_equal(in[b * 4 + t], b * 4 + t);
            assert_int_equal(tg[b * 4 + t], b * 4 + t + 1);
        }
    }
    loader_close(&dl);
}

static void test_loader_sequential_order_and_epoch_wrap(void **state) {
    struct data_loader dl;
    open_counting(*state, &dl, 41, 3, 4, 0, 1, false, 0);
    int32_t ids[MAX_ITEMS];
    record_ids(&dl, 3, ids);
    for (int i = 0; i < 9; i++) assert_int_equal(ids[i], 4 * i);
    assert_int_equal(dl.pos.epoch, 0);
    assert_int_equal(dl.pos.cursor, 9);
    /* Only sample 9 is left, less than a batch: the next batch opens epoch 1. */
    record_ids(&dl, 1, ids);
    assert_int_equal(dl.pos.epoch, 1);
    assert_int_equal(dl.pos.cursor, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(ids[i], 4 * i);
    loader_close(&dl);
}

/* Ranks 0 and 1 of dp_size 2 with B together read what one rank with 2B reads. */
static void check_dp_split_matches_single_rank(struct fixture *fx, bool shuffle) {
    struct data_loader one, r0, r1;
    open_counting(fx, &one, 41, 4, 4, 0, 1, shuffle, 1234);
    open_counting(fx, &r0, 41, 2, 4, 0, 2, shuffle, 1234);
    open_counting(fx, &r1, 41, 2, 4, 1, 2, shuffle, 1234);
    int32_t want[4], a[2], b[2];
    for (int step = 0; step < 9; step++) {  /* 2 batches an epoch: crosses 4 epochs */
        record_ids(&one, 1, want);
        record_ids(&r0, 1, a);
        record_ids(&r1, 1, b);
        assert_int_equal(a[0], want[0]);
        assert_int_equal(a[1], want[1]);
        assert_int_equal(b[0], want[2]);
        assert_int_equal(b[1], want[3]);
        assert_int_not_equal(a[0], b[0]);
    }
    assert_int_equal(r0.pos.epoch, one.pos.epoch);
    assert_int_equal(r1.pos.cursor, one.pos.cursor);
    loader_close(&one);
    loader_close(&r0);
    loader_close(&r1);
}

static void test_loader_dp_split_sequential(void **state) { check_dp_split_matches_single_rank(*state, false); }
static void test_loader_dp_split_shuffled(void **state) { check_dp_split_matches_single_rank(*state, true); }

static void assert_is_permutation(const int32_t *ids, int n, int T) {
    int seen[MAX_ITEMS] = {0};
    for (int i = 0; i < n; i++) {
        assert_int_equal(ids[i] % T, 0);
        assert_in_range(ids[i] / T, 0, n - 1);
        seen[ids[i] / T]++;
    }
    for (int i = 0; i < n; i++) assert_int_equal(seen[i], 1);
}

static void test_loader_shuffle_deterministic_and_fresh_each_epoch(void **state) {
    struct data_loader a, b, c;
    open_counting(*state, &a, 401, 10, 4, 0, 1, true, 7);  /* 100 samples, 10 batches an epoch */
    open_counting(*state, &b, 401, 10, 4, 0, 1, true, 7);
    open_counting(*state, &c, 401, 10, 4, 0, 1, true, 8);
    int32_t a0[100], a1[100], b0[100], b1[100], c0[100], ident[100];
    record_ids(&a, 10, a0);
    record_ids(&a, 10, a1);
    record_ids(&b, 10, b0);
    record_ids(&b, 10, b1);
    record_ids(&c, 10, c0);
    for (int i = 0; i < 100; i++) ident[i] = 4 * i;
    assert_is_permutation(a0, 100, 4);
    assert_is_permutation(a1, 100, 4);
    assert_memory_equal(a0, b0, sizeof a0);
    assert_memory_equal(a1, b1, sizeof a1);
    assert_memory_not_equal(a0, a1, sizeof a0);
    assert_memory_not_equal(a0, ident, sizeof a0);
    assert_memory_not_equal(a0, c0, sizeof a0);
    loader_close(&a);
    loader_close(&b);
    loader_close(&c);
}

static void test_loader_seek_reproduces_stream(void **state) {
    struct data_loader dl, again;
    open_counting(*state, &dl, 41, 3, 4, 0, 1, true, 99);
    int32_t skip[MAX_ITEMS];
    record_ids(&dl, 5, skip);  /* 3 batches an epoch: now inside epoch 1 */
    struct loader_position saved = dl.pos;
    assert_int_equal(saved.epoch, 1);
    int32_t want_in[6][12], want_tg[6][12], in[12], tg[12];
    for (int s = 0; s < 6; s++) loader_next(&dl, want_in[s], want_tg[s]);

    open_counting(*state, &again, 41, 3, 4, 0, 1, true, 99);
    char err[DATA_ERR_LEN] = "";
    assert_int_equal(loader_seek(&again, saved, err), 0);
    for (int s = 0; s < 6; s++) {
        loader_next(&again, in, tg);
        assert_memory_equal(in, want_in[s], sizeof in);
        assert_memory_equal(tg, want_tg[s], sizeof tg);
    }
    assert_int_equal(again.pos.epoch, dl.pos.epoch);
    assert_int_equal(again.pos.cursor, dl.pos.cursor);

    /* rewind goes back to the very first batch */
    int32_t after[3];
    loader_rewind(&dl);
    record_ids(&dl, 1, after);
    assert_memory_equal(after, skip, sizeof after);

    struct loader_position bad = {.epoch = 0, .cursor = 11};
    assert_int_equal(loader_seek(&again, bad, err), -1);
    assert_non_null(strstr(err, "10 samples"));
    loader_close(&dl);
    loader_close(&again);
}

static void test_loader_rejects_too_little_data(void **state) {
    struct fixture *fx = *state;
    write_counting_shard(path_in(fx, "small.bin"), 9, 0);  /* 2 samples of 4+1 */
    struct data_loader dl;
    char err[DATA_ERR_LEN] = "";
    assert_int_equal(loader_open(&dl, fx->path, BIG_VOCAB, 2, 4, 0, 2, false, 0, err), -1);
    if (!strstr(err, "2 samples") || !strstr(err, "needs 4")) fail_msg("unexpected error: %s", err);
    assert_null(dl.shards);
    assert_null(dl.order);
    /* one rank with B = 2 fits */
    assert_int_equal(loader_open(&dl, fx->path, BIG_VOCAB, 2, 4, 0, 1, false, 0, err), 0);
    loader_close(&dl);
    /* a token the model's vocabulary cannot hold */
    assert_int_equal(loader_open(&dl, fx->path, 8, 1, 4, 0, 1, false, 0, err), -1);
    assert_non_null(strstr(err, "vocab_size 8"));
}

static void test_loader_glob_reads_every_shard_in_order(void **state) {
    struct fixture *fx = *state;
    write_counting_shard(path_in(fx, "shard_001.bin"), 21, 1000);  /* 5 samples */
    write_counting_shard(path_in(fx, "shard_000.bin"), 41, 0);     /* 10 samples */
    struct data_loader dl;
    char err[DATA_ERR_LEN] = "";
    if (loader_open(&dl, path_in(fx, "shard_*.bin"), BIG_VOCAB, 5, 4, 0, 1, false, 0, err) != 0)
        fail_msg("%s", err);
    assert_int_equal(dl.n_shards, 2);
    assert_int_equal(dl.n_samples, 15);
    int32_t ids[15];
    record_ids(&dl, 3, ids);
    for (int i = 0; i < 10; i++) assert_int_equal(ids[i], 4 * i);
    for (int i = 0; i < 5; i++) assert_int_equal(ids[10 + i], 1000 + 4 * i);
    loader_close(&dl);

    assert_int_equal(loader_open(&dl, path_in(fx, "none_*.bin"), BIG_VOCAB, 1, 4, 0, 1, false, 0, err), -1);
    assert_non_null(strstr(err, "none_*.bin"));
}

/* The loader's digest is of contents: a shard's crc is the CRC32C of its
 * whole file, read in pieces (this one spans three), an identical copy
 * under another name digests alike, one flipped bit does not. */
static void test_loader_content_digest(void **state) {
    struct fixture *fx = *state;
    enum { N = 1200000 }; /* more than two of shard_read's pieces */
    uint16_t *tok = malloc(N * sizeof *tok);
    assert_non_null(tok);
    for (size_t i = 0; i < N; i++) tok[i] = (uint16_t)(i * 7919 % 50000);
    char err[DATA_ERR_LEN] = "", a[256], b[256];
    snprintf(a, sizeof a, "%s", path_in(fx, "a.bin"));
    snprintf(b, sizeof b, "%s", path_in(fx, "copy_of_a.bin"));
    assert_int_equal(shard_write(a, tok, N, err), 0);
    assert_int_equal(shard_write(b, tok, N, err), 0);
    FILE *f = fopen(a, "rb");
    assert_non_null(f);
    size_t bytes = 1024 + 2 * (size_t)N;
    unsigned char *file = malloc(bytes);
    assert_non_null(file);
    assert_int_equal(fread(file, 1, bytes, f), bytes);
    fclose(f);
    struct token_shard s;
    assert_int_equal(shard_read(a, BIG_VOCAB, &s, err), 0);
    assert_int_equal(s.crc, crc32c(0, file, bytes));
    assert_int_equal(s.file_bytes, bytes);
    shard_free(&s);
    free(file);
    struct data_loader la, lb;
    assert_int_equal(loader_open(&la, a, BIG_VOCAB, 1, 4, 0, 1, false, 0, err), 0);
    assert_int_equal(loader_open(&lb, b, BIG_VOCAB, 1, 4, 0, 1, false, 0, err), 0);
    assert_int_equal(la.content.files, 1);
    assert_int_equal(la.content.bytes, bytes);
    assert_int_equal(la.content.digest, lb.content.digest);
    loader_close(&lb);
    tok[N - 1] ^= 1; /* the last piece's last token */
    assert_int_equal(shard_write(b, tok, N, err), 0);
    assert_int_equal(loader_open(&lb, b, BIG_VOCAB, 1, 4, 0, 1, false, 0, err), 0);
    assert_int_equal(lb.content.bytes, bytes);
    assert_int_not_equal(la.content.digest, lb.content.digest);
    loader_close(&la);
    loader_close(&lb);
    free(tok);
}

#define T(name) cmocka_unit_test_setup_teardown(name, make_dir, remove_dir)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_shard_round_trip),
        T(test_llama3_shard_round_trip),
        T(test_loader_mixes_formats),
        T(test_shard_rejects_bad_files),
        T(test_shard_rejects_fifo_and_directory),
        T(test_shard_rejects_token_beyond_vocab),
        T(test_shard_write_leaves_no_temp_file),
        T(test_tokenizer_round_trip),
        T(test_loader_targets_shift_inputs),
        T(test_loader_sequential_order_and_epoch_wrap),
        T(test_loader_dp_split_sequential),
        T(test_loader_dp_split_shuffled),
        T(test_loader_shuffle_deterministic_and_fresh_each_epoch),
        T(test_loader_seek_reproduces_stream),
        T(test_loader_rejects_too_little_data),
        T(test_loader_glob_reads_every_shard_in_order),
        T(test_loader_content_digest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
