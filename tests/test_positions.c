/* llm.c model files as a user has them: a position table (max_seq_len)
 * longer than the run's sequences. The file's header gives the shape; a
 * run at seq_len T < max_seq_len reads the first T rows of wpe, which is
 * carried, trained and saved whole. Rows past T get no gradient: with
 * weight decay 0 they are written back bitwise unchanged; with weight
 * decay they shrink by AdamW's decoupled factor (1 - lr wd) per step, as
 * in llm.c, which decays every matrix whole. One thread, fp32 states so
 * the comparisons are exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cblas.h>
#include <dirent.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../train/ckpt/ckpt.h"
#include "../train/ckpt/checkpoint.h"
#include "../train/theory/theory.h"
#include "../train/run/run.h"
#include "grid_single.h"
#include "shard_write.h"

enum { TEXT_BYTES = 64 * 1024, T_RUN = 16, T_FILE = 32, C_TINY = 32 };

static char DIR_[64], TRAIN[128], VAL[128], M32[128], M16[128];
static struct grid GRID;

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", DIR_, name); }

static int write_shard(const unsigned char *text, size_t n, const char *path) {
    uint16_t *tok = malloc(n * sizeof *tok);
    char err[DATA_ERR_LEN];
    int rc = tok ? shard_write(path, tok, tokenize_bytes(text, n, tok), err) : -1;
    if (rc) fprintf(stderr, "%s\n", tok ? err : "out of memory");
    free(tok);
    return rc;
}

static void tiny(struct config *c) {
    config_defaults(c);
    char err[CONFIG_ERR_LEN];
    if (config_load_file(c, "configs/tiny.conf", err) != 0) fail_msg("%s", err);
    snprintf(c->train_data, sizeof c->train_data, "%s", TRAIN);
    snprintf(c->val_data, sizeof c->val_data, "%s", VAL);
    c->val_every = 1000000, c->val_batches = 2, c->threads = 1;
    c->param_dtype = c->grad_dtype = DTYPE_FP32;
    c->seq_len = T_RUN;
}

static void open_ok(struct trainer *tr, const struct config *c) {
    char err[TRAINER_ERR_LEN];
    if (trainer_open(tr, c, &GRID, NULL, err) != 0) fail_msg("trainer_open: %s", err);
}

static void run_ok(struct trainer *tr) {
    char err[TRAINER_ERR_LEN];
    if (trainer_run(tr, err) != 0) fail_msg("trainer_run: %s", err);
}

/* A config that starts from `file` (its shape adopted) at seq_len T_RUN. */
static void from_file(struct config *c, const char *file) {
    tiny(c);
    snprintf(c->init_from, sizeof c->init_from, "%s", file);
    char err[TRAINER_ERR_LEN];
    if (trainer_adopt_model_file(c, err) != 0) fail_msg("adopt: %s", err);
}

/* Every tensor of a file, in file order: its data section as floats. */
static float *read_all(const char *path, struct model_shape *shape) {
    int version;
    char err[CKPT_ERR_LEN];
    if (llmc_read_header(path, shape, &version, err) != 0) fail_msg("%s", err);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint64_t bytes = llmc_file_bytes(shape, DTYPE_FP32) - 1024;
    float *data = malloc(bytes);
    assert_non_null(data);
    assert_int_equal(fseek(f, 1024, SEEK_SET), 0);
    assert_int_equal(fread(data, 1, bytes, f), bytes);
    fclose(f);
    return data;
}

/* A copy of file `src` whose position table keeps only its first `rows`. */
static void cut_positions(const char *src, const char *dst, int rows) {
    struct model_shape s;
    int version;
    char err[CKPT_ERR_LEN];
    if (llmc_read_header(src, &s, &version, err) != 0) fail_msg("%s", err);
    struct model_shape cut = s;
    cut.T = cut.maxT = rows;
    struct llmc_reader r;
    struct llmc_writer w;
    if (llmc_open(&r, src, &s, err) != 0 || llmc_create(&w, dst, &cut, DTYPE_FP32, err) != 0) fail_msg("%s", err);
    struct model_layout lay; /* of the cut shape: each tensor's elements */
    layout_init_whole(&lay, cut);
    float *buf = malloc((size_t)s.Vp * s.C * sizeof(float)); /* wte, the largest tensor here */
    assert_non_null(buf);
    for (int layer = -1; layer < s.L; layer++) {
        int kinds = layer < 0 ? MODEL_NUM_TENSORS : LAYER_NUM_TENSORS;
        for (int k = 0; k < kinds; k++) {
            struct tensor_id id = {layer, k};
            size_t n = llmc_tensor_numel(&cut, id);
            if (llmc_read(&r, id, 0, n, buf, DTYPE_FP32, err) != 0 ||
                llmc_write(&w, id, 0, n, buf, DTYPE_FP32, err) != 0)
                fail_msg("%s", err);
        }
    }
    if (llmc_commit(&w, err) != 0) fail_msg("%s", err);
    llmc_close(&r);
    free(buf);
}

static int setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    grid_init_single(&GRID);
    snprintf(DIR_, sizeof DIR_, "/tmp/shardlab_test_positions_XXXXXX");
    if (!mkdtemp(DIR_)) return -1;
    FILE *f = fopen("data/kjv.txt", "rb");
    if (!f) {
        fprintf(stderr, "data/kjv.txt not found: run the tests from the repository root\n");
        return -1;
    }
    static unsigned char text[2 * TEXT_BYTES];
    size_t got = fread(text, 1, sizeof text, f);
    fclose(f);
    if (got != sizeof text) return -1;
    path_in(TRAIN, sizeof TRAIN, "train.bin"), path_in(VAL, sizeof VAL, "val.bin");
    path_in(M32, sizeof M32, "m32.bin"), path_in(M16, sizeof M16, "m16.bin");
    if (write_shard(text, TEXT_BYTES, TRAIN) || write_shard(text + TEXT_BYTES, TEXT_BYTES, VAL)) return -1;
    /* a model with a 32-row position table, saved at step 0 (random init) */
    struct config c;
    tiny(&c);
    c.max_seq_len = T_FILE, c.steps = 0;
    snprintf(c.save, sizeof c.save, "%s", M32);
    struct trainer *tr = calloc(1, sizeof *tr);
    char err[TRAINER_ERR_LEN];
    int rc = !tr || trainer_open(tr, &c, &GRID, NULL, err) != 0 || trainer_run(tr, err) != 0;
    if (rc) fprintf(stderr, "%s\n", err);
    if (tr && tr->cfg) trainer_close(tr);
    free(tr);
    return rc ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    DIR *d = opendir(DIR_);
    if (d) {
        char p[sizeof DIR_ + 300];
        for (struct dirent *e; (e = readdir(d));) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(p, sizeof p, "%s/%s", DIR_, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(DIR_);
    return 0;
}

/* The layout and the theory count wpe as max_seq_len rows. */
static void test_layout_counts_all_rows(void **state) {
    (void)state;
    struct model_layout a, b;
    struct model_shape s = {.L = 2, .C = C_TINY, .NH = 4, .T = T_RUN, .maxT = T_FILE, .V = 256};
    assert_int_equal(layout_init(&a, s, rank_desc_whole(&s)), 0);
    assert_int_equal(a.shape.maxT, T_FILE);
    assert_int_equal(layout_embed_tensor(&a, EMB_WPE).numel, (size_t)T_FILE * C_TINY);
    assert_int_equal(layout_embed_tensor(&a, EMB_WPE).full_rows, T_FILE);
    s.maxT = 0; /* 0: T rows, as before */
    layout_init_whole(&b, s);
    assert_int_equal(b.shape.maxT, T_RUN);
    assert_int_equal(a.total - b.total, (size_t)(T_FILE - T_RUN) * C_TINY);
    assert_int_equal(a.ref_total - b.ref_total, (size_t)(T_FILE - T_RUN) * C_TINY);
    /* the head's reference offset moves by the extra rows */
    assert_int_equal(layout_head_tensor(&a, HEAD_LNF_W).ref_offset - layout_head_tensor(&b, HEAD_LNF_W).ref_offset,
                     (size_t)(T_FILE - T_RUN) * C_TINY);
    s.maxT = T_RUN - 1; /* fewer rows than positions */
    assert_int_equal(layout_init(&a, s, rank_desc_whole(&s)), -1);

    struct config c;
    tiny(&c);
    c.max_seq_len = T_FILE;
    struct theory_model m;
    theory_model_from_config(&m, &c);
    struct theory_params p = theory_param_count(&m);
    assert_true(p.position == (double)T_FILE * C_TINY);
    s.maxT = T_FILE;
    layout_init_whole(&a, s);
    assert_true(p.total + p.padding == (double)a.total);
    char err[CONFIG_ERR_LEN];
    c.max_seq_len = T_RUN - 1;
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "max_seq_len (15) must be 0 or at least seq_len (16)"));
}

/* The unused rows cannot matter: the loss from the 32-row file at T = 16
 * equals the loss from a copy holding only the first 16 rows, and so does
 * training. Saving writes all 32 rows; with weight decay 0 the rows past
 * T come back bitwise unchanged. */
static void test_shorter_seq_len_trains_and_saves_whole_table(void **state) {
    (void)state;
    cut_positions(M32, M16, T_RUN);
    struct config c32, c16;
    from_file(&c32, M32), from_file(&c16, M16);
    assert_int_equal(c32.max_seq_len, T_FILE);
    assert_int_equal(c16.max_seq_len, T_RUN);
    c32.steps = c16.steps = 3;
    path_in(c32.save, sizeof c32.save, "m32_trained.bin");
    path_in(c16.save, sizeof c16.save, "m16_trained.bin");

    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    open_ok(tr, &c32);
    float loss32 = trainer_validate(tr);
    run_ok(tr);
    trainer_close(tr);
    open_ok(tr, &c16);
    float loss16 = trainer_validate(tr);
    run_ok(tr);
    trainer_close(tr);
    free(tr);
    printf("  loss at step 0: %.6f (32-row file), %.6f (16-row copy)\n", loss32, loss16);
    assert_true(loss32 > 5.0f && loss32 < 6.0f); /* ln 256 = 5.55 at init */
    assert_memory_equal(&loss32, &loss16, sizeof loss32);

    struct model_shape s0, s32, s16;
    float *before = read_all(M32, &s0), *after32 = read_all(c32.save, &s32), *after16 = read_all(c16.save, &s16);
    assert_int_equal(s32.maxT, T_FILE);
    assert_int_equal(s16.maxT, T_RUN);
    size_t C = C_TINY, wpe = llmc_tensor_offset(&s32, model_tensor_id(MODEL_WPE));
    size_t used = T_RUN * C, unused = (T_FILE - T_RUN) * C;
    /* rows past T: no gradient, no decay -> unchanged, bitwise */
    assert_memory_equal(after32 + wpe + used, before + wpe + used, unused * sizeof(float));
    /* rows below T trained, and the same as the 16-row file's */
    assert_memory_not_equal(after32 + wpe, before + wpe, used * sizeof(float));
    assert_memory_equal(after32 + wpe, after16 + wpe, used * sizeof(float));
    /* every other tensor as in the 16-row run: wte before wpe, the rest after */
    assert_memory_equal(after32, after16, wpe * sizeof(float));
    size_t rest32 = wpe + (size_t)T_FILE * C, rest16 = wpe + used;
    size_t rest = (llmc_file_bytes(&s16, DTYPE_FP32) - 1024) / sizeof(float) - rest16;
    assert_memory_equal(after32 + rest32, after16 + rest16, rest * sizeof(float));
    free(before), free(after32), free(after16);
}

/* With weight decay, the rows past T are matrix rows like the others: one
 * step multiplies each by AdamW's decoupled factor 1 - lr wd (their m, v
 * stay 0, so the Adam term adds exactly 0). llm.c does the same. */
static void test_weight_decay_shrinks_unused_rows(void **state) {
    (void)state;
    struct config c;
    from_file(&c, M32);
    c.steps = 1, c.weight_decay = 0.1f;
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    open_ok(tr, &c);
    struct tensor_info wpe = layout_embed_tensor(&tr->engine.lay, EMB_WPE);
    assert_int_equal(wpe.numel, (size_t)T_FILE * C_TINY);
    const float *p = (const float *)tr->engine.z.st.params + wpe.offset;
    float *before = malloc(wpe.numel * sizeof(float));
    assert_non_null(before);
    memcpy(before, p, wpe.numel * sizeof(float));
    run_ok(tr);
    struct engine_options eo = trainer_engine_options(&c);
    float lr = lr_at(&eo.zero.optim.lr, 0);
    const float decay = 1.0f - lr * c.weight_decay;
    assert_true(lr > 0.0f && decay < 1.0f);
    for (size_t i = (size_t)T_RUN * C_TINY; i < wpe.numel; i++) {
        float want = before[i] * decay;
        assert_memory_equal(&p[i], &want, sizeof want);
    }
    trainer_close(tr);
    free(before), free(tr);
}

/* A config that disagrees with the file fails naming the key and both values. */
static void test_config_disagreeing_with_file(void **state) {
    (void)state;
    struct config c;
    char err[TRAINER_ERR_LEN];
    const struct { const char *key, *value, *need; } cases[] = {
        {"n_layer", "4", "n_layer: config 4, file 2"},
        {"d_model", "64", "d_model: config 64, file 32"},
        {"vocab_size", "512", "vocab_size: config 512, file 256"},
        {"max_seq_len", "48", "max_seq_len: config 48, file 32"},
        {"seq_len", "33", "seq_len 33 is longer than the file's position table (max_seq_len 32)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tiny(&c);
        snprintf(c.init_from, sizeof c.init_from, "%s", M32);
        char cerr[CONFIG_ERR_LEN];
        if (config_set(&c, cases[i].key, cases[i].value, cerr) != 0) fail_msg("%s", cerr);
        err[0] = '\0';
        assert_int_equal(trainer_adopt_model_file(&c, err), -1);
        printf("  refused: %s\n", err);
        if (!strstr(err, cases[i].need)) fail_msg("err lacks \"%s\": %s", cases[i].need, err);
    }
    /* without the adoption, trainer_open still compares the table's rows */
    tiny(&c);
    snprintf(c.init_from, sizeof c.init_from, "%s", M32);
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    assert_int_equal(trainer_open(tr, &c, &GRID, NULL, err), -1);
    assert_non_null(strstr(err, "max_seq_len is 32 in the file, 16 in the config"));
    free(tr);
    /* a missing file is named */
    tiny(&c);
    path_in(c.init_from, sizeof c.init_from, "no_such_model.bin");
    assert_int_equal(trainer_adopt_model_file(&c, err), -1);
    assert_non_null(strstr(err, "no_such_model.bin"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_counts_all_rows),
        cmocka_unit_test(test_shorter_seq_len_trains_and_saves_whole_table),
        cmocka_unit_test(test_weight_decay_shrinks_unused_rows),
        cmocka_unit_test(test_config_disagreeing_with_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
