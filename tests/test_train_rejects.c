/* trainer_open refuses bad inputs and outputs with a message naming the
 * cause, on configs/tiny.conf (tests/train_fixture.h): missing, corrupt or
 * out-of-vocabulary shards, a resume state or --init_from file of another
 * model, unwritable --save and --save_state paths; short free space only
 * warns, and the model file written has the size the check uses. Every
 * file lives in one mkdtemp directory. One thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../train/ckpt/checkpoint.h"
#include "../train/run/run_outputs.h"
#include "../train/run/run.h"
#include "train_fixture.h"
#include "shard_write.h"

/* ---- rejections --------------------------------------------------------- */

/* trainer_open must fail, and err must contain every one of the strings. */
static void expect_open_fails(const struct config *c, const char *need1, const char *need2) {
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    char err[TRAINER_ERR_LEN] = "";
    int rc = trainer_open(tr, c, &GRID, NULL, err);
    if (rc == 0) {
        trainer_close(tr);
        free(tr);
        fail_msg("trainer_open accepted a bad config (expected: %s)", need1);
    }
    assert_int_equal(rc, -1);
    printf("  refused: %s\n", err);
    if (!strstr(err, need1)) fail_msg("err lacks \"%s\": %s", need1, err);
    if (need2 && !strstr(err, need2)) fail_msg("err lacks \"%s\": %s", need2, err);
    free(tr);
}

static void test_rejects_missing_train_data(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    path_in(c.train_data, sizeof c.train_data, "no_such_shard.bin");
    expect_open_fails(&c, "train_data", "no_such_shard.bin");
}

static void test_rejects_corrupt_shard(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    path_in(c.train_data, sizeof c.train_data, "corrupt.bin");
    /* a whole shard with its magic overwritten */
    FILE *in = fopen(FX->train, "rb"), *out = fopen(c.train_data, "wb");
    assert_true(in && out);
    static unsigned char buf[1 << 16];
    size_t n;
    bool first = true;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
        if (first) {
            int32_t bad = shard_format_info(SHARD_GPT2)->magic + 1;
            memcpy(buf, &bad, sizeof bad);
            first = false;
        }
        assert_int_equal(fwrite(buf, 1, n, out), n);
    }
    fclose(in);
    assert_int_equal(fclose(out), 0);
    expect_open_fails(&c, "train_data", "bad magic");
}

static void test_rejects_token_out_of_vocab(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    assert_int_equal(c.vocab_size, 256);
    enum { N = 4096 };
    uint16_t *tok = malloc(N * sizeof *tok);
    assert_non_null(tok);
    for (size_t i = 0; i < N; i++) tok[i] = (uint16_t)('a' + i % 26);
    tok[1234] = 300;
    path_in(c.train_data, sizeof c.train_data, "big_token.bin");
    char derr[DATA_ERR_LEN];
    if (shard_write(c.train_data, tok, N, derr) != 0) fail_msg("%s", derr);
    free(tok);
    expect_open_fails(&c, "token 300 at position 1234", "vocab_size 256");
    /* the same file is fine for a model with a larger vocabulary */
    set(&c, "vocab_size", "512");
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    open_ok(tr, &c);
    trainer_close(tr);
    free(tr);
}

/* Runs c to its last step and closes: the run whose output a test feeds
 * back to another config. */
static void train_to_end(const struct config *c) {
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    open_ok(tr, c);
    run_ok(tr);
    trainer_close(tr);
    free(tr);
}

static void test_rejects_resume_of_other_model(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "2");
    path_in(c.save_state, sizeof c.save_state, "d32.state");
    train_to_end(&c);

    struct config c2;
    tiny_config(&c2);
    set(&c2, "d_model", "64");
    snprintf(c2.resume, sizeof c2.resume, "%s", c.save_state);
    expect_open_fails(&c2, "different model", "d_model 32, n_head 4, seq_len 32, vocab_size 256 (this config: 2, 64,");
    /* the same shape with another batch configuration is refused too */
    tiny_config(&c2);
    set(&c2, "micro_batch", "2");
    snprintf(c2.resume, sizeof c2.resume, "%s", c.save_state);
    expect_open_fails(&c2, "global batch", "micro_batch");
}

static void test_rejects_init_from_other_shape(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "1");
    path_in(c.save, sizeof c.save, "d32.bin");
    train_to_end(&c);

    struct config c2;
    tiny_config(&c2);
    set(&c2, "d_model", "64");
    snprintf(c2.init_from, sizeof c2.init_from, "%s", c.save);
    expect_open_fails(&c2, "init_from", "n_embd is 32 in the file, 64 in the config");
}

/* ---- output paths ---------------------------------------------------- */

/* --save, --save_state: checked in trainer_open, before step 1. Root may
 * write anywhere it can reach, so the unwritable paths are a missing
 * directory and a directory in the file's place. */
static void test_rejects_unwritable_outputs(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    path_in(c.save, sizeof c.save, "no_such_dir/model.bin");
    expect_open_fails(&c, "--save", "no_such_dir/model.bin cannot be written: cannot create");
    tiny_config(&c);
    snprintf(c.save_state, sizeof c.save_state, "%s", FX->dir);
    expect_open_fails(&c, "--save_state", "exists and is a directory, not a regular file");
    /* the probe files are gone */
    char probe[FILEIO_PATH_LEN];
    snprintf(probe, sizeof probe, "%s/no_such_dir", FX->dir);
    assert_int_equal(access(probe, F_OK), -1);
}

/* A writable path passes; short free space only warns, naming the path and
 * the bytes; the probe leaves nothing behind. The model file the trainer
 * writes has the size the check uses. */
static void test_output_check_sizes_and_space(void **state) {
    (void)state;
    char path[FILEIO_PATH_LEN], probe[FILEIO_PATH_LEN + 32], err[TRAINER_ERR_LEN] = "";
    path_in(path, sizeof path, "space.bin");
    FILE *warn = tmpfile();
    assert_non_null(warn);
    assert_int_equal(outputs_check_path(path, "--save", 1, warn, err), 0);
    assert_int_equal(ftell(warn), 0); /* one byte fits */
    const uint64_t huge = (uint64_t)1 << 62;
    assert_int_equal(outputs_check_path(path, "--save", huge, warn, err), 0);
    char text[512] = "";
    rewind(warn);
    size_t got = fread(text, 1, sizeof text - 1, warn);
    text[got] = '\0';
    fclose(warn);
    printf("  %s", text);
    assert_non_null(strstr(text, "warning: --save "));
    assert_non_null(strstr(text, "space.bin needs 4611686018427387904 bytes"));
    snprintf(probe, sizeof probe, "%s.tmp.%ld", path, (long)getpid());
    assert_int_equal(access(probe, F_OK), -1);
    assert_int_equal(access(path, F_OK), -1);

    struct config c;
    tiny_config(&c);
    set(&c, "steps", "1");
    set(&c, "param_dtype", "bf16");
    path_in(c.save, sizeof c.save, "sized.bin");
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    open_ok(tr, &c);
    run_ok(tr);
    struct model_shape file = tr->engine.lay.shape;
    file.Vp = padded_vocab(file.V);
    trainer_close(tr);
    free(tr);
    struct stat st;
    assert_int_equal(stat(c.save, &st), 0);
    /* tiny: V 256 (Vp 256), C 32, T 32, L 2: 1024 header bytes + 2 bytes x
     * (wte 8192 + wpe 1024 + 2 x 12704 per layer + lnf 64) */
    assert_int_equal((uint64_t)st.st_size, 1024 + 2 * (8192 + 1024 + 2 * 12704 + 64));
    assert_int_equal((uint64_t)st.st_size, llmc_file_bytes(&file, DTYPE_BF16));
}

/* The final state cannot be written (its folder went away during the run):
 * the final --save is still written, and the error names both files. */
static void test_failed_state_save_still_saves_model(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "1");
    char sub[FILEIO_PATH_LEN];
    path_in(sub, sizeof sub, "gone");
    assert_int_equal(mkdir(sub, 0700), 0);
    path_in(c.save_state, sizeof c.save_state, "gone/final.state");
    path_in(c.save, sizeof c.save, "kept.bin");
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    open_ok(tr, &c);
    assert_int_equal(rmdir(sub), 0);
    char err[TRAINER_ERR_LEN] = "";
    assert_int_equal(trainer_run(tr, err), -1);
    trainer_close(tr);
    free(tr);
    printf("  refused: %s\n", err);
    assert_non_null(strstr(err, "--save_state"));
    assert_non_null(strstr(err, "final.state was not written"));
    assert_non_null(strstr(err, "kept.bin was written"));
    struct stat st;
    assert_int_equal(stat(c.save, &st), 0);
    assert_true(st.st_size > 1024);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rejects_unwritable_outputs),
        cmocka_unit_test(test_output_check_sizes_and_space),
        cmocka_unit_test(test_rejects_missing_train_data),
        cmocka_unit_test(test_rejects_corrupt_shard),
        cmocka_unit_test(test_rejects_token_out_of_vocab),
        cmocka_unit_test(test_rejects_resume_of_other_model),
        cmocka_unit_test(test_rejects_init_from_other_shape),
        cmocka_unit_test(test_failed_state_save_still_saves_model),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
