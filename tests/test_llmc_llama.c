/* llm.c's LLaMA 3 model files (train_llama3.py's write_model): the
 * fixture's model part read as the reference wrote it, tensors at the
 * offsets write_tensors' order gives (computed here from the header, not by
 * the reader's code); write -> read round trips in fp32 and bf16; every
 * header field the reader refuses, with its message; and --init_from of
 * the fixture's model (fp32 and bf16 files) training a few steps, saving a
 * file that reads back. One thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cblas.h>
#include <math.h>
#include <omp.h>

#include "../train/ckpt/ckpt.h"
#include "../train/run/run.h"
#include "ckpt_whole.h"
#include "file_fixture.h"
#include "grid_single.h"
#include "llama_fixture.h"
#include "shard_write.h"

/* The fixture's model: V 64, L 2, NH 4, KV 2, C 16, F 48 (mult 1, multiple_of 16). */
enum { FX_V = 64, FX_L = 2, FX_NH = 4, FX_KV = 2, FX_C = 16, FX_F = 48, FX_BLOCK = 32, TOKENS = 16384 };

static char DIR_[64], MODEL[256], TRAIN[256], VAL[256];
static struct grid GRID;

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", DIR_, name); }

/* Elements in the fixture's model part: its own count (llama_fixture.h). */
static size_t model_elems(const struct fixture *fx) { return (size_t)param_count(fx); }

static struct model_shape fixture_shape(void) {
    return (struct model_shape){.L = FX_L, .C = FX_C, .NH = FX_NH, .T = FX_BLOCK, .maxT = FX_BLOCK, .V = FX_V,
                                .Vp = FX_V, .arch = ARCH_LLAMA, .KV = FX_KV, .F = FX_F, .rope_theta = 500000.0f,
                                .rope_scaled = true};
}

static int setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    grid_init_single(&GRID);
    if (scratch_dir_make(DIR_, "shardlab_test_llmc_llama") != 0) return -1;
    path_in_dir(DIR_, "model.bin", MODEL), path_in_dir(DIR_, "train.bin", TRAIN), path_in_dir(DIR_, "val.bin", VAL);
    /* the model part: the fixture's first 1024 + 4 N bytes */
    FILE *f = fopen(FIXTURE_PATH, "rb");
    if (!f) return -1;
    enum { PART = 1024 + 4 * 8272 }; /* 8272: param_count of the fixture's header */
    static unsigned char part[PART];
    size_t got = fread(part, 1, PART, f);
    fclose(f);
    FILE *o = fopen(MODEL, "wb");
    if (got != PART || !o || fwrite(part, 1, PART, o) != PART || fclose(o) != 0) return -1;
    /* tokens below the fixture's vocabulary of 64 */
    static uint16_t tok[TOKENS];
    for (size_t i = 0; i < TOKENS; i++) tok[i] = (uint16_t)((i * 7 + i / 13) % FX_V);
    char err[DATA_ERR_LEN];
    if (shard_write(TRAIN, tok, TOKENS, err) != 0 || shard_write(VAL, tok + 1, TOKENS - 1, err) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    scratch_dir_remove(DIR_);
    return 0;
}

/* Offset (elements, in the data section) of layer l's copy of the k-th
 * stacked kind of write_tensors (0 ln_1, 1 c_attn, 2 c_proj, 3 ln_2,
 * 4 c_fc, 5 c_fc2, 6 mlp c_proj), or with k = 7 of ln_f, k = 8 lm_head. */
static size_t ref_offset(int k, int l) {
    const size_t C = FX_C, qkv = (size_t)(FX_NH + 2 * FX_KV) * (C / FX_NH) * C;
    const size_t per[7] = {C, qkv, C * C, C, FX_F * C, FX_F * C, C * FX_F};
    size_t at = (size_t)FX_V * C; /* after wte */
    for (int i = 0; i < k && i < 7; i++) at += FX_L * per[i];
    if (k == 8) at += C; /* after ln_f */
    return k < 7 ? at + (size_t)l * per[k] : at;
}

static void test_header_gives_the_shape(void **state) {
    (void)state;
    struct model_shape s;
    int version;
    char err[CKPT_ERR_LEN];
    assert_int_equal(llmc_read_header(MODEL, &s, &version, err), 0);
    assert_int_equal(version, LLMC_VERSION_FP32);
    assert_int_equal(s.arch, ARCH_LLAMA);
    assert_int_equal(s.L, FX_L), assert_int_equal(s.C, FX_C), assert_int_equal(s.NH, FX_NH);
    assert_int_equal(s.KV, FX_KV), assert_int_equal(s.V, FX_V), assert_int_equal(s.Vp, FX_V);
    assert_int_equal(s.F, FX_F); /* from the file's size */
    assert_int_equal(s.maxT, FX_BLOCK);
    assert_true(s.rope_theta == 500000.0f && s.rope_scaled);
    assert_int_equal(llmc_file_bytes(&s, DTYPE_FP32), 1024 + 4 * 8272);
}

static void test_tensors_at_write_tensors_offsets(void **state) {
    (void)state;
    struct fixture fx = read_fixture();
    assert_int_equal(model_elems(&fx), 8272);
    struct model_shape s = fixture_shape();
    struct llmc_reader r;
    char err[CKPT_ERR_LEN];
    if (llmc_open(&r, MODEL, &s, err) != 0) fail_msg("%s", err);
    const struct { struct tensor_id id; int k, l; } cases[] = {
        {model_tensor_id(MODEL_WTE), -1, 0},          {layer_tensor_id(1, LAYER_LN1_W), 0, 1},
        {layer_tensor_id(1, LAYER_QKV_W), 1, 1},      {layer_tensor_id(0, LAYER_ATTPROJ_W), 2, 0},
        {layer_tensor_id(1, LAYER_FC_W), 4, 1},       {layer_tensor_id(0, LAYER_FC2_W), 5, 0},
        {layer_tensor_id(1, LAYER_FCPROJ_W), 6, 1},   {model_tensor_id(MODEL_LNF_W), 7, 0},
        {model_tensor_id(MODEL_LM), 8, 0},
    };
    float got[16];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t at = cases[i].k < 0 ? 0 : ref_offset(cases[i].k, cases[i].l);
        assert_int_equal(llmc_tensor_offset(&s, cases[i].id), at);
        if (llmc_read(&r, cases[i].id, 0, 16, got, DTYPE_FP32, err) != 0) fail_msg("%s", err);
        for (int j = 0; j < 16; j++) assert_memory_equal(&got[j], fx.bytes + 1024 + 4 * (at + (size_t)j), 4);
    }
    /* lm_head is last: its last element is the model part's last float */
    if (llmc_read(&r, model_tensor_id(MODEL_LM), FX_V * FX_C - 1, 1, got, DTYPE_FP32, err) != 0) fail_msg("%s", err);
    assert_memory_equal(got, fx.bytes + 1024 + 4 * (8272 - 1), 4);
    /* no wpe, lnfb or biases in a LLaMA file */
    assert_int_equal(llmc_tensor_numel(&s, model_tensor_id(MODEL_WPE)), 0);
    assert_int_equal(llmc_tensor_numel(&s, layer_tensor_id(0, LAYER_QKV_B)), 0);
    llmc_close(&r);
    free(fx.bytes);
}

/* The fixture's model loaded whole, saved in file_dt, loaded back. */
static void round_trip(enum dtype file_dt) {
    struct model_shape s = fixture_shape();
    struct model_layout lay;
    layout_init_whole(&lay, s);
    float *a = malloc(lay.total * sizeof *a), *b = malloc(lay.total * sizeof *b);
    assert_true(a && b);
    char err[CKPT_ERR_LEN], out[256];
    path_in(out, sizeof out, file_dt == DTYPE_BF16 ? "rt16.bin" : "rt32.bin");
    if (llmc_load(MODEL, &lay, a, DTYPE_FP32, err) != 0) fail_msg("%s", err);
    if (llmc_save(out, &lay, a, DTYPE_FP32, file_dt, err) != 0) fail_msg("%s", err);
    struct model_shape back;
    int version;
    assert_int_equal(llmc_read_header(out, &back, &version, err), 0);
    assert_int_equal(version, file_dt == DTYPE_BF16 ? LLMC_VERSION_BF16 : LLMC_VERSION_FP32);
    assert_int_equal(back.F, FX_F), assert_int_equal(back.KV, FX_KV), assert_int_equal(back.arch, ARCH_LLAMA);
    assert_true(back.rope_theta == s.rope_theta && back.rope_scaled == s.rope_scaled);
    if (llmc_load(out, &lay, b, DTYPE_FP32, err) != 0) fail_msg("%s", err);
    for (size_t i = 0; i < lay.total; i++) {
        float want = file_dt == DTYPE_BF16 ? bf16_to_f32(f32_to_bf16(a[i])) : a[i];
        assert_memory_equal(&b[i], &want, 4);
    }
    if (file_dt == DTYPE_FP32) { /* the data section is the reference's, byte for byte */
        struct fixture fx = read_fixture();
        FILE *f = fopen(out, "rb");
        assert_non_null(f);
        unsigned char *bytes = malloc(4 * 8272 + 1024);
        assert_non_null(bytes);
        assert_int_equal(fread(bytes, 1, 4 * 8272 + 1024, f), 4 * 8272 + 1024);
        assert_int_equal(fgetc(f), EOF);
        fclose(f);
        assert_memory_equal(bytes + 1024, fx.bytes + 1024, 4 * 8272);
        assert_memory_equal(bytes, fx.bytes, 8 * 4); /* magic ... n_embd */
        free(bytes);
        free(fx.bytes);
    }
    free(a);
    free(b);
}

static void test_round_trip_fp32(void **state) { (void)state; round_trip(DTYPE_FP32); }
static void test_round_trip_bf16(void **state) { (void)state; round_trip(DTYPE_BF16); }

/* The model part with header slot `slot` set to `value` and `extra` bytes
 * cut (negative) or appended: refused, naming `want`. */
static void refused(int slot, int32_t value, int extra, const char *want) {
    struct fixture fx = read_fixture();
    size_t n = 1024 + 4 * 8272;
    if (slot >= 0) memcpy(fx.bytes + 4 * slot, &value, 4);
    char bad[160], err[CKPT_ERR_LEN] = "";
    path_in(bad, sizeof bad, "bad.bin");
    spit(bad, fx.bytes, (size_t)((long)n + extra)); /* appended bytes: the fixture's own next ones */
    struct model_shape s;
    int version;
    assert_int_equal(llmc_read_header(bad, &s, &version, err), -1);
    if (!strstr(err, want)) fail_msg("slot %d = %d, %+d bytes: \"%s\" does not say \"%s\"", slot, value, extra, err, want);
    struct llmc_reader r;
    struct model_shape expect = fixture_shape();
    assert_int_equal(llmc_open(&r, bad, &expect, err), -1);
    if (!strstr(err, want)) fail_msg("llmc_open: \"%s\" does not say \"%s\"", err, want);
    free(fx.bytes);
}

static void test_refused_headers(void **state) {
    (void)state;
    refused(H_MAGIC, 20240802, 0, "not an llm.c model file");
    refused(H_VERSION, 4, 0, "unsupported llm.c LLaMA model version 4");
    refused(H_KV_HEADS, 3, 0, "n_kv_head 3 does not divide n_head 4");
    refused(H_KV_HEADS, 0, 0, "n_kv_head is 0");
    refused(H_EMBD, 18, 0, "n_head 4 does not divide n_embd 18");
    refused(H_VOCAB, 65, 0, "cannot be recovered"); /* sizes not matching */
    refused(H_VOCAB, 1000, 0, "truncated");
    refused(H_MULTIPLE_OF, 32, 0, "not a multiple of the header's multiple_of (32)");
    refused(H_NORM_EPS, 1, 0, "norm_eps is 1");
    refused(H_SCALED_ROPE, 2, 0, "use_scaled_rope is 2");
    refused(H_ROPE_THETA, 0, 0, "rope_theta is 0");
    refused(-1, 0, 4, "cannot be recovered");   /* one element too many: F not recoverable */
    refused(-1, 0, -4, "cannot be recovered");  /* one too few */
    refused(-1, 0, 2, "whole 4-byte elements");
    refused(-1, 0, -(1024 + 4 * 8272 - 100), "truncated"); /* not even a header */
}

/* GPT-2's header too: heads must divide n_embd (a fuzzed n_head near
 * INT_MAX overflowed the layout's q, k, v rows). */
static void test_gpt2_heads_must_divide_embd(void **state) {
    (void)state;
    struct model_shape s = {.L = 1, .C = 8, .NH = 2, .T = 4, .V = 50, .Vp = 128};
    struct model_layout lay;
    layout_init_whole(&lay, s);
    float *w = calloc(lay.total, sizeof *w);
    assert_non_null(w);
    char path[256], err[CKPT_ERR_LEN];
    path_in(path, sizeof path, "gpt2.bin");
    if (llmc_save(path, &lay, w, DTYPE_FP32, DTYPE_FP32, err) != 0) fail_msg("%s", err);
    free(w);
    size_t n;
    unsigned char *b = slurp(path, &n);
    int32_t nh = 1751347809;
    memcpy(b + 4 * 5, &nh, 4);
    spit(path, b, n);
    free(b);
    int version;
    assert_int_equal(llmc_read_header(path, &s, &version, err), -1);
    assert_non_null(strstr(err, "n_head 1751347809 does not divide n_embd 8"));
}

/* What the writer cannot store is not written. */
static void test_writer_refuses_fractional_theta(void **state) {
    (void)state;
    struct model_shape s = fixture_shape();
    s.rope_theta = 10000.5f;
    struct llmc_writer w;
    char out[160], err[CKPT_ERR_LEN];
    path_in(out, sizeof out, "theta.bin");
    assert_int_equal(llmc_create(&w, out, &s, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "rope_theta 10000.5 is not a positive integer"));
    assert_int_equal(access(out, F_OK), -1);
}

static void llama_config(struct config *c, const char *init_from) {
    config_defaults(c);
    char err[CONFIG_ERR_LEN];
    if (config_load_file(c, "configs/tiny.conf", err) != 0) fail_msg("%s", err);
    snprintf(c->train_data, sizeof c->train_data, "%s", TRAIN);
    snprintf(c->val_data, sizeof c->val_data, "%s", VAL);
    snprintf(c->init_from, sizeof c->init_from, "%s", init_from);
    c->val_every = 0, c->val_batches = 1, c->threads = 1, c->steps = 3, c->warmup_steps = 0, c->sample_tokens = 0;
    c->d_model = FX_C, c->vocab_size = FX_V, c->seq_len = 16;
    c->rope_theta = 500000.0f, c->rope_scaled = true;
    c->act_dtype = c->param_dtype = c->grad_dtype = DTYPE_FP32;
}

static int *key_kv(struct config *c) { return &c->n_kv_head; }
static int *key_ffn(struct config *c) { return &c->ffn_dim; }
static int *key_layers(struct config *c) { return &c->n_layer; }

/* --init_from file: the architecture, KV and F adopted; trains; --save
 * writes a LLaMA file that reads back at the shape. */
static void init_from_trains(const char *file) {
    struct config c;
    llama_config(&c, file);
    char err[TRAINER_ERR_LEN], saved[160];
    path_in(saved, sizeof saved, "saved.bin");
    snprintf(c.save, sizeof c.save, "%s", saved);
    if (trainer_adopt_model_file(&c, err) != 0) fail_msg("adopt: %s", err);
    assert_int_equal(c.arch, ARCH_LLAMA);
    assert_int_equal(c.n_kv_head, FX_KV), assert_int_equal(c.ffn_dim, FX_F), assert_int_equal(c.max_seq_len, FX_BLOCK);
    if (config_validate(&c, err) != 0) fail_msg("validate: %s", err);
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    if (trainer_open(tr, &c, &GRID, NULL, err) != 0) fail_msg("trainer_open: %s", err);
    if (trainer_run(tr, err) != 0) fail_msg("trainer_run: %s", err);
    float val = trainer_validate(tr); /* a run with a non-finite loss fails trainer_run already */
    assert_true(isfinite(val) && val > 0.0f && val < 10.0f);
    trainer_close(tr);
    free(tr);
    struct model_shape back, want = fixture_shape();
    int version;
    char e2[CKPT_ERR_LEN];
    if (llmc_read_header(saved, &back, &version, e2) != 0) fail_msg("%s", e2);
    struct llmc_reader r;
    if (llmc_open(&r, saved, &want, e2) != 0) fail_msg("%s", e2);
    llmc_close(&r);
}

static void test_init_from_fp32_file(void **state) { (void)state; init_from_trains(MODEL); }

static void test_init_from_bf16_file(void **state) {
    (void)state;
    struct model_shape s = fixture_shape();
    struct model_layout lay;
    layout_init_whole(&lay, s);
    float *a = malloc(lay.total * sizeof *a);
    assert_non_null(a);
    char m16[160], err[CKPT_ERR_LEN];
    path_in(m16, sizeof m16, "m16.bin");
    if (llmc_load(MODEL, &lay, a, DTYPE_FP32, err) != 0 || llmc_save(m16, &lay, a, DTYPE_FP32, DTYPE_BF16, err) != 0)
        fail_msg("%s", err);
    free(a);
    init_from_trains(m16);
}

/* The keys the file fixes: a config that says otherwise is refused. */
static void test_init_from_conflicts(void **state) {
    (void)state;
    const struct { int *(*key)(struct config *); int value; const char *want; } cases[] = {
        {NULL, 0, "give --rope_theta 500000 --rope_scaled 1"},
        {key_kv, 4, "n_kv_head: config 4, file 2"},
        {key_ffn, 64, "ffn_dim: config 64, file 48"},
        {key_layers, 3, "n_layer: config 3, file 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct config c;
        char err[TRAINER_ERR_LEN] = "";
        llama_config(&c, MODEL);
        if (cases[i].key) *cases[i].key(&c) = cases[i].value;
        else c.rope_theta = 10000.0f;
        assert_int_equal(trainer_adopt_model_file(&c, err), -1);
        if (!strstr(err, cases[i].want)) fail_msg("\"%s\" does not say \"%s\"", err, cases[i].want);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_gives_the_shape),
        cmocka_unit_test(test_tensors_at_write_tensors_offsets),
        cmocka_unit_test(test_round_trip_fp32),
        cmocka_unit_test(test_round_trip_bf16),
        cmocka_unit_test(test_refused_headers),
        cmocka_unit_test(test_gpt2_heads_must_divide_embd),
        cmocka_unit_test(test_writer_refuses_fractional_theta),
        cmocka_unit_test(test_init_from_fp32_file),
        cmocka_unit_test(test_init_from_bf16_file),
        cmocka_unit_test(test_init_from_conflicts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
