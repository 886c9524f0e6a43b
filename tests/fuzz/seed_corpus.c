/* Writes the binary seed inputs of the fuzz corpora with the project's own
 * writers, so each seed is a file the readers accept:
 *   shard/kjv-300.bin     300 byte tokens of data/kjv.txt
 *   shard/one-token.bin   the smallest shard
 *   llmc/l1-c8-fp32.bin   L=1 C=8 NH=2 T=4 V=50 (Vp 128), version 3
 *   llmc/l2-c4-bf16.bin   L=2 C=4 NH=1 T=2 V=2, version 5 (two layers, so
 *                         the stacked-over-layers order matters)
 *   llmc/llama-l2-c8-fp32.bin  LLaMA 3: L=2 C=8 NH=2 KV=1 F=12 block 4 V=10,
 *                         version 3 (GQA, F recovered from the size)
 *   llmc/llama-l1-c4-bf16.bin  LLaMA 3: L=1 C=4 NH=2 KV=2 F=8 block 2 V=3,
 *                         scaled RoPE, version 5
 *   resume/three.state    three sections: fp32, bf16, and an empty one
 *   resume/empty.state    no sections
 *   config/all-keys.conf  config_print of the defaults: every key by name
 *   config/crlf.conf      comments, blank lines, tabs, CRLF line ends
 * Usage: seed_corpus KJV_TXT CORPUS_DIR (run by `make fuzz-corpus`). */
#include "../../train/ckpt/checkpoint.h"
#include "../ckpt_whole.h"
#include "../../train/config/config.h"
#include "data.h"
#include "../shard_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KJV_TOKENS = 300 };

static void check(int rc, const char *err) {
    if (rc != 0) {
        fprintf(stderr, "seed_corpus: %s\n", err);
        exit(1);
    }
}

static void write_shards(const char *kjv, const char *dir) {
    char err[DATA_ERR_LEN], path[512];
    unsigned char text[KJV_TOKENS];
    FILE *f = fopen(kjv, "rb");
    if (!f || fread(text, 1, sizeof text, f) != sizeof text) {
        fprintf(stderr, "seed_corpus: cannot read %d bytes of %s\n", KJV_TOKENS, kjv);
        exit(1);
    }
    fclose(f);
    uint16_t tokens[KJV_TOKENS];
    size_t n = tokenize_bytes(text, sizeof text, tokens);
    snprintf(path, sizeof path, "%s/shard/kjv-300.bin", dir);
    check(shard_write(path, tokens, n, err), err);
    snprintf(path, sizeof path, "%s/shard/one-token.bin", dir);
    check(shard_write(path, tokens, 1, err), err);
    uint32_t wide[KJV_TOKENS]; /* LLaMA 3's format: the same tokens as uint32 */
    for (size_t i = 0; i < n; i++) wide[i] = tokens[i];
    struct atomic_file af;
    snprintf(path, sizeof path, "%s/shard/kjv-300-llama3.bin", dir);
    check(shard_write_temp(&af, path, SHARD_LLAMA3, wide, n, err), err);
    check(atomic_place(&af, err), err);
}

/* Small deterministic weights: multiples of 1/64 in [-1/8, 1/8]. */
static void write_model(const char *path, struct model_shape s, enum dtype file_dt) {
    s.Vp = reference_vocab(&s);
    struct model_layout lay;
    layout_init_whole(&lay, s);
    float *w = malloc(lay.total * sizeof *w);
    if (!w) exit(1);
    for (size_t i = 0; i < lay.total; i++) w[i] = (float)((int)(i % 17) - 8) / 64.0f;
    char err[CKPT_ERR_LEN];
    check(llmc_save(path, &lay, w, DTYPE_FP32, file_dt, err), err);
    free(w);
}

static void write_states(const char *dir) {
    struct resume_meta meta = {.step = 3, .seed = 1337, .data_epoch = 1, .data_cursor = 5,
                               .shape = {.L = 1, .C = 8, .NH = 2, .T = 4, .V = 50, .Vp = 128},
                               .fingerprint = 0x5eed};
    float params[6] = {0.5f, -1.0f, 2.0f, 0.25f, 0.0f, 3.0f};
    bf16 moments[4] = {0x3f80, 0xbf80, 0x4000, 0x0000};
    struct state_section sections[] = {
        {"params", DTYPE_FP32, 6, params},
        {"adam_m", DTYPE_BF16, 4, moments},
        {"empty", DTYPE_FP32, 0, NULL},
    };
    char err[CKPT_ERR_LEN], path[512];
    snprintf(path, sizeof path, "%s/resume/three.state", dir);
    check(resume_save(path, &meta, sections, 3, err), err);
    snprintf(path, sizeof path, "%s/resume/empty.state", dir);
    check(resume_save(path, &meta, NULL, 0, err), err);
}

static void write_configs(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/config/all-keys.conf", dir);
    FILE *f = fopen(path, "w");
    if (!f) exit(1);
    struct config c;
    config_defaults(&c);
    config_print(f, &c);
    snprintf(path, sizeof path, "%s/config/crlf.conf", dir);
    if (fclose(f) != 0 || !(f = fopen(path, "wb"))) exit(1);
    fputs("# a comment\r\n\r\n\tn_layer = 1   # trailing comment\r\n"
          "d_model=16\r\nn-head = 2\r\noptimizer = sgd\r\nsample_prompt = In the beginning\r\n", f);
    if (fclose(f) != 0) exit(1);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s KJV_TXT CORPUS_DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[2];
    char path[512];
    write_shards(argv[1], dir);
    snprintf(path, sizeof path, "%s/llmc/l1-c8-fp32.bin", dir);
    write_model(path, (struct model_shape){.L = 1, .C = 8, .NH = 2, .T = 4, .V = 50}, DTYPE_FP32);
    snprintf(path, sizeof path, "%s/llmc/l2-c4-bf16.bin", dir);
    write_model(path, (struct model_shape){.L = 2, .C = 4, .NH = 1, .T = 2, .V = 2}, DTYPE_BF16);
    snprintf(path, sizeof path, "%s/llmc/llama-l2-c8-fp32.bin", dir);
    write_model(path, (struct model_shape){.L = 2, .C = 8, .NH = 2, .T = 4, .V = 10, .arch = ARCH_LLAMA, .KV = 1,
                                           .F = 12, .rope_theta = 500000.0f}, DTYPE_FP32);
    snprintf(path, sizeof path, "%s/llmc/llama-l1-c4-bf16.bin", dir);
    write_model(path, (struct model_shape){.L = 1, .C = 4, .NH = 2, .T = 2, .V = 3, .arch = ARCH_LLAMA, .KV = 2,
                                           .F = 8, .rope_theta = 10000.0f, .rope_scaled = true}, DTYPE_BF16);
    write_states(dir);
    write_configs(dir);
    return 0;
}
