/* build/prepare: turns a text file into train and validation token shards
 * with the byte-level tokenizer. The validation split is the last
 * --val-fraction of the file, moved back to the start of a line so that no
 * line is split between the two. --format picks llm.c's shard format:
 * GPT-2's uint16 tokens (the default) or LLaMA 3's uint32 (include/data.h). */
#include "data.h"
#include "fileio.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: prepare --input FILE --train OUT.bin --val OUT.bin [--val-fraction F] [--format gpt2|llama3]\n"
            "\n"
            "Byte-tokenizes FILE (vocabulary %d) and writes two llm.c token shards:\n"
            "the last F of the file (default 0.05, cut at a line boundary) to --val,\n"
            "the rest to --train. --format: gpt2 (magic %d version %d, uint16 tokens;\n"
            "the default) or llama3 (magic %d version %d, uint32 tokens).\n",
            BYTE_VOCAB, shard_format_info(SHARD_GPT2)->magic, shard_format_info(SHARD_GPT2)->version,
            shard_format_info(SHARD_LLAMA3)->magic, shard_format_info(SHARD_LLAMA3)->version);
}

/* Reads the whole file; returns NULL (with a message printed) on failure. */
static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "prepare: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 20, len = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        unsigned char *bigger = realloc(buf, cap * 2);
        if (!bigger) free(buf);
        buf = bigger;
        cap *= 2;
    }
    int failed = !buf || ferror(f);
    fclose(f);
    if (failed) {
        fprintf(stderr, "prepare: cannot read %s%s\n", path, buf ? "" : ": out of memory");
        free(buf);
        return NULL;
    }
    *n = len;
    return buf;
}

/* Start of the validation split: n - fraction*n, moved back to a line start. */
static size_t split_point(const unsigned char *text, size_t n, double fraction) {
    size_t cut = n - (size_t)(fraction * (double)n);
    while (cut > 0 && text[cut - 1] != '\n') cut--;
    return cut;
}

/* One split tokenized into a complete temp file beside path (af), not yet
 * in place. */
static int write_split(struct atomic_file *af, enum shard_format f, const char *what, const char *path,
                       const unsigned char *text, size_t n) {
    uint16_t *tokens = malloc((n ? n : 1) * sizeof *tokens);
    uint32_t *wide = f == SHARD_LLAMA3 ? malloc((n ? n : 1) * sizeof *wide) : NULL;
    if (!tokens || (f == SHARD_LLAMA3 && !wide)) {
        fprintf(stderr, "prepare: out of memory for %zu %s tokens\n", n, what);
        free(tokens);
        return -1;
    }
    tokenize_bytes(text, n, tokens);
    for (size_t i = 0; wide && i < n; i++) wide[i] = tokens[i];
    char err[DATA_ERR_LEN];
    int rc = shard_write_temp(af, path, f, wide ? (const void *)wide : tokens, n, err);
    free(wide);
    free(tokens);
    if (rc != 0) fprintf(stderr, "prepare: %s (nothing was replaced)\n", err);
    return rc;
}

/* Both splits written to temp files first, and renamed into place only
 * when both are complete: a val shard that cannot be written (a missing
 * folder, a full disk) leaves an existing train shard as it was, never a
 * pair from two corpora. Only the renames themselves can part them. */
static int write_splits(enum shard_format f, const char *train, const char *val, const unsigned char *text,
                        size_t cut, size_t n) {
    struct atomic_file t, v;
    if (write_split(&t, f, "train", train, text, cut) != 0) return -1;
    if (write_split(&v, f, "val", val, text + cut, n - cut) != 0) {
        atomic_abort(&t);
        return -1;
    }
    char err[FILEIO_ERR_LEN];
    if (atomic_place(&t, err) != 0) {
        atomic_abort(&v);
        fprintf(stderr, "prepare: %s (nothing was replaced)\n", err);
        return -1;
    }
    if (atomic_place(&v, err) != 0) {
        fprintf(stderr, "prepare: %s; %s was replaced already: it and %s are from different runs\n", err, train,
                val);
        return -1;
    }
    printf("%-5s %10zu tokens -> %s\n", "train", cut, train);
    printf("%-5s %10zu tokens -> %s\n", "val", n - cut, val);
    return 0;
}

int main(int argc, char **argv) {
    const char *input = NULL, *train = NULL, *val = NULL;
    double fraction = 0.05;
    enum shard_format format = SHARD_GPT2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        bool known = !strcmp(a, "--input") || !strcmp(a, "--train") || !strcmp(a, "--val") ||
                     !strcmp(a, "--val-fraction") || !strcmp(a, "--format");
        if (!known || i + 1 >= argc) {
            fprintf(stderr, known ? "prepare: %s needs a value\n\n" : "prepare: unknown option %s\n\n", a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--input")) input = v;
        else if (!strcmp(a, "--train")) train = v;
        else if (!strcmp(a, "--val")) val = v;
        else if (!strcmp(a, "--format")) {
            if (!strcmp(v, "gpt2") || !strcmp(v, "llama3")) {
                format = !strcmp(v, "gpt2") ? SHARD_GPT2 : SHARD_LLAMA3;
            } else {
                fprintf(stderr, "prepare: --format must be gpt2 or llama3, got '%s'\n", v);
                return 2;
            }
        } else {
            char *end;
            fraction = strtod(v, &end);
            if (*v == '\0' || *end != '\0' || !(fraction > 0.0 && fraction < 1.0)) {
                fprintf(stderr, "prepare: --val-fraction must be a number strictly between 0 and 1, got '%s'\n", v);
                return 2;
            }
        }
    }
    if (!input || !train || !val) {
        fprintf(stderr, "prepare: --input, --train and --val are all required\n\n");
        usage(stderr);
        return 2;
    }
    /* before anything is read or written: rename would replace a device or a
     * FIFO, and an output over the corpus or the other split would lose it */
    const struct named_path files[] = {
        {"--input", input, "the corpus", false},
        {"--train", train, "train shard", true},
        {"--val", val, "validation shard", true},
    };
    char err[FILEIO_ERR_LEN];
    if (path_check_input(input, "--input", err) != 0 || path_check_output(train, "--train", err) != 0 ||
        path_check_output(val, "--val", err) != 0 || path_check_distinct(files, 3, err) != 0) {
        fprintf(stderr, "prepare: %s\n", err);
        return 1;
    }
    size_t n = 0;
    unsigned char *text = read_file(input, &n);
    if (!text) return 1;
    size_t cut = split_point(text, n, fraction);
    int rc = 1;
    if (cut == 0 || cut == n) {
        fprintf(stderr,
                "prepare: %s (%zu bytes) cannot be split at a line boundary with --val-fraction %g: "
                "the %s split would be empty\n",
                input, n, fraction, cut == 0 ? "train" : "validation");
    } else {
        rc = write_splits(format, train, val, text, cut, n) == 0 ? 0 : 1;
    }
    free(text);
    return rc;
}
