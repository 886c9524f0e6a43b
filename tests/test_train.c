/* The trainer end to end on configs/tiny.conf and byte-level shards cut from
 * data/kjv.txt: it learns, a stopped and resumed run is bit-identical to a
 * straight one, llm.c model files round-trip through save/init_from, and
 * trainer_open refuses bad inputs with a message naming the cause. Every
 * file lives in one mkdtemp directory. One thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cblas.h>
#include <dirent.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "outputs.h"
#include "stop_signal.h"
#include "trainer.h"

/* train: the first 200 KB of the corpus; val: 64 KB from far later (the
 * corpus is 1.9 MB), text the model never trains on. */
enum { TRAIN_BYTES = 200 * 1024, VAL_OFFSET = 1400 * 1024, VAL_BYTES = 64 * 1024 };

struct fixture {
    char dir[64];
    char train[128], val[128];
};

static struct fixture *FX; /* set by the group setup */
static struct grid GRID;    /* one process: a 1 x 1 x 1 grid */

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", FX->dir, name); }

static int write_text_shard(const unsigned char *text, size_t n, const char *path) {
    uint16_t *tok = malloc(n * sizeof *tok);
    if (!tok) return -1;
    size_t k = tokenize_bytes(text, n, tok);
    char err[DATA_ERR_LEN];
    int rc = shard_write(path, tok, k, err);
    if (rc) fprintf(stderr, "%s\n", err);
    free(tok);
    return rc;
}

static int group_setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    grid_init_single(&GRID);
    FX = calloc(1, sizeof *FX);
    if (!FX) return -1;
    snprintf(FX->dir, sizeof FX->dir, "/tmp/shardlab_test_train_XXXXXX");
    if (!mkdtemp(FX->dir)) return -1;
    FILE *f = fopen("data/kjv.txt", "rb");
    if (!f) {
        fprintf(stderr, "data/kjv.txt not found: run the tests from the repository root\n");
        return -1;
    }
    unsigned char *text = malloc(VAL_OFFSET + VAL_BYTES);
    size_t got = text ? fread(text, 1, VAL_OFFSET + VAL_BYTES, f) : 0;
    fclose(f);
    if (got != VAL_OFFSET + VAL_BYTES) {
        free(text);
        return -1;
    }
    path_in(FX->train, sizeof FX->train, "train.bin");
    path_in(FX->val, sizeof FX->val, "val.bin");
    int rc = write_text_shard(text, TRAIN_BYTES, FX->train) || write_text_shard(text + VAL_OFFSET, VAL_BYTES, FX->val);
    free(text);
    return rc ? -1 : 0;
}

static int group_teardown(void **state) {
    (void)state;
    DIR *d = opendir(FX->dir);
    if (d) {
        char p[sizeof FX->dir + sizeof((struct dirent *)0)->d_name + 1];
        for (struct dirent *e; (e = readdir(d));) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(p, sizeof p, "%s/%s", FX->dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(FX->dir);
    free(FX);
    return 0;
}

/* configs/tiny.conf on the fixture's shards; validation only at the end. */
static void tiny_config(struct config *c) {
    config_defaults(c);
    char err[CONFIG_ERR_LEN];
    if (config_load_file(c, "configs/tiny.conf", err) != 0) fail_msg("%s", err);
    snprintf(c->train_data, sizeof c->train_data, "%s", FX->train);
    snprintf(c->val_data, sizeof c->val_data, "%s", FX->val);
    c->val_every = 1000000;
    c->threads = 1;
}

static void set(struct config *c, const char *key, const char *value) {
    char err[CONFIG_ERR_LEN];
    if (config_set(c, key, value, err) != 0) fail_msg("%s", err);
}

static void open_ok(struct trainer *tr, const struct config *c) {
    char err[TRAINER_ERR_LEN];
    if (trainer_open(tr, c, &GRID, NULL, err) != 0) fail_msg("trainer_open: %s", err);
}

static void run_ok(struct trainer *tr) {
    char err[TRAINER_ERR_LEN];
    if (trainer_run(tr, err) != 0) fail_msg("trainer_run: %s", err);
}

/* ---- learning ---------------------------------------------------------- */

/* Measured (1 thread, deterministic): val 5.546 at init, 2.98 after the
 * configured 100 steps. For scale, on these shards a byte-unigram model
 * scores 3.03 nats and a byte-bigram model 2.35, so 100 tiny steps learn
 * about the unigram statistics and start on the context. The bound 3.3
 * leaves ~0.3 of margin for legitimate numeric changes while a run that
 * fails to learn (or only partly learns the byte frequencies) is caught. */
static const float TINY_FINAL_VAL_BOUND = 3.3f;

static void test_tiny_learns(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    assert_int_equal(c.steps, 100);
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    open_ok(tr, &c);
    assert_true(tr->has_val);
    float initial = trainer_validate(tr);
    run_ok(tr);
    assert_int_equal(tr->step, 100);
    float final = trainer_validate(tr);
    printf("  tiny: val loss %.4f at init, %.4f after %d steps (%.2f s of steps)\n", (double)initial, (double)final,
           tr->step, tr->train_seconds);
    assert_true(fabsf(initial - logf(256.0f)) < 0.1f);
    assert_true(final == (float)tr->last_val_loss); /* the run validated at its last step, same numbers */
    assert_true(final < TINY_FINAL_VAL_BOUND);
    trainer_close(tr);
    free(tr);
}

/* ---- bit-exact resume --------------------------------------------------- */

struct snapshot {
    size_t psi;
    void *params;
    float *master, *adam_m, *adam_v;  /* master NULL in fp32 mode */
    size_t param_bytes;
};

static void snap(struct snapshot *s, const struct trainer *tr) {
    const struct engine *e = &tr->engine;
    s->psi = e->lay.total;
    s->param_bytes = s->psi * dtype_size(tr->cfg->param_dtype);
    s->params = malloc(s->param_bytes);
    s->adam_m = malloc(s->psi * sizeof(float));
    s->adam_v = malloc(s->psi * sizeof(float));
    s->master = e->z.st.master ? malloc(s->psi * sizeof(float)) : NULL;
    assert_true(s->params && s->adam_m && s->adam_v && (s->master || !e->z.st.master));
    memcpy(s->params, e->z.st.params, s->param_bytes);
    memcpy(s->adam_m, e->z.st.s1, s->psi * sizeof(float));
    memcpy(s->adam_v, e->z.st.s2, s->psi * sizeof(float));
    if (s->master) memcpy(s->master, e->z.st.master, s->psi * sizeof(float));
}

static void snap_free(struct snapshot *s) {
    free(s->params), free(s->master), free(s->adam_m), free(s->adam_v);
}

static void assert_same_states(const struct snapshot *a, const struct snapshot *b) {
    assert_int_equal(a->psi, b->psi);
    assert_int_equal(a->param_bytes, b->param_bytes);
    assert_true(memcmp(a->params, b->params, a->param_bytes) == 0);
    assert_true((a->master == NULL) == (b->master == NULL));
    if (a->master) assert_true(memcmp(a->master, b->master, a->psi * sizeof(float)) == 0);
    assert_true(memcmp(a->adam_m, b->adam_m, a->psi * sizeof(float)) == 0);
    assert_true(memcmp(a->adam_v, b->adam_v, a->psi * sizeof(float)) == 0);
}

/* Run A: 10 steps straight. Run B: the same config stopped after 5 steps
 * (stop_after; the LR schedule still spans 10), its resume state reloaded
 * by a fresh trainer that runs steps 6..10. */
static void check_resume(const char *dtype, const char *shuffle, const char *rounding, const char *grad_accum) {
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "10");
    set(&c, "warmup_steps", "2");
    set(&c, "weight_decay", "0.1"); /* exercise the decay path too */
    set(&c, "param_dtype", dtype);
    set(&c, "grad_dtype", dtype);
    set(&c, "act_dtype", dtype);
    set(&c, "shuffle", shuffle);
    set(&c, "rounding", rounding);
    set(&c, "grad_accum", grad_accum);
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);

    struct snapshot straight, half, resumed;
    open_ok(tr, &c);
    run_ok(tr);
    assert_int_equal(tr->step, 10);
    snap(&straight, tr);
    trainer_close(tr);

    struct config c1 = c;
    path_in(c1.save_state, sizeof c1.save_state, "half.state");
    unlink(c1.save_state);
    open_ok(tr, &c1);
    tr->stop_after = 5;
    run_ok(tr);
    assert_int_equal(tr->step, 5);
    snap(&half, tr);
    trainer_close(tr);
    assert_int_equal(access(c1.save_state, F_OK), 0);

    struct config c2 = c;
    snprintf(c2.resume, sizeof c2.resume, "%s", c1.save_state);
    open_ok(tr, &c2);
    assert_int_equal(tr->step, 5);
    run_ok(tr);
    assert_int_equal(tr->step, 10);
    snap(&resumed, tr);
    trainer_close(tr);

    /* the halfway states really are different from the end (the check is
     * not vacuous), and the resumed end equals the straight end, bit for bit */
    assert_true(memcmp(half.params, straight.params, half.param_bytes) != 0);
    assert_true(memcmp(half.adam_v, straight.adam_v, half.psi * sizeof(float)) != 0);
    assert_same_states(&straight, &resumed);
    snap_free(&straight), snap_free(&half), snap_free(&resumed);
    free(tr);
}

static void test_resume_bf16_shuffled(void **state) {
    (void)state;
    check_resume("bf16", "1", "nearest", "1");
}

static void test_resume_bf16_stochastic_accum(void **state) {
    (void)state;
    check_resume("bf16", "1", "stochastic", "2");
}

static void test_resume_fp32_sequential(void **state) {
    (void)state;
    check_resume("fp32", "0", "nearest", "1");
}

/* ---- bit-exact resume of 8-bit AdamW ------------------------------------ */

/* Everything adamw8bit keeps: params, master, codes, block absmax and the
 * fp32 states of small tensors, as bytes. */
struct snapshot8 {
    unsigned char *bytes;
    size_t n;
};

static void snap8(struct snapshot8 *s, const struct trainer *tr) {
    const struct zero *z = &tr->engine.z;
    size_t psi = tr->engine.lay.total;
    const struct {
        const void *p;
        size_t n;
    } parts[] = {{z->st.params, psi * dtype_size(tr->cfg->param_dtype)},
                 {z->st.master, z->st.master ? psi * 4 : 0},
                 {z->st.q1, z->segs.n_q},
                 {z->st.q2, z->segs.n_q},
                 {z->st.absmax1, z->segs.n_blocks * 4},
                 {z->st.absmax2, z->segs.n_blocks * 4},
                 {z->st.s1, z->segs.n_f32 * 4},
                 {z->st.s2, z->segs.n_f32 * 4}};
    s->n = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) s->n += parts[i].n;
    s->bytes = malloc(s->n);
    assert_non_null(s->bytes);
    size_t at = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (parts[i].n) memcpy(s->bytes + at, parts[i].p, parts[i].n);
        at += parts[i].n;
    }
}

/* The "loss" fields of the step records of a JSON log, in order. */
static int read_losses(const char *path, double *loss, int cap) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[4096];
    int n = 0;
    while (n < cap && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"loss\":");
        if (strstr(line, "\"type\":\"step\"") && p) loss[n++] = strtod(p + 7, NULL);
    }
    fclose(f);
    return n;
}

/* adamw8bit, bf16 params: 10 steps straight == 5, save, resume, 5 more,
 * in params, master, codes, absmax and fp32 states, bit for bit, and in
 * the losses of steps 6..10 as logged. The resume says it loaded the 8-bit
 * states as saved. A resume with another min_8bit_size requantizes, says so,
 * and still runs. */
static void test_resume_adamw8bit(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "10");
    set(&c, "warmup_steps", "2");
    set(&c, "weight_decay", "0.1");
    set(&c, "optimizer", "adamw8bit");
    set(&c, "min_8bit_size", "1024"); /* the matrices quantized, norms and biases fp32 */
    set(&c, "param_dtype", "bf16");
    set(&c, "grad_dtype", "bf16");
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    struct snapshot8 straight, half, resumed;
    double loss_a[16], loss_b[16];

    struct config ca = c;
    path_in(ca.log_json, sizeof ca.log_json, "straight8.json");
    open_ok(tr, &ca);
    assert_true(tr->engine.z.segs.n_q > 0 && tr->engine.z.segs.n_f32 > 0); /* both kinds of state */
    run_ok(tr);
    snap8(&straight, tr);
    trainer_close(tr);

    struct config c1 = c;
    path_in(c1.save_state, sizeof c1.save_state, "half8.state");
    unlink(c1.save_state);
    open_ok(tr, &c1);
    tr->stop_after = 5;
    run_ok(tr);
    snap8(&half, tr);
    trainer_close(tr);

    struct config c2 = c;
    snprintf(c2.resume, sizeof c2.resume, "%s", c1.save_state);
    path_in(c2.log_json, sizeof c2.log_json, "resumed8.json");
    open_ok(tr, &c2);
    assert_string_equal(tr->opt8_resume, "8-bit states: loaded as saved (bit-exact)");
    run_ok(tr);
    snap8(&resumed, tr);
    trainer_close(tr);

    assert_int_equal(straight.n, resumed.n);
    assert_true(memcmp(half.bytes, straight.bytes, half.n) != 0);
    assert_true(memcmp(straight.bytes, resumed.bytes, straight.n) == 0);
    assert_int_equal(read_losses(ca.log_json, loss_a, 16), 10);
    assert_int_equal(read_losses(c2.log_json, loss_b, 16), 5);
    for (int i = 0; i < 5; i++) assert_true(loss_a[5 + i] == loss_b[i]);

    /* another layout key: requantized from the fp32 states, and it says so */
    struct config c3 = c2;
    set(&c3, "min_8bit_size", "512");
    c3.log_json[0] = '\0';
    open_ok(tr, &c3);
    assert_string_equal(tr->opt8_resume,
                        "8-bit states: requantized from fp32 for a new layout (dp 1 -> 1, ZeRO 0 -> 0, "
                        "min_8bit_size 1024 -> 512)");
    run_ok(tr);
    assert_int_equal(tr->step, 10);
    trainer_close(tr);
    free(straight.bytes), free(half.bytes), free(resumed.bytes);
    free(tr);
}

/* ---- stopping by signal ------------------------------------------------ */

/* A SIGTERM that arrives during step 4 (raised here between steps 3 and 4
 * of a run without save_state) ends the run at the next step boundary with
 * the signal's number; the resume state goes to <save>.state, no model file
 * is written, and resuming from the state gives the straight run's end,
 * bit for bit. */
static void test_stop_signal_saves_a_resumable_state(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "10");
    set(&c, "warmup_steps", "2");
    set(&c, "param_dtype", "bf16");
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    struct snapshot straight, resumed;
    open_ok(tr, &c);
    run_ok(tr);
    snap(&straight, tr);
    trainer_close(tr);

    struct config c1 = c;
    path_in(c1.save, sizeof c1.save, "stopped.bin");
    char stop_path[FILEIO_PATH_LEN];
    trainer_stop_state_path(&c1, stop_path);
    assert_string_equal(stop_path + strlen(stop_path) - strlen("stopped.bin.state"), "stopped.bin.state");
    unlink(stop_path);
    stop_signal_install();
    open_ok(tr, &c1);
    tr->stop_after = 3;
    run_ok(tr);
    assert_int_equal(access(stop_path, F_OK), -1); /* nothing yet: no save_state */
    raise(SIGTERM);                                /* the handler only records it */
    assert_int_equal(stop_signal_pending(), SIGTERM);
    tr->stop_after = 0;
    char err[TRAINER_ERR_LEN] = "";
    assert_int_equal(trainer_run(tr, err), SIGTERM);
    stop_signal_clear();
    assert_int_equal(tr->step, 3);
    trainer_close(tr);
    struct stat st;
    assert_int_equal(stat(stop_path, &st), 0);
    assert_int_equal(access(c1.save, F_OK), -1); /* stopped early: no model file */

    struct config c2 = c;
    assert_true(strlen(stop_path) < sizeof c2.resume);
    memcpy(c2.resume, stop_path, strlen(stop_path) + 1);
    open_ok(tr, &c2);
    assert_int_equal(tr->step, 3);
    assert_int_equal((uint64_t)st.st_size, trainer_state_bytes(tr)); /* the size the free-space check uses */
    run_ok(tr);
    snap(&resumed, tr);
    trainer_close(tr);
    assert_same_states(&straight, &resumed);
    snap_free(&straight), snap_free(&resumed);
    free(tr);
}

/* ---- llm.c model files through the trainer ------------------------------ */

static void check_llmc_roundtrip(const char *dtype, const char *file) {
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "3");
    set(&c, "param_dtype", dtype);
    set(&c, "grad_dtype", dtype);
    path_in(c.save, sizeof c.save, file);
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    open_ok(tr, &c);
    run_ok(tr);
    struct snapshot trained, loaded;
    snap(&trained, tr);
    trainer_close(tr);

    struct config c2;
    tiny_config(&c2);
    set(&c2, "param_dtype", dtype);
    set(&c2, "grad_dtype", dtype);
    set(&c2, "seed", "99"); /* a different random init would be visible */
    snprintf(c2.init_from, sizeof c2.init_from, "%s", c.save);
    open_ok(tr, &c2);
    snap(&loaded, tr);
    assert_true(memcmp(trained.params, loaded.params, trained.param_bytes) == 0);
    if (loaded.master) { /* the master is the loaded bf16 weights, widened */
        const bf16 *p = loaded.params;
        for (size_t i = 0; i < loaded.psi; i++) assert_true(loaded.master[i] == bf16_to_f32(p[i]));
    }
    trainer_close(tr);

    /* and a fresh random init differs from the trained weights */
    c2.init_from[0] = '\0';
    open_ok(tr, &c2);
    assert_true(memcmp(tr->engine.z.st.params, trained.params, trained.param_bytes) != 0);
    trainer_close(tr);
    snap_free(&trained), snap_free(&loaded);
    free(tr);
}

static void test_llmc_roundtrip_fp32(void **state) {
    (void)state;
    check_llmc_roundtrip("fp32", "model32.bin");
}

static void test_llmc_roundtrip_bf16(void **state) {
    (void)state;
    check_llmc_roundtrip("bf16", "model16.bin");
}

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
            int32_t bad = SHARD_MAGIC + 1;
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

static void test_rejects_resume_of_other_model(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "2");
    path_in(c.save_state, sizeof c.save_state, "d32.state");
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    open_ok(tr, &c);
    run_ok(tr);
    trainer_close(tr);
    free(tr);

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
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    open_ok(tr, &c);
    run_ok(tr);
    trainer_close(tr);
    free(tr);

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
    expect_open_fails(&c, "--save_state", "exists and is not a regular file");
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_learns),
        cmocka_unit_test(test_resume_bf16_shuffled),
        cmocka_unit_test(test_resume_bf16_stochastic_accum),
        cmocka_unit_test(test_resume_fp32_sequential),
        cmocka_unit_test(test_resume_adamw8bit),
        cmocka_unit_test(test_stop_signal_saves_a_resumable_state),
        cmocka_unit_test(test_rejects_unwritable_outputs),
        cmocka_unit_test(test_output_check_sizes_and_space),
        cmocka_unit_test(test_llmc_roundtrip_fp32),
        cmocka_unit_test(test_llmc_roundtrip_bf16),
        cmocka_unit_test(test_rejects_missing_train_data),
        cmocka_unit_test(test_rejects_corrupt_shard),
        cmocka_unit_test(test_rejects_token_out_of_vocab),
        cmocka_unit_test(test_rejects_resume_of_other_model),
        cmocka_unit_test(test_rejects_init_from_other_shape),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
