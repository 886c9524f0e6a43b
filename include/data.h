/* Token data: llm.c's shard formats, the byte-level tokenizer, and the
 * batch loader. A shard is a 1024-byte header (256 int32: magic, version,
 * token count, the rest zero) followed by the tokens, in one of llm.c's
 * two formats (enum shard_format): GPT-2's, magic 20240520 version 1,
 * uint16 tokens (llm.c's data_common.py, write_datafile); LLaMA 3's,
 * magic 20240801 version 7, uint32 tokens, which its 128,256-token
 * vocabulary needs. A loader takes shards of either, even mixed.
 *
 * Sizes: token, sample and byte counts are size_t throughout (offsets of
 * one token are size_t, file sizes long long). The format caps one shard at
 * INT32_MAX tokens, since its header holds the count as int32 (llm.c reads
 * it so); shard_write_temp refuses more, and a larger corpus is several shards,
 * which the loader indexes with size_t counts over all of them. */
#ifndef SHARDLAB_DATA_H
#define SHARDLAB_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fileio.h"

enum {
    SHARD_HEADER_INTS = 256,
    DATA_ERR_LEN = 512,
    BYTE_VOCAB = 256        /* the byte-level tokenizer: token = byte value */
};

/* llm.c's two shard formats: magic, version and token width of each. */
enum shard_format { SHARD_GPT2, SHARD_LLAMA3, SHARD_NUM_FORMATS };
struct shard_format_info {
    int32_t magic, version;
    int token_bytes; /* 2: uint16, 4: uint32 */
    const char *name;
};
const struct shard_format_info *shard_format_info(enum shard_format f);

struct token_shard {
    void *tokens;        /* n tokens of the format's width */
    enum shard_format format;
    size_t n;
    uint64_t file_bytes; /* header and tokens */
    uint32_t crc;        /* CRC32C of the whole file, computed as it was read */
};

/* Token i of s. */
static inline uint32_t shard_token(const struct token_shard *s, size_t i) {
    return s->format == SHARD_LLAMA3 ? ((const uint32_t *)s->tokens)[i] : ((const uint16_t *)s->tokens)[i];
}

/* Reads and checks a shard of either format: magic and version, declared
 * count against the file size, and every token < vocab_size; checksums it
 * on the way (crc). */
int shard_read(const char *path, int vocab_size, struct token_shard *out, char err[DATA_ERR_LEN]);
/* Writes a shard in format f (tokens of its width) into a temp file,
 * fsync'd: af holds the complete temp file, for atomic_place (the rename:
 * an atomic write) or atomic_abort (include/fileio.h). */
int shard_write_temp(struct atomic_file *af, const char *path, enum shard_format f, const void *tokens, size_t n,
                     char err[DATA_ERR_LEN]);
void shard_free(struct token_shard *s);

/* Byte-level tokenizer: one token per byte, vocabulary 256. */
size_t tokenize_bytes(const unsigned char *text, size_t n, uint16_t *out);
/* Printable form of one token; tokens >= 256 (possible with a larger model
 * vocabulary) decode to '?'. */
char detokenize_byte(int token);

/* Where a loader stands; saved in the resume state for a bit-exact resume. */
struct loader_position {
    uint64_t epoch;
    uint64_t cursor;  /* next sample index within the epoch's order */
};

/* Samples are non-overlapping windows of T+1 tokens (inputs = first T,
 * targets = last T) cut from every shard. Each call to loader_next takes the
 * next global micro-batch of dp_size * B samples and hands rank dp_rank its
 * B: ranks read disjoint parts of every global batch. With shuffle the
 * sample order is a permutation drawn from (seed, epoch); without, it is the
 * file order. */
/* What a loader read, by content (not by path): its shards, their bytes
 * (whole files) and a CRC32C over each shard's (crc, bytes) in the loader's
 * order, so an identical copy elsewhere is the same data and a flipped bit
 * is not. Resume states keep it (train/ckpt/ckpt_state.c). */
struct data_content {
    uint64_t files, bytes;
    uint32_t digest;
};

struct data_loader {
    struct token_shard *shards;
    struct data_content content;
    int n_shards;
    int B, T;
    int dp_rank, dp_size;
    bool shuffle;
    uint64_t seed;
    size_t n_samples;        /* over all shards */
    size_t *sample_shard;    /* shard of sample i (file order) */
    size_t *sample_start;    /* first token of sample i */
    size_t *order;           /* this epoch's order: index -> sample */
    struct loader_position pos;
};

/* pattern: a path or a glob; every match is a shard, in sorted order. */
int loader_open(struct data_loader *dl, const char *pattern, int vocab_size, int B, int T, int dp_rank,
                int dp_size, bool shuffle, uint64_t seed, char err[DATA_ERR_LEN]);
/* Fills inputs and targets (B*T each). Wraps into the next epoch as needed. */
void loader_next(struct data_loader *dl, int32_t *inputs, int32_t *targets);
/* Back to epoch 0, sample 0 (validation starts here every time). */
void loader_rewind(struct data_loader *dl);
int loader_seek(struct data_loader *dl, struct loader_position pos, char err[DATA_ERR_LEN]);
void loader_close(struct data_loader *dl);

#endif
