/* Resume states: sections, meta and their rejections, u8 sections, the
 * piecewise writer and reader with the holes they refuse, and the
 * atomic-write guarantees every checkpoint relies on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../train/ckpt/checkpoint.h"
#include "ckpt_whole.h"
#include "crc32c.h"
#include "file_fixture.h"
#include "fileio.h"

enum { L = 2, C = 8, NH = 2, T = 4, V = 200 };

struct fixture {
    char dir[64];
    struct model_layout lay; /* a model file for the atomic-write tests */
    float *p32;
};

static int setup(void **state) {
    struct fixture *fx = calloc(1, sizeof *fx);
    if (!fx || scratch_dir_make(fx->dir, "test_resume") != 0) return -1;
    layout_init_whole(&fx->lay, (struct model_shape){.L = L, .C = C, .NH = NH, .T = T, .V = V});
    fx->p32 = malloc(fx->lay.total * sizeof(float));
    if (!fx->p32) return -1;
    for (size_t i = 0; i < fx->lay.total; i++) fx->p32[i] = 1.0f + (float)i * 0.001234567f;
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    struct fixture *fx = *state;
    scratch_dir_remove(fx->dir);
    free(fx->p32);
    free(fx);
    return 0;
}

static void path_in(const struct fixture *fx, const char *name, char out[256]) { path_in_dir(fx->dir, name, out); }

/* ---- resume states ---- */

enum {
    NP = 100,
    NM = 37,
    /* resume format version 3 (train/ckpt/ckpt_state_format.c; 2 has the same layout): the header (magic, version,
     * crc, 5 u64, 6 i32, fingerprint, 512-byte data pattern, 2 u64, digest,
     * count) and one table entry (name, dtype, numel, crc) */
    RESUME_HEAD = 3 * 4 + 5 * 8 + 6 * 4 + 4 + 512 + 2 * 8 + 4 + 4,
    RESUME_ENTRY = 32 + 4 + 8 + 4
};

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
    assert_int_equal(n, RESUME_HEAD + 3 * RESUME_ENTRY + NP * 2 + 2 * NM * 4);
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
    uint32_t v1 = 1; /* the old format, without checksums */
    memcpy(raw + 4, &v1, 4);
    spit(p, raw, n);
    assert_int_equal(resume_load(p, &meta, &ok, 1, err), -1);
    assert_non_null(strstr(err, "resume state version 1, this build reads versions 2 and 3 only (older states carry no "
                            "checksums"));
    free(raw);
}

/* Section names in a file obey the writer's rules: a file with two
 * sections of one name, an empty name or a name without its NUL is refused
 * on open (found by tests/fuzz/fuzz_resume.c: resume_find took the first of
 * two equal names and refused the file's second). */
/* After editing a name in the section table of a raw state file: the
 * header checksum made right again (bytes 8..11 cover [12, end of the
 * table)), so the name rules are what refuses the file, not the checksum. */
static void fix_header_crc(unsigned char *raw, size_t n) {
    unsigned char *names = memmem(raw, n, "params", 7); /* section 0's name: the table's start */
    assert_non_null(names);
    uint32_t count;
    memcpy(&count, names - 4, 4);
    size_t end = (size_t)(names - raw) + (size_t)count * (STATE_NAME_LEN + 4 + 8 + 4);
    uint32_t crc = crc32c(0, raw + 12, end - 12);
    memcpy(raw + 8, &crc, 4);
}

static void test_resume_rejects_bad_names(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p[256];
    path_in(fx, "names.bin", p);
    struct resume_data d;
    save_sample_state(p, &d);
    size_t n;
    unsigned char *raw = slurp(p, &n);
    unsigned char *second = memmem(raw, n, "adam_m", 7); /* the name field of section 1 */
    assert_non_null(second);
    struct resume_reader r;
    struct resume_meta meta;

    memcpy(second, "params", 7);
    fix_header_crc(raw, n);
    spit(p, raw, n);
    assert_int_equal(resume_open(&r, p, &meta, err), -1);
    assert_non_null(strstr(err, "section 'params' appears more than once"));
    assert_null(r.f);

    memset(second, 0, STATE_NAME_LEN);
    fix_header_crc(raw, n);
    spit(p, raw, n);
    assert_int_equal(resume_open(&r, p, &meta, err), -1);
    assert_non_null(strstr(err, "section 1 has a name of 0 characters (1 to 31 allowed)"));

    memset(second, 'a', STATE_NAME_LEN);
    fix_header_crc(raw, n);
    spit(p, raw, n);
    assert_int_equal(resume_open(&r, p, &meta, err), -1);
    assert_non_null(strstr(err, "section 1 has a name of 32 characters"));

    memcpy(second, "adam_w", 7); /* distinct again: opens */
    memset(second + 7, 0, STATE_NAME_LEN - 7);
    fix_header_crc(raw, n);
    spit(p, raw, n);
    assert_int_equal(resume_open(&r, p, &meta, err), 0);
    assert_int_equal(resume_find(&r, "adam_w", DTYPE_FP32, NM, err), 1);
    resume_close(&r);
    free(raw);
}

/* u8 sections (8-bit optimizer codes) round trip, their checksums
 * verified like any section's. */
static void test_resume_u8_sections(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p[256];
    path_in(fx, "u8.bin", p);
    uint8_t codes[NM], back[NM] = {0};
    float absmax[3] = {0.5f, 1e-20f, 3.0f}, back_a[3] = {0};
    for (int i = 0; i < NM; i++) codes[i] = (uint8_t)(251 * i + 3);
    struct state_section s[2] = {{"codes", DTYPE_U8, NM, codes}, {"absmax", DTYPE_FP32, 3, absmax}};
    struct resume_meta meta = sample_meta();
    assert_int_equal(resume_save(p, &meta, s, 2, err), 0);
    struct state_section r[2] = {{"absmax", DTYPE_FP32, 3, back_a}, {"codes", DTYPE_U8, NM, back}};
    assert_int_equal(resume_load(p, &meta, r, 2, err), 0);
    assert_memory_equal(back, codes, NM);
    assert_memory_equal(back_a, absmax, sizeof absmax);
    /* asking for the codes as another dtype names both */
    struct state_section wrong = {"codes", DTYPE_FP32, NM, back_a};
    assert_int_equal(resume_load(p, &meta, &wrong, 1, err), -1);
    assert_non_null(strstr(err, "37 u8 elements in the file, 37 fp32 expected"));
}

/* ---- resume states, piece by piece ---- */

static const struct state_decl SAMPLE_DECLS[4] = {
    {"params", DTYPE_BF16, NP}, {"adam_m", DTYPE_FP32, NM}, {"empty", DTYPE_FP32, 0}, {"adam_v", DTYPE_FP32, NM}};

static const void *sample_data(const struct resume_data *d, int section) {
    const void *data[4] = {d->params, d->m, NULL, d->v};
    return data[section];
}

/* Writes the sample sections in shuffled pieces (4 per section), leaving
 * out piece `skip` of the shuffled order (-1: none); returns the commit's
 * result. */
static int write_state_pieces(const char *p, const struct resume_data *d, uint32_t seed, int skip,
                              char err[CKPT_ERR_LEN]) {
    struct resume_meta meta = sample_meta();
    struct resume_writer w;
    assert_int_equal(resume_create(&w, p, &meta, SAMPLE_DECLS, 4, err), 0);
    struct { int section; size_t first, n; } pc[16];
    int order[16], k = 0;
    for (int s = 0; s < 4; s++) {
        size_t n = SAMPLE_DECLS[s].numel, cut[5] = {0, n / 5, n / 2, n / 2 + 3 > n ? n : n / 2 + 3, n};
        for (int i = 0; i < 4; i++) pc[k].section = s, pc[k].first = cut[i], pc[k].n = cut[i + 1] - cut[i], k++;
    }
    for (int i = 0; i < k; i++) order[i] = i;
    shuffle(order, k, &seed);
    for (int i = 0; i < k; i++) {
        if (i == skip) continue;
        int s = pc[order[i]].section;
        const char *src = sample_data(d, s);
        if (src) src += pc[order[i]].first * dtype_size(SAMPLE_DECLS[s].dtype);
        assert_int_equal(resume_write_at(&w, s, pc[order[i]].first, pc[order[i]].n, src, err), 0);
    }
    return resume_commit(&w, err);
}

static void test_resume_pieces_equal_save(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", whole[256], pieces[256];
    path_in(fx, "whole.state", whole);
    path_in(fx, "pieces.state", pieces);
    struct resume_data d;
    save_sample_state(whole, &d); /* fills d */
    struct state_section s[4] = {{"params", DTYPE_BF16, NP, d.params},
                                 {"adam_m", DTYPE_FP32, NM, d.m},
                                 {"empty", DTYPE_FP32, 0, NULL},
                                 {"adam_v", DTYPE_FP32, NM, d.v}};
    struct resume_meta meta = sample_meta();
    assert_int_equal(resume_save(whole, &meta, s, 4, err), 0);
    size_t na;
    unsigned char *a = slurp(whole, &na);
    assert_int_equal(na, RESUME_HEAD + 4 * RESUME_ENTRY + NP * 2 + 2 * NM * 4);
    for (uint32_t seed = 1; seed <= 4; seed++) {
        if (write_state_pieces(pieces, &d, seed, -1, err)) fail_msg("seed %u: %s", (unsigned)seed, err);
        size_t nb;
        unsigned char *b = slurp(pieces, &nb);
        assert_int_equal(nb, na);
        assert_memory_equal(a, b, na);
        free(b);
    }
    free(a);
    assert_int_equal(files_in_dir(fx->dir), 2);
}

static void test_resume_read_ranges(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p[256];
    path_in(fx, "r.state", p);
    struct resume_data d;
    save_sample_state(p, &d);
    struct resume_reader r;
    struct resume_meta meta = {0}, want = sample_meta();
    assert_int_equal(resume_open(&r, p, &meta, err), 0);
    assert_true(meta.step == want.step && meta.seed == want.seed && meta.data_cursor == want.data_cursor);
    assert_int_equal(meta.fingerprint, want.fingerprint);
    int v = resume_find(&r, "adam_v", DTYPE_FP32, NM, err), pp = resume_find(&r, "params", DTYPE_BF16, NP, err);
    assert_int_equal(v, 2);
    assert_int_equal(pp, 0);
    float f[NM];
    assert_int_equal(resume_read_at(&r, v, 11, 20, f, err), 0);
    assert_memory_equal(f, d.v + 11, 20 * sizeof *f);
    assert_int_equal(resume_read_at(&r, v, NM - 1, 1, f, err), 0);
    assert_true(f32_bits(f[0]) == f32_bits(d.v[NM - 1]));
    bf16 h[NP];
    assert_int_equal(resume_read_at(&r, pp, 0, NP, h, err), 0);
    assert_memory_equal(h, d.params, sizeof h);
    assert_int_equal(resume_read_at(&r, pp, 99, 0, h, err), 0);

    assert_int_equal(resume_find(&r, "adam_w", DTYPE_FP32, NM, err), -1);
    assert_non_null(strstr(err, "r.state: section 'adam_w' is missing"));
    assert_int_equal(resume_find(&r, "adam_m", DTYPE_BF16, NM, err), -1);
    assert_non_null(strstr(err, "section 'adam_m' is 37 fp32 elements in the file, 37 bf16 expected"));
    assert_int_equal(resume_read_at(&r, v, 30, 8, f, err), -1);
    assert_non_null(strstr(err, "8 elements from element 30 are outside section 'adam_v' of 37"));
    assert_int_equal(resume_read_at(&r, 3, 0, 1, f, err), -1);
    assert_non_null(strstr(err, "no section 3 (the file has 3)"));
    resume_close(&r);
    resume_close(&r);
    assert_int_equal(resume_read_at(&r, v, 0, 1, f, err), -1);
    assert_non_null(strstr(err, "not open"));

    /* open refuses what resume_load refused. */
    size_t n;
    unsigned char *raw = slurp(p, &n);
    spit(p, raw, n - 4);
    assert_int_equal(resume_open(&r, p, &meta, err), -1);
    assert_non_null(strstr(err, "truncated"));
    assert_null(r.f);
    resume_close(&r);
    free(raw);
}

static void test_resume_commit_refuses_hole(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p[256];
    path_in(fx, "hole.state", p);
    struct resume_data d;
    save_sample_state(p, &d); /* fills d */
    /* The older state at p is what a complete write gives, so a left-out
     * empty piece (no hole: the commit succeeds) leaves p unchanged too. */
    assert_int_equal(write_state_pieces(p, &d, 5, -1, err), 0);
    size_t n_before;
    unsigned char *before = slurp(p, &n_before);
    /* Each left-out piece in turn (the empty section's pieces are empty,
     * and leaving one of those out leaves no hole). */
    int refused = 0;
    for (int skip = 0; skip < 16; skip++) {
        if (write_state_pieces(p, &d, 5, skip, err) == 0) continue;
        refused++;
        assert_non_null(strstr(err, "hole.state not saved: elements ["));
        assert_non_null(strstr(err, "were never written"));
        size_t n_after;
        unsigned char *after = slurp(p, &n_after);
        assert_int_equal(n_after, n_before);
        assert_memory_equal(after, before, n_before);
        free(after);
        assert_int_equal(files_in_dir(fx->dir), 1);
    }
    /* params, adam_m and adam_v have four non-empty pieces each; the empty
     * section's four pieces are empty. */
    assert_int_equal(refused, 12);
    free(before);

    /* An exact hole, named. */
    struct resume_meta meta = sample_meta();
    struct resume_writer w;
    path_in(fx, "new.state", p);
    assert_int_equal(resume_create(&w, p, &meta, SAMPLE_DECLS, 4, err), 0);
    assert_int_equal(resume_write_at(&w, 0, 0, NP, d.params, err), 0);
    assert_int_equal(resume_write_at(&w, 1, 0, NM, d.m, err), 0);
    assert_int_equal(resume_write_at(&w, 3, 0, 5, d.v, err), 0);
    assert_int_equal(resume_write_at(&w, 3, 9, NM - 9, d.v + 9, err), 0);
    assert_int_equal(resume_commit(&w, err), -1);
    assert_non_null(strstr(err, "elements [5, 9) of section 'adam_v' were never written"));
    assert_int_equal(access(p, F_OK), -1);
    assert_int_equal(files_in_dir(fx->dir), 1);
    assert_int_equal(resume_write_at(&w, 0, 0, 1, d.params, err), -1);
    assert_non_null(strstr(err, "not open"));
    resume_abort(&w);

    /* A bad piece abandons the file at once. */
    assert_int_equal(resume_create(&w, p, &meta, SAMPLE_DECLS, 4, err), 0);
    int temps;
    assert_int_equal(files_and_temps(fx->dir, &temps), 2);
    assert_int_equal(temps, 1);
    assert_int_equal(resume_write_at(&w, 4, 0, 1, d.m, err), -1);
    assert_non_null(strstr(err, "no section 4 (4 declared)"));
    assert_int_equal(files_in_dir(fx->dir), 1);
    resume_abort(&w);
    assert_int_equal(resume_create(&w, p, &meta, SAMPLE_DECLS, 4, err), 0);
    assert_int_equal(resume_write_at(&w, 2, 0, 1, d.m, err), -1);
    assert_non_null(strstr(err, "1 elements from element 0 are outside section 'empty' of 0"));
    assert_int_equal(files_in_dir(fx->dir), 1);
    /* Abort removes the temp file. */
    assert_int_equal(resume_create(&w, p, &meta, SAMPLE_DECLS, 4, err), 0);
    resume_abort(&w);
    assert_int_equal(files_in_dir(fx->dir), 1);
    /* Bad declarations create nothing. */
    struct state_decl twice[2] = {{"m", DTYPE_FP32, 3}, {"m", DTYPE_FP32, 3}};
    assert_int_equal(resume_create(&w, p, &meta, twice, 2, err), -1);
    assert_non_null(strstr(err, "section 'm' given twice"));
    assert_int_equal(files_in_dir(fx->dir), 1);
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
        if (strstr(e->d_name, ".shardlab-tmp.")) fail_msg("temp file left behind: %s", e->d_name);
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
        cmocka_unit_test_setup_teardown(test_resume_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_rejects_bad_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_u8_sections, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_pieces_equal_save, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_read_ranges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_commit_refuses_hole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_atomic_writes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
