/* Checkpoints: llm.c model files (round trips, dtype conversion, the exact
 * llm.c tensor order, rejections) and resume states (sections, meta,
 * rejections), plus the atomic-write guarantees both rely on. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "checkpoint.h"

enum { L = 2, C = 8, NH = 2, T = 4, V = 200 };

struct fixture {
    char dir[64];
    struct model_layout lay;
    float *p32;  /* distinct fp32 values, most not representable in bf16 */
    bf16 *p16;   /* distinct bf16 values */
};

static int setup(void **state) {
    struct fixture *fx = calloc(1, sizeof *fx);
    if (!fx) return -1;
    snprintf(fx->dir, sizeof fx->dir, "/tmp/test_checkpoint.XXXXXX");
    if (!mkdtemp(fx->dir)) return -1;
    layout_init_whole(&fx->lay, (struct model_shape){.L = L, .C = C, .NH = NH, .T = T, .V = V});
    fx->p32 = malloc(fx->lay.total * sizeof(float));
    fx->p16 = malloc(fx->lay.total * sizeof(bf16));
    if (!fx->p32 || !fx->p16) return -1;
    for (size_t i = 0; i < fx->lay.total; i++) {
        fx->p32[i] = 1.0f + (float)i * 0.001234567f;
        fx->p16[i] = (bf16)(0x3c00 + i); /* distinct, finite for every i < total */
    }
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    struct fixture *fx = *state;
    DIR *d = opendir(fx->dir);
    if (d) {
        char p[sizeof fx->dir + sizeof((struct dirent *)0)->d_name + 1];
        for (struct dirent *e; (e = readdir(d));) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(p, sizeof p, "%s/%s", fx->dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(fx->dir);
    free(fx->p32);
    free(fx->p16);
    free(fx);
    return 0;
}

static void path_in(const struct fixture *fx, const char *name, char out[256]) {
    snprintf(out, 256, "%s/%s", fx->dir, name);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 16);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* ---- llm.c model files ---- */

static void test_llmc_fp32_roundtrip_v3(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p[256];
    path_in(fx, "m3.bin", p);
    assert_int_equal(llmc_save(p, &fx->lay, fx->p32, DTYPE_FP32, DTYPE_FP32, err), 0);
    float *back = calloc(fx->lay.total, sizeof *back);
    assert_int_equal(llmc_load(p, &fx->lay, back, DTYPE_FP32, err), 0);
    assert_memory_equal(back, fx->p32, fx->lay.total * sizeof *back);

    struct model_shape s;
    int version = 0;
    assert_int_equal(llmc_read_header(p, &s, &version, err), 0);
    assert_int_equal(version, 3);
    assert_int_equal(s.L, L), assert_int_equal(s.C, C), assert_int_equal(s.NH, NH);
    assert_int_equal(s.T, T), assert_int_equal(s.V, V), assert_int_equal(s.Vp, 256);
    size_t n;
    free(slurp(p, &n));
    assert_int_equal(n, 1024 + fx->lay.total * 4);
    free(back);
}

static void test_llmc_bf16_roundtrip_v5(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p[256];
    path_in(fx, "m5.bin", p);
    assert_int_equal(llmc_save(p, &fx->lay, fx->p16, DTYPE_BF16, DTYPE_BF16, err), 0);
    bf16 *back = calloc(fx->lay.total, sizeof *back);
    assert_int_equal(llmc_load(p, &fx->lay, back, DTYPE_BF16, err), 0);
    assert_memory_equal(back, fx->p16, fx->lay.total * sizeof *back);
    struct model_shape s;
    int version = 0;
    assert_int_equal(llmc_read_header(p, &s, &version, err), 0);
    assert_int_equal(version, 5);
    size_t n;
    free(slurp(p, &n));
    assert_int_equal(n, 1024 + fx->lay.total * 2);
    free(back);
}

/* fp32 -> v5 rounds (RNE); bf16 -> fp32 widens exactly; v3 -> bf16 rounds. */
static void test_llmc_dtype_conversion(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p5[256], p3[256];
    size_t N = fx->lay.total;
    path_in(fx, "conv5.bin", p5);
    path_in(fx, "conv3.bin", p3);
    float *f = calloc(N, sizeof *f);
    bf16 *h = calloc(N, sizeof *h);

    assert_int_equal(llmc_save(p5, &fx->lay, fx->p32, DTYPE_FP32, DTYPE_BF16, err), 0);
    assert_int_equal(llmc_load(p5, &fx->lay, f, DTYPE_FP32, err), 0);
    size_t changed = 0;
    for (size_t i = 0; i < N; i++) {
        assert_true(f32_bits(f[i]) == f32_bits(round_to_bf16(fx->p32[i])));
        changed += f[i] != fx->p32[i];
    }
    assert_true(changed > N / 2); /* the rounding really happened */

    assert_int_equal(llmc_save(p3, &fx->lay, fx->p32, DTYPE_FP32, DTYPE_FP32, err), 0);
    assert_int_equal(llmc_load(p3, &fx->lay, h, DTYPE_BF16, err), 0);
    for (size_t i = 0; i < N; i++) assert_int_equal(h[i], f32_to_bf16(fx->p32[i]));

    assert_int_equal(llmc_save(p3, &fx->lay, fx->p16, DTYPE_BF16, DTYPE_FP32, err), 0);
    assert_int_equal(llmc_load(p3, &fx->lay, f, DTYPE_FP32, err), 0);
    for (size_t i = 0; i < N; i++) assert_true(f32_bits(f[i]) == (uint32_t)fx->p16[i] << 16);
    free(f);
    free(h);
}

/* The file must be llm.c's: every tensor kind stacked over layers. Params
 * hold their own flat index, so each file element says where it came from;
 * the expected order is built here from sizes, independent of layout.c. */
static void test_llmc_file_order(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p[256];
    size_t N = fx->lay.total;
    float *idx = malloc(N * sizeof *idx);
    for (size_t i = 0; i < N; i++) idx[i] = (float)i;
    path_in(fx, "order.bin", p);
    assert_int_equal(llmc_save(p, &fx->lay, idx, DTYPE_FP32, DTYPE_FP32, err), 0);
    size_t n;
    unsigned char *raw = slurp(p, &n);
    int32_t h[256];
    memcpy(h, raw, sizeof h);
    int32_t want_head[8] = {20240326, 3, T, V, L, NH, C, 256};
    for (int i = 0; i < 8; i++) assert_int_equal(h[i], want_head[i]);
    for (int i = 8; i < 256; i++) assert_int_equal(h[i], 0);
    float *file = malloc(N * sizeof *file);
    memcpy(file, raw + 1024, N * sizeof *file);

    /* Our buffer: [wte wpe lnfw lnfb] then per layer the 12 tensors. */
    const size_t Vp = 256, wte = Vp * C, wpe = (size_t)T * C, embed = wte + wpe + 2 * C;
    const size_t sizes[12] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
    size_t layer_size = 0, within[12];
    for (int t = 0; t < 12; t++) within[t] = layer_size, layer_size += sizes[t];
    assert_int_equal(N, embed + L * layer_size);

    size_t k = 0;
    for (size_t i = 0; i < wte + wpe; i++, k++) assert_true(file[k] == (float)i);
    /* Spot check: right after wte+wpe comes layer 0's ln1w[0], and layer 1's
     * ln1w follows layer 0's ln1w directly. */
    assert_true(file[k] == (float)embed);
    assert_true(file[k + C] == (float)(embed + layer_size));
    for (int t = 0; t < 12; t++)
        for (int l = 0; l < L; l++)
            for (size_t e = 0; e < sizes[t]; e++, k++)
                assert_true(file[k] == (float)(embed + l * layer_size + within[t] + e));
    for (size_t i = 0; i < 2 * C; i++, k++) assert_true(file[k] == (float)(wte + wpe + i)); /* lnfw, lnfb */
    assert_int_equal(k, N);
    free(file);
    free(raw);
    free(idx);
}

/* Saves a valid v3 file, lets `edit` damage a copy, and expects llmc_load
 * to fail with a message containing `want`. */
static void expect_llmc_reject(struct fixture *fx, const char *name, void (*edit)(unsigned char *, size_t *),
                               const char *want) {
    char err[CKPT_ERR_LEN] = "", p[256];
    path_in(fx, name, p);
    assert_int_equal(llmc_save(p, &fx->lay, fx->p32, DTYPE_FP32, DTYPE_FP32, err), 0);
    size_t n;
    unsigned char *b = slurp(p, &n);
    edit(b, &n);
    spit(p, b, n);
    free(b);
    float *dst = calloc(fx->lay.total, sizeof *dst);
    err[0] = 0;
    assert_int_equal(llmc_load(p, &fx->lay, dst, DTYPE_FP32, err), -1);
    if (!strstr(err, want)) fail_msg("error '%s' does not contain '%s'", err, want);
    free(dst);
}

static void set_int(unsigned char *b, int slot, int32_t v) { memcpy(b + 4 * slot, &v, 4); }
static void bad_magic(unsigned char *b, size_t *n) { (void)n, set_int(b, 0, 20240520); }
static void version4(unsigned char *b, size_t *n) { (void)n, set_int(b, 1, 4); }
static void truncate4(unsigned char *b, size_t *n) { (void)b, *n -= 4; }
static void append4(unsigned char *b, size_t *n) { memset(b + *n, 0, 4), *n += 4; }
static void bad_vp(unsigned char *b, size_t *n) { (void)n, set_int(b, 7, 200); }
static void header_only_half(unsigned char *b, size_t *n) { (void)b, *n = 512; }

static void test_llmc_rejects(void **state) {
    struct fixture *fx = *state;
    expect_llmc_reject(fx, "magic.bin", bad_magic, "magic 20240520");
    expect_llmc_reject(fx, "v4.bin", version4, "version 4");
    expect_llmc_reject(fx, "trunc.bin", truncate4, "truncated");
    expect_llmc_reject(fx, "trail.bin", append4, "trailing");
    expect_llmc_reject(fx, "vp.bin", bad_vp, "padded_vocab_size is 200");
    expect_llmc_reject(fx, "half.bin", header_only_half, "truncated");

    /* read_header applies the same header checks. */
    char err[CKPT_ERR_LEN] = "", p[256];
    struct model_shape s;
    int version;
    path_in(fx, "magic.bin", p);
    assert_int_equal(llmc_read_header(p, &s, &version, err), -1);
    assert_non_null(strstr(err, "not an llm.c model file"));
    path_in(fx, "absent.bin", p);
    assert_int_equal(llmc_read_header(p, &s, &version, err), -1);
    assert_non_null(strstr(err, "cannot open"));
}

static void test_llmc_shape_mismatch(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p[256];
    path_in(fx, "shape.bin", p);
    assert_int_equal(llmc_save(p, &fx->lay, fx->p32, DTYPE_FP32, DTYPE_FP32, err), 0);
    struct model_layout other;
    layout_init_whole(&other, (struct model_shape){.L = 3, .C = C, .NH = NH, .T = T, .V = V});
    float *dst = calloc(other.total, sizeof *dst);
    assert_int_equal(llmc_load(p, &other, dst, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "n_layer is 2 in the file, 3 in the config"));
    assert_non_null(strstr(err, "shape.bin"));
    free(dst);
    layout_init_whole(&other, (struct model_shape){.L = L, .C = C, .NH = NH, .T = 8, .V = V});
    dst = calloc(other.total, sizeof *dst);
    assert_int_equal(llmc_load(p, &other, dst, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "max_seq_len is 4 in the file, 8 in the config"));
    free(dst);
}

/* ---- resume states ---- */

enum { NP = 100, NM = 37 };

struct resume_data {
    bf16 params[NP];
    float m[NM], v[NM];
};

static struct resume_meta sample_meta(void) {
    return (struct resume_meta){.step = (1ull << 40) + 5, .seed = 0xdeadbeefcafef00dull, .data_epoch = 3,
                                .data_cursor = 123456789012ull,
                                .shape = {.L = L, .C = C, .NH = NH, .T = T, .V = V, .Vp = 256},
                                .fingerprint = 0x9e3779b9u};
}

static void save_sample_state(const char *p, struct resume_data *d) {
    for (int i = 0; i < NP; i++) d->params[i] = (bf16)(0x4000 + 7 * i);
    for (int i = 0; i < NM; i++) d->m[i] = -0.5f * (float)i - 0.125f, d->v[i] = 1e-8f * (float)(i + 1);
    struct state_section s[3] = {
        {"params", DTYPE_BF16, NP, d->params},
        {"adam_m", DTYPE_FP32, NM, d->m},
        {"adam_v", DTYPE_FP32, NM, d->v},
    };
    struct resume_meta meta = sample_meta();
    char err[CKPT_ERR_LEN] = "";
    assert_int_equal(resume_save(p, &meta, s, 3, err), 0);
}

static void test_resume_roundtrip(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p[256];
    path_in(fx, "state.bin", p);
    struct resume_data d, back;
    save_sample_state(p, &d);
    memset(&back, 0, sizeof back);
    /* Another order than saved. */
    struct state_section s[3] = {
        {"adam_v", DTYPE_FP32, NM, back.v},
        {"params", DTYPE_BF16, NP, back.params},
        {"adam_m", DTYPE_FP32, NM, back.m},
    };
    struct resume_meta meta = {0}, want = sample_meta();
    assert_int_equal(resume_load(p, &meta, s, 3, err), 0);
    assert_memory_equal(back.params, d.params, sizeof d.params);
    assert_memory_equal(back.m, d.m, sizeof d.m);
    assert_memory_equal(back.v, d.v, sizeof d.v);
    assert_true(meta.step == want.step && meta.seed == want.seed);
    assert_true(meta.data_epoch == want.data_epoch && meta.data_cursor == want.data_cursor);
    assert_int_equal(meta.fingerprint, want.fingerprint);
    assert_memory_equal(&meta.shape, &want.shape, sizeof meta.shape);

    /* Sections in the file that the caller does not ask for are skipped. */
    float only_v[NM] = {0};
    struct resume_meta meta2 = {0};
    struct state_section one = {"adam_v", DTYPE_FP32, NM, only_v};
    assert_int_equal(resume_load(p, &meta2, &one, 1, err), 0);
    assert_memory_equal(only_v, d.v, sizeof only_v);
    assert_true(meta2.step == want.step);

    size_t n;
    unsigned char *raw = slurp(p, &n);
    uint32_t magic;
    memcpy(&magic, raw, 4);
    assert_int_equal(magic, 0x53484C42u);
    assert_int_equal(n, 72 + 3 * 44 + NP * 2 + 2 * NM * 4);
    free(raw);
}

static void test_resume_rejects(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p[256];
    path_in(fx, "bad_state.bin", p);
    struct resume_data d, back;
    save_sample_state(p, &d);
    struct resume_meta meta;

    struct state_section missing = {"adam_w", DTYPE_FP32, NM, back.m};
    assert_int_equal(resume_load(p, &meta, &missing, 1, err), -1);
    assert_non_null(strstr(err, "section 'adam_w' is missing"));

    struct state_section wrong_n = {"adam_m", DTYPE_FP32, NM - 1, back.m};
    assert_int_equal(resume_load(p, &meta, &wrong_n, 1, err), -1);
    assert_non_null(strstr(err, "'adam_m'"));
    assert_non_null(strstr(err, "37 fp32 elements in the file, 36 fp32 expected"));

    float wide[NP];
    struct state_section wrong_dt = {"params", DTYPE_FP32, NP, wide};
    assert_int_equal(resume_load(p, &meta, &wrong_dt, 1, err), -1);
    assert_non_null(strstr(err, "100 bf16 elements in the file, 100 fp32 expected"));

    size_t n;
    unsigned char *raw = slurp(p, &n);
    struct state_section ok = {"params", DTYPE_BF16, NP, back.params};
    spit(p, raw, n - 1); /* last section cut short */
    assert_int_equal(resume_load(p, &meta, &ok, 1, err), -1);
    assert_non_null(strstr(err, "truncated"));
    assert_non_null(strstr(err, "'adam_v'"));
    spit(p, raw, 40); /* header cut short */
    assert_int_equal(resume_load(p, &meta, &ok, 1, err), -1);
    assert_non_null(strstr(err, "truncated"));
    raw[n] = 0;
    spit(p, raw, n + 1);
    assert_int_equal(resume_load(p, &meta, &ok, 1, err), -1);
    assert_non_null(strstr(err, "trailing"));

    unsigned char saved = raw[0];
    raw[0] ^= 0xff;
    spit(p, raw, n);
    assert_int_equal(resume_load(p, &meta, &ok, 1, err), -1);
    assert_non_null(strstr(err, "magic"));
    raw[0] = saved;
    uint32_t v2 = 2;
    memcpy(raw + 4, &v2, 4);
    spit(p, raw, n);
    assert_int_equal(resume_load(p, &meta, &ok, 1, err), -1);
    assert_non_null(strstr(err, "version 2"));
    free(raw);
}

/* ---- atomic writes ---- */

static void test_atomic_writes(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p[256];
    path_in(fx, "a.bin", p);
    assert_int_equal(llmc_save(p, &fx->lay, fx->p32, DTYPE_FP32, DTYPE_BF16, err), 0);
    path_in(fx, "a.state", p);
    struct resume_data d;
    save_sample_state(p, &d);
    DIR *dir = opendir(fx->dir);
    assert_non_null(dir);
    int files = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        if (e->d_name[0] == '.') continue;
        files++;
        if (strstr(e->d_name, ".tmp.")) fail_msg("temp file left behind: %s", e->d_name);
    }
    closedir(dir);
    assert_int_equal(files, 2);

    path_in(fx, "no/such/dir/m.bin", p);
    err[0] = 0;
    assert_int_equal(llmc_save(p, &fx->lay, fx->p32, DTYPE_FP32, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "cannot create"));
    assert_int_equal(access(p, F_OK), -1);
    struct resume_meta meta = sample_meta();
    struct state_section s = {"params", DTYPE_BF16, NP, d.params};
    err[0] = 0;
    assert_int_equal(resume_save(p, &meta, &s, 1, err), -1);
    assert_non_null(strstr(err, "no/such/dir"));

    /* Overwriting replaces the whole file. */
    path_in(fx, "a.bin", p);
    assert_int_equal(llmc_save(p, &fx->lay, fx->p32, DTYPE_FP32, DTYPE_FP32, err), 0);
    size_t n;
    free(slurp(p, &n));
    assert_int_equal(n, 1024 + fx->lay.total * 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_llmc_fp32_roundtrip_v3, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_bf16_roundtrip_v5, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_dtype_conversion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_file_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_shape_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_atomic_writes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
