/* The trainer's guards, end to end on configs/tiny.conf: a run that goes
 * NaN (SGD at lr 10 without clipping) stops with a message naming the step
 * and leaves the last good resume state as it was; skip_step drops the
 * updates, counts them (in the state too) and stops past its limit; the
 * optimizer step itself leaves every state untouched on a NaN gradient; a
 * NaN in --init_from is refused by tensor and element; a resume on other
 * train_data is refused unless allow_data_change. One thread, one
 * mkdtemp directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cblas.h>
#include <dirent.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../train/ckpt/checkpoint.h"
#include "../train/ckpt/ckpt.h"
#include "engine_fixture.h"
#include "../train/run/run.h"
#include "grid_single.h"
#include "shard_write.h"

enum { TRAIN_BYTES = 200 * 1024 };

static char DIR_[64], TRAIN[128];
static struct grid GRID;

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", DIR_, name); }

static int write_text_shard(const unsigned char *text, size_t n, const char *path) {
    uint16_t *tok = malloc(n * sizeof *tok);
    if (!tok) return -1;
    size_t k = tokenize_bytes(text, n, tok);
    char err[DATA_ERR_LEN];
    int rc = shard_write(path, tok, k, err);
    free(tok);
    return rc;
}

static int group_setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    grid_init_single(&GRID);
    snprintf(DIR_, sizeof DIR_, "/tmp/shardlab_test_guards_XXXXXX");
    if (!mkdtemp(DIR_)) return -1;
    FILE *f = fopen("data/kjv.txt", "rb");
    if (!f) return -1;
    unsigned char *text = malloc(2 * TRAIN_BYTES);
    size_t got = text ? fread(text, 1, 2 * TRAIN_BYTES, f) : 0;
    fclose(f);
    path_in(TRAIN, sizeof TRAIN, "train.bin");
    char other[128];
    path_in(other, sizeof other, "other.bin");
    int rc = got != 2 * TRAIN_BYTES || write_text_shard(text, TRAIN_BYTES, TRAIN) ||
             write_text_shard(text + TRAIN_BYTES, TRAIN_BYTES, other);
    free(text);
    return rc ? -1 : 0;
}

static int group_teardown(void **state) {
    (void)state;
    DIR *d = opendir(DIR_);
    if (d) {
        char p[sizeof DIR_ + sizeof((struct dirent *)0)->d_name + 1];
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            snprintf(p, sizeof p, "%s/%s", DIR_, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(DIR_);
    return 0;
}

static void set(struct config *c, const char *key, const char *value) {
    char err[CONFIG_ERR_LEN];
    if (config_set(c, key, value, err) != 0) fail_msg("%s", err);
}

/* configs/tiny.conf on the fixture's shard, no validation. */
static void tiny_config(struct config *c) {
    config_defaults(c);
    char err[CONFIG_ERR_LEN];
    if (config_load_file(c, "configs/tiny.conf", err) != 0) fail_msg("%s", err);
    snprintf(c->train_data, sizeof c->train_data, "%s", TRAIN);
    c->val_data[0] = '\0';
    c->threads = 1;
}

/* SGD at lr 10 without clipping, measured on the fixture's shard: steps
 * 1-7 are finite (loss 5.55 ... 3.1e6, norm up to 2.1e9); step 8 is the
 * first non-finite one: on a Xeon (OpenBLAS SkylakeX) a finite loss (8.8e9)
 * and a NaN gradient norm, then step 9 finite again (norm 1.1e29) under
 * skip_step and steps 10 on NaN; on a Zen 4 the loss of steps 8 on is
 * already NaN. Either way steps 8 to 11 apply nothing. */
/* The step a run first goes non-finite at depends on the GEMMs' rounding
 * (bf16 GEMMs on a CPU with AVX512-BF16 blow up at step 10), so the run
 * pins the fp32 sgemm path whose step this test names. */
static void diverging_config(struct config *c) {
    tiny_config(c);
    set(c, "gemm_dtype", "fp32");
    set(c, "optimizer", "sgd");
    set(c, "lr", "10");
    set(c, "grad_clip", "0");
    set(c, "warmup_steps", "10");
    set(c, "steps", "20");
    set(c, "save_state_every", "1");
}
enum { FIRST_NONFINITE_STEP = 8 };

/* Whether err names step's non-finite value: the gradient norm (with the
 * loss beside it) or, when the forward already overflowed, the loss. Which
 * one goes first depends on the BLAS kernels' rounding (a Xeon's SkylakeX
 * kernels: the norm; a Zen's: the loss, in the same step). */
static bool names_nonfinite(const char *err, int step) {
    char norm[64], loss[64];
    snprintf(norm, sizeof norm, "step %d: the gradient norm is ", step);
    snprintf(loss, sizeof loss, "step %d: the loss is ", step);
    const char *at = strstr(err, norm);
    if (at) return strstr(at, "nan (loss ") == at + strlen(norm) + (at[strlen(norm)] == '-');
    at = strstr(err, loss);
    return at && strstr(at, "nan (non-finite)") == at + strlen(loss) + (at[strlen(loss)] == '-');
}

/* Runs c to its end; returns trainer_run's rc with its message in err. */
static int run(const struct config *c, char err[TRAINER_ERR_LEN], int *skipped) {
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    if (trainer_open(tr, c, &GRID, NULL, err) != 0) fail_msg("trainer_open: %s", err);
    int rc = trainer_run(tr, err);
    if (skipped) *skipped = tr->skipped_steps;
    trainer_close(tr);
    free(tr);
    return rc;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void spit_file(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static int temp_files(void) {
    DIR *d = opendir(DIR_);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, ".shardlab-tmp.") != NULL;
    closedir(d);
    return n;
}

static struct resume_meta state_meta(const char *p) {
    struct resume_reader r;
    struct resume_meta m;
    char err[CKPT_ERR_LEN];
    if (resume_open(&r, p, &m, err)) fail_msg("%s", err);
    resume_close(&r);
    return m;
}

/* Bytes after the header and section table: the sections' data. */
enum { STATE_HEAD = 3 * 4 + 5 * 8 + 6 * 4 + 4 + 512 + 2 * 8 + 4 + 4, STATE_ENTRY = 48 };

static void test_nan_run_stops_and_keeps_last_good_state(void **state) {
    (void)state;
    struct config c;
    diverging_config(&c);
    path_in(c.save_state, sizeof c.save_state, "diverge.state");
    path_in(c.save, sizeof c.save, "diverge.bin");
    char err[TRAINER_ERR_LEN];
    assert_int_equal(run(&c, err, NULL), -1);
    printf("  stopped: %s\n", err);
    assert_true(names_nonfinite(err, FIRST_NONFINITE_STEP));
    assert_non_null(strstr(err, "(non-finite): its update was not applied and training stops without saving"));
    assert_non_null(strstr(err, "diverge.state keeps the state written after step 7"));
    assert_int_equal(access(c.save, F_OK), -1); /* no final model */
    assert_int_equal(temp_files(), 0);

    /* The state on disk is the one written after step 7, byte for byte
     * what a run stopped there writes, and it loads. */
    struct resume_meta m = state_meta(c.save_state);
    assert_int_equal(m.step, FIRST_NONFINITE_STEP - 1);
    struct config c7 = c;
    path_in(c7.save_state, sizeof c7.save_state, "step7.state");
    c7.save[0] = '\0';
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    if (trainer_open(tr, &c7, &GRID, NULL, err) != 0) fail_msg("%s", err);
    tr->stop_after = FIRST_NONFINITE_STEP - 1;
    assert_int_equal(trainer_run(tr, err), 0);
    trainer_close(tr);
    size_t na, nb;
    unsigned char *a = slurp(c.save_state, &na), *b = slurp(c7.save_state, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    free(a), free(b);
    struct config resume = c;
    snprintf(resume.resume, sizeof resume.resume, "%s", c.save_state);
    resume.save_state[0] = resume.save[0] = '\0';
    if (trainer_open(tr, &resume, &GRID, NULL, err) != 0) fail_msg("the kept state does not load: %s", err);
    assert_int_equal(tr->step, FIRST_NONFINITE_STEP - 1);
    trainer_close(tr);
    free(tr);
}

static void test_skip_step_counts_and_stops(void **state) {
    (void)state;
    struct config c;
    diverging_config(&c);
    set(&c, "on_nonfinite", "skip_step");
    set(&c, "max_skipped_steps", "3");
    path_in(c.save_state, sizeof c.save_state, "skip.state");
    char err[TRAINER_ERR_LEN];
    int skipped = -1;
    assert_int_equal(run(&c, err, &skipped), -1);
    printf("  stopped: %s\n", err);
    /* steps 8, 9, 10 and 11 skipped (the gradient stays non-finite once the
     * weights have blown up): the fourth is one too many */
    assert_int_equal(skipped, 4);
    assert_true(names_nonfinite(err, 11));
    assert_non_null(strstr(err, "4 updates skipped, more than max_skipped_steps = 3"));
    /* the run went on after each skip, saving after each step: the state
     * after step 10 counts 3 skipped steps and holds step 7's model states
     * exactly (steps 8 to 10 applied nothing) */
    struct resume_meta m = state_meta(c.save_state);
    assert_int_equal(m.step, 10);
    assert_int_equal(m.skipped_steps, 3);
    assert_non_null(strstr(err, "skip.state keeps the state written after step 10"));
    /* no periodic saves: the message must not claim a state was kept */
    struct config none = c;
    set(&none, "save_state_every", "0");
    path_in(none.save_state, sizeof none.save_state, "never.state");
    assert_int_equal(run(&none, err, NULL), -1);
    assert_non_null(strstr(err, "this run wrote no state to "));
    assert_non_null(strstr(err, "never.state (it does not exist)"));
    assert_null(strstr(err, "keeps"));
    struct config c9 = c;
    path_in(c9.save_state, sizeof c9.save_state, "skip7.state");
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    if (trainer_open(tr, &c9, &GRID, NULL, err) != 0) fail_msg("%s", err);
    tr->stop_after = FIRST_NONFINITE_STEP - 1;
    assert_int_equal(trainer_run(tr, err), 0);
    assert_int_equal(tr->skipped_steps, 0);
    trainer_close(tr);
    free(tr);
    assert_int_equal(state_meta(c9.save_state).skipped_steps, 0);
    size_t na, nb;
    unsigned char *a = slurp(c.save_state, &na), *b = slurp(c9.save_state, &nb);
    assert_int_equal(na, nb);
    size_t data = STATE_HEAD + 3 * STATE_ENTRY; /* params, master, momentum */
    assert_memory_equal(a + data, b + data, na - data);
    assert_true(memcmp(a, b, data) != 0); /* the step, data cursor and count differ */
    free(a), free(b);

    /* a resumed run carries the count on: step 11's skip is over the limit */
    struct config r = c;
    snprintf(r.resume, sizeof r.resume, "%s", c.save_state);
    r.save_state[0] = '\0';
    skipped = -1;
    assert_int_equal(run(&r, err, &skipped), -1);
    assert_int_equal(skipped, 4);
    assert_non_null(strstr(err, "step 11: "));
}

/* The optimizer step with a NaN in the gradients: skip_nonfinite leaves
 * params, master and both Adam moments bit for bit. */
static void test_optimizer_step_skips_nonfinite(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    struct mem_tracker mem = {0};
    struct exec_ctx flops = {0};
    struct engine *e = calloc(1, sizeof *e);
    assert_non_null(e);
    fixture_engine_init(e, &c, &GRID, &mem, &flops);
    engine_init_params(e);
    size_t bt = (size_t)c.micro_batch * c.seq_len;
    int32_t *in = malloc(bt * sizeof *in), *tg = malloc(bt * sizeof *tg);
    assert_true(in && tg);
    for (size_t i = 0; i < bt; i++) in[i] = (int32_t)(i * 7 % 256), tg[i] = (int32_t)(i * 11 % 256);
    /* one real step first, so the moments are not zero */
    engine_zero_grads(e);
    fixture_forward_backward(e, in, tg, 1.0f);
    assert_false(fixture_optimizer_step(e, 0, true).skipped);
    engine_zero_grads(e);
    fixture_forward_backward(e, in, tg, 1.0f);
    bf16 *g = e->z.st.grads; /* grad_dtype bf16 */
    g[12345] = 0x7fc0;
    size_t total = e->z.sh.total_padded;
    size_t sizes[] = {total * 2, total * 4, total * 4, total * 4};
    void *bufs[] = {e->z.st.params, e->z.st.master, e->z.st.s1, e->z.st.s2}, *copy[4];
    for (int i = 0; i < 4; i++) {
        copy[i] = malloc(sizes[i]);
        assert_non_null(copy[i]);
        memcpy(copy[i], bufs[i], sizes[i]);
    }
    struct fixture_step r = fixture_optimizer_step(e, 1, true);
    assert_true(r.skipped);
    assert_true(isnan(r.grad_norm));
    for (int i = 0; i < 4; i++) assert_memory_equal(copy[i], bufs[i], sizes[i]);
    /* unguarded, the same step spreads the NaN (so the guard is what kept them) */
    r = fixture_optimizer_step(e, 1, false);
    assert_false(r.skipped);
    assert_true(memcmp(copy[1], bufs[1], sizes[1]) != 0);
    for (int i = 0; i < 4; i++) free(copy[i]);
    free(in), free(tg);
    engine_free(e);
    free(e);
    mem_free_all(&mem);
}

static void expect_open_fails(const struct config *c, const char *need1, const char *need2) {
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    char err[TRAINER_ERR_LEN] = "";
    int rc = trainer_open(tr, c, &GRID, NULL, err);
    if (rc == 0) {
        trainer_close(tr);
        free(tr);
        fail_msg("trainer_open accepted it (expected: %s)", need1);
    }
    printf("  refused: %s\n", err);
    if (!strstr(err, need1)) fail_msg("err lacks \"%s\": %s", need1, err);
    if (need2 && !strstr(err, need2)) fail_msg("err lacks \"%s\": %s", need2, err);
    free(tr);
}

static void open_ok(const struct config *c) {
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    char err[TRAINER_ERR_LEN];
    if (trainer_open(tr, c, &GRID, NULL, err) != 0) fail_msg("trainer_open: %s", err);
    trainer_close(tr);
    free(tr);
}

static void test_init_from_with_nan_refused(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "1");
    path_in(c.save, sizeof c.save, "good.bin");
    char err[TRAINER_ERR_LEN];
    assert_int_equal(run(&c, err, NULL), 0);
    size_t n;
    unsigned char *raw = slurp(c.save, &n);
    struct model_shape s = trainer_model_shape(&c);
    s.Vp = padded_vocab(s.V);
    size_t at = 1024 + 2 * (llmc_tensor_offset(&s, layer_tensor_id(1, LAYER_QKV_W)) + 77); /* bf16 file */
    bf16 nan16 = 0xffc0;
    memcpy(raw + at, &nan16, 2);
    char bad[128];
    path_in(bad, sizeof bad, "nan.bin");
    FILE *f = fopen(bad, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(raw, 1, n, f), n);
    fclose(f);
    free(raw);
    struct config c2;
    tiny_config(&c2);
    snprintf(c2.init_from, sizeof c2.init_from, "%s", bad);
    expect_open_fails(&c2, "--init_from: ", "nan.bin: qkvw of layer 1 element 77 is nan (non-finite)");
    snprintf(c2.init_from, sizeof c2.init_from, "%s", c.save);
    open_ok(&c2);

    /* a header claiming 2^30 positions: the size it implies is checked
     * against the file's before anything is sized from it (it used to say
     * "not enough memory (896 GiB)") */
    raw = slurp(c.save, &n);
    int32_t huge = 1 << 30;
    memcpy(raw + 2 * sizeof(int32_t), &huge, sizeof huge); /* llm.c's header: magic, version, max_seq_len */
    path_in(bad, sizeof bad, "huge.bin");
    spit_file(bad, raw, n);
    free(raw);
    snprintf(c2.init_from, sizeof c2.init_from, "%s", bad);
    char err2[TRAINER_ERR_LEN];
    assert_int_equal(trainer_adopt_model_file(&c2, err2), -1);
    assert_non_null(strstr(err2, "huge.bin is truncated: "));
    assert_non_null(strstr(err2, " bytes, expected "));
}

static void test_resume_on_other_data(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "3");
    set(&c, "shuffle", "0");
    path_in(c.save_state, sizeof c.save_state, "data.state");
    char err[TRAINER_ERR_LEN];
    assert_int_equal(run(&c, err, NULL), 0);
    struct resume_meta m = state_meta(c.save_state);
    assert_int_equal(m.data.files, 1);
    assert_int_equal(m.data.bytes, 1024 + 2 * TRAIN_BYTES); /* header + uint16 tokens */
    assert_string_equal(m.data.pattern, TRAIN);

    struct config r;
    tiny_config(&r);
    set(&r, "steps", "5");
    set(&r, "shuffle", "0");
    snprintf(r.resume, sizeof r.resume, "%s", c.save_state);
    /* the same file by another path is the same data */
    snprintf(r.train_data, sizeof r.train_data, "%s/./train.bin", DIR_);
    open_ok(&r);
    /* an identical copy at another path is the same data (contents, not paths) */
    size_t n;
    unsigned char *bytes = slurp(TRAIN, &n);
    path_in(r.train_data, sizeof r.train_data, "copy.bin");
    spit_file(r.train_data, bytes, n);
    open_ok(&r);
    /* one bit flipped in a token, at the same path and size, is not (the
     * token stays below the vocabulary, so only the digest can see it) */
    bytes[1024 + 2 * 1000] ^= 1;
    spit_file(r.train_data, bytes, n);
    free(bytes);
    expect_open_fails(&r, "was saved with train_data", "(1 files, 410624 bytes, other contents: data digest 0x");
    /* another file of the same size is not */
    path_in(r.train_data, sizeof r.train_data, "other.bin");
    expect_open_fails(&r, "was saved with train_data", ", saved 0x");
    expect_open_fails(&r, "other contents", "; pass --allow_data_change 1");
    set(&r, "allow_data_change", "1");
    open_ok(&r);
    /* a glob matching both is other data too */
    path_in(r.train_data, sizeof r.train_data, "[ot]*.bin"); /* other.bin, train.bin */
    set(&r, "allow_data_change", "0");
    expect_open_fails(&r, "(1 files, 410624 bytes)", "(2 files, 821248 bytes)");
}

/* A resume refused for another optimizer, dtype or global batch names the
 * key and both values (it said only "a different dtype, optimizer or
 * global batch"). */
static void test_resume_refusal_names_the_key(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "2");
    path_in(c.save_state, sizeof c.save_state, "keys.state");
    char err[TRAINER_ERR_LEN];
    assert_int_equal(run(&c, err, NULL), 0);
    static const struct { const char *key, *value, *says; } cases[] = {
        {"optimizer", "sgd", "; optimizer: saved adamw, this run sgd;"},
        {"micro_batch", "2", "; the global batch (micro_batch x grad_accum x data-parallel ranks): saved 4, this "
                             "run 2 x 1 x 1 = 2;"},
        {"grad_dtype", "fp32", "; grad_dtype: saved bf16, this run fp32;"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct config r;
        tiny_config(&r);
        set(&r, "steps", "3");
        set(&r, cases[i].key, cases[i].value);
        snprintf(r.resume, sizeof r.resume, "%s", c.save_state);
        expect_open_fails(&r, "keys.state was saved with a different dtype, optimizer or global batch", cases[i].says);
    }
}

/* A version-2 state (its data digest was of paths and sizes) still loads:
 * its digest is not compared, the files and bytes are, and the run says
 * so. */
static void test_resume_version2_state_checks_sizes_only(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "2");
    set(&c, "shuffle", "0");
    path_in(c.save_state, sizeof c.save_state, "v2.state");
    char err[TRAINER_ERR_LEN];
    assert_int_equal(run(&c, err, NULL), 0);
    size_t n;
    unsigned char *raw = slurp(c.save_state, &n);
    uint32_t version;
    memcpy(&version, raw + 4, 4);
    assert_int_equal(version, 3);
    version = 2; /* the same layout; the header's checksum starts after the version */
    memcpy(raw + 4, &version, 4);
    spit_file(c.save_state, raw, n);
    free(raw);
    struct config r;
    tiny_config(&r);
    set(&r, "steps", "3");
    set(&r, "shuffle", "0");
    snprintf(r.resume, sizeof r.resume, "%s", c.save_state);
    path_in(r.train_data, sizeof r.train_data, "other.bin"); /* same size, other contents: not seen */
    open_ok(&r);
    path_in(r.train_data, sizeof r.train_data, "[ot]*.bin"); /* other sizes: refused */
    expect_open_fails(&r, "(1 files, 410624 bytes)", "(2 files, 821248 bytes)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_version2_state_checks_sizes_only),
        cmocka_unit_test(test_nan_run_stops_and_keeps_last_good_state),
        cmocka_unit_test(test_skip_step_counts_and_stops),
        cmocka_unit_test(test_optimizer_step_skips_nonfinite),
        cmocka_unit_test(test_init_from_with_nan_refused),
        cmocka_unit_test(test_resume_on_other_data),
        cmocka_unit_test(test_resume_refusal_names_the_key),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
