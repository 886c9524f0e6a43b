/* Integrity of what the trainer writes and reads: CRC32C against RFC 3720's
 * vectors (both implementations, and the table bit by bit); a resume state
 * with one flipped byte in any part (header, section table, each section's
 * data) is refused, naming the part; NaN and Inf are refused on the way
 * into and out of both file formats, naming the tensor or section and the
 * element; stale temp files of a target are found and removed, and only
 * those. Files live in one mkdtemp directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../train/ckpt/checkpoint.h"
#include "ckpt_whole.h"
#include "crc32c.h"
#include "file_fixture.h"
#include "fileio.h"

enum {
    NP = 96, /* params (bf16) */
    NM = 40, /* master and optim_state1 (fp32) */
    /* resume format version 3 (train/ckpt/ckpt_state_format.c; 2 has the same layout) */
    HEAD = 3 * 4 + 5 * 8 + 6 * 4 + 4 + 512 + 2 * 8 + 4 + 4,
    ENTRY = 32 + 4 + 8 + 4,
    N_SECTIONS = 3
};

struct fixture {
    char dir[64];
};

static int setup(void **state) {
    struct fixture *fx = calloc(1, sizeof *fx);
    if (!fx) return -1;
    snprintf(fx->dir, sizeof fx->dir, "/tmp/shardlab_test_integrity_XXXXXX");
    if (!mkdtemp(fx->dir)) return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    struct fixture *fx = *state;
    scratch_dir_remove(fx->dir);
    free(fx);
    return 0;
}

static void path_in(const struct fixture *fx, const char *name, char out[256]) { path_in_dir(fx->dir, name, out); }



/* ---- CRC32C ---- */

/* The definition: one bit at a time, reflected polynomial 0x82F63B78. */
static uint32_t crc32c_bitwise(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}

static void test_crc32c_vectors(void **state) {
    (void)state;
    /* RFC 3720 B.4, and the usual check value of "123456789" */
    unsigned char zeros[32] = {0}, ones[32], inc[32], dec[32];
    for (int i = 0; i < 32; i++) ones[i] = 0xff, inc[i] = (unsigned char)i, dec[i] = (unsigned char)(31 - i);
    struct { const void *data; size_t n; uint32_t want; } v[] = {
        {"123456789", 9, 0xE3069283u}, {zeros, 32, 0x8A9136AAu}, {ones, 32, 0x62A8AB43u},
        {inc, 32, 0x46DD794Eu},        {dec, 32, 0x113FDB5Cu},   {"", 0, 0u}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        assert_int_equal(crc32c(0, v[i].data, v[i].n), v[i].want);
        assert_int_equal(crc32c_portable(0, v[i].data, v[i].n), v[i].want);
        assert_int_equal(crc32c_bitwise(v[i].data, v[i].n), v[i].want);
    }
    printf("  crc32c: %s\n", crc32c_hardware() ? "SSE4.2 crc32 instruction" : "portable table");
    /* Every length and alignment up to 64, and chained pieces, agree with
     * the bit-by-bit definition. */
    unsigned char buf[200];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof buf; i++) x = x * 1103515245u + 12345u, buf[i] = (unsigned char)(x >> 16);
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n <= 64 + 9; n++) {
            uint32_t want = crc32c_bitwise(buf + off, n);
            assert_int_equal(crc32c(0, buf + off, n), want);
            assert_int_equal(crc32c_portable(0, buf + off, n), want);
            size_t cut = n / 3;
            assert_int_equal(crc32c(crc32c(0, buf + off, cut), buf + off + cut, n - cut), want);
        }
}

/* ---- resume states: one flipped byte anywhere is refused by name ---- */

struct sample {
    bf16 params[NP];
    float master[NM], opt1[NM];
};

static struct resume_meta sample_meta(void) {
    struct resume_meta m = {.step = 1234, .seed = 1337, .data_epoch = 2, .data_cursor = 777, .skipped_steps = 3,
                            .shape = {.L = 2, .C = 32, .NH = 4, .T = 32, .V = 256, .Vp = 256},
                            .fingerprint = 0xabcdef01u,
                            .data = {.files = 2, .bytes = 409600, .digest = 0x1234u}};
    snprintf(m.data.pattern, sizeof m.data.pattern, "data/kjv_*.bin");
    return m;
}

static void save_sample(const char *p, struct sample *d) {
    for (int i = 0; i < NP; i++) d->params[i] = (bf16)(0x3f00 + 3 * i);
    for (int i = 0; i < NM; i++) d->master[i] = 0.25f * (float)i - 3.0f, d->opt1[i] = -1e-3f * (float)i;
    struct state_section s[N_SECTIONS] = {{"params", DTYPE_BF16, NP, d->params},
                                          {"master", DTYPE_FP32, NM, d->master},
                                          {"optim_state1", DTYPE_FP32, NM, d->opt1}};
    struct resume_meta meta = sample_meta();
    char err[CKPT_ERR_LEN];
    if (resume_save(p, &meta, s, N_SECTIONS, err)) fail_msg("%s", err);
}

/* Opens p and finds every section; returns the first error (or "" when
 * all is accepted). */
static void open_and_find_all(const char *p, char err[CKPT_ERR_LEN]) {
    struct resume_reader r;
    struct resume_meta meta;
    err[0] = '\0';
    if (resume_open(&r, p, &meta, err)) return;
    static const struct state_decl want[N_SECTIONS] = {
        {"params", DTYPE_BF16, NP}, {"master", DTYPE_FP32, NM}, {"optim_state1", DTYPE_FP32, NM}};
    for (int i = 0; i < N_SECTIONS; i++)
        if (resume_find(&r, want[i].name, want[i].dtype, want[i].numel, err) < 0) break;
    resume_close(&r);
}

static void test_flipped_byte_refused_by_name(void **state) {
    struct fixture *fx = *state;
    char p[256], err[CKPT_ERR_LEN];
    path_in(fx, "flip.state", p);
    struct sample d;
    save_sample(p, &d);
    size_t n;
    unsigned char *good = slurp(p, &n);
    size_t data0 = HEAD + N_SECTIONS * ENTRY, data1 = data0 + NP * 2, data2 = data1 + NM * 4;
    assert_int_equal(n, data2 + NM * 4);
    open_and_find_all(p, err);
    assert_string_equal(err, "");

    /* Every byte of the file, one at a time, each with one bit flipped. */
    int header = 0, sections[N_SECTIONS] = {0}, other = 0;
    for (size_t at = 0; at < n; at++) {
        unsigned char *bad = malloc(n);
        assert_non_null(bad);
        memcpy(bad, good, n);
        bad[at] ^= (unsigned char)(1u << (at % 8));
        spit(p, bad, n);
        free(bad);
        open_and_find_all(p, err);
        if (!err[0]) fail_msg("byte %zu flipped: accepted", at);
        const char *want;
        if (at < 4) want = "not a resume state";
        else if (at < 8) want = "resume state version";
        else if (at < data0) want = "the header is corrupt";
        else if (at < data1) want = "section 'params' is corrupt";
        else if (at < data2) want = "section 'master' is corrupt";
        else want = "section 'optim_state1' is corrupt";
        if (!strstr(err, want)) fail_msg("byte %zu flipped: expected \"%s\", got: %s", at, want, err);
        if (at >= 8 && at < data0) header++;
        else if (at >= data0) sections[at < data1 ? 0 : at < data2 ? 1 : 2]++;
        else other++;
    }
    /* the step, the data cursor and a weight are among them; the counts
     * show every byte was tried */
    assert_int_equal(header, (int)data0 - 8);
    assert_int_equal(sections[0], NP * 2);
    assert_int_equal(sections[1], NM * 4);
    assert_int_equal(sections[2], NM * 4);
    assert_int_equal(other, 8);
    spit(p, good, n);
    open_and_find_all(p, err);
    assert_string_equal(err, "");
    free(good);
}

/* ---- NaN and Inf never enter or leave a file silently ---- */

static void test_resume_nonfinite_refused(void **state) {
    struct fixture *fx = *state;
    char p[256], err[CKPT_ERR_LEN];
    path_in(fx, "nan.state", p);
    struct sample d;
    save_sample(p, &d);
    size_t n_before;
    unsigned char *before = slurp(p, &n_before);

    /* writing: the element is named and the older file stays */
    struct resume_meta meta = sample_meta();
    static const struct state_decl decls[N_SECTIONS] = {
        {"params", DTYPE_BF16, NP}, {"master", DTYPE_FP32, NM}, {"optim_state1", DTYPE_FP32, NM}};
    struct resume_writer w;
    assert_int_equal(resume_create(&w, p, &meta, decls, N_SECTIONS, err), 0);
    assert_int_equal(resume_write_at(&w, 0, 0, NP, d.params, err), 0);
    float m[NM];
    memcpy(m, d.master, sizeof m);
    m[17] = -INFINITY;
    assert_int_equal(resume_write_at(&w, 1, 10, NM - 10, m + 10, err), -1);
    assert_non_null(strstr(err, "nan.state not saved: section 'master' element 17 is -inf (non-finite)"));
    resume_abort(&w);
    size_t n_after;
    unsigned char *after = slurp(p, &n_after);
    assert_int_equal(n_after, n_before);
    assert_memory_equal(after, before, n_before);
    free(after);

    /* reading: a NaN put in place with valid checksums (as another writer
     * could) is refused too, naming section and element */
    size_t at = HEAD + N_SECTIONS * ENTRY + 41 * 2; /* params element 41 */
    bf16 nan16 = 0x7fc1;
    memcpy(before + at, &nan16, 2);
    uint32_t crc = crc32c(0, before + HEAD + N_SECTIONS * ENTRY, NP * 2);
    memcpy(before + HEAD + 0 * ENTRY + 44, &crc, 4); /* params' table entry */
    uint32_t head_crc = crc32c(0, before + 12, HEAD + N_SECTIONS * ENTRY - 12);
    memcpy(before + 8, &head_crc, 4);
    spit(p, before, n_before);
    struct resume_reader r;
    assert_int_equal(resume_open(&r, p, &meta, err), 0);
    int k = resume_find(&r, "params", DTYPE_BF16, NP, err);
    assert_int_equal(k, 0);
    bf16 got[NP];
    assert_int_equal(resume_read_at(&r, k, 0, 40, got, err), 0); /* before it: fine */
    assert_int_equal(resume_read_at(&r, k, 30, 20, got, err), -1);
    assert_non_null(strstr(err, "nan.state: section 'params' element 41 is nan (non-finite)"));
    resume_close(&r);
    free(before);
}

static void test_llmc_nonfinite_refused(void **state) {
    struct fixture *fx = *state;
    char p[256], err[CKPT_ERR_LEN];
    path_in(fx, "nan.bin", p);
    struct model_shape s = {.L = 2, .C = 8, .NH = 2, .T = 4, .V = 16, .Vp = 128};
    struct model_layout lay;
    layout_init_whole(&lay, s);
    float *w = calloc(lay.total, sizeof *w);
    assert_non_null(w);
    for (size_t i = 0; i < lay.total; i++) w[i] = 0.01f * (float)(i % 97) - 0.4f;
    assert_int_equal(llmc_save(p, &lay, w, DTYPE_FP32, DTYPE_FP32, err), 0);

    /* writing: a NaN in a layer tensor, named with its element */
    struct tensor_info t = layout_layer_tensor(&lay, 1, LAYER_FC_W);
    w[t.offset + 5] = NAN;
    assert_int_equal(llmc_save(p, &lay, w, DTYPE_FP32, DTYPE_BF16, err), -1);
    assert_non_null(strstr(err, "nan.bin not saved: fcw of layer 1 element 5 is nan (non-finite)"));
    w[t.offset + 5] = 0.0f;
    /* a finite fp32 value that rounds to Inf in a bf16 file is refused too */
    w[t.offset + 6] = 3.4e38f;
    assert_int_equal(llmc_save(p, &lay, w, DTYPE_FP32, DTYPE_BF16, err), -1);
    assert_non_null(strstr(err, "fcw of layer 1 element 6 is +inf"));
    w[t.offset + 6] = 0.0f;

    /* reading (--init_from): an Inf in the file */
    size_t n;
    unsigned char *raw = slurp(p, &n);
    size_t wpe_at = 1024 + 4 * llmc_tensor_offset(&s, model_tensor_id(MODEL_WPE));
    float inf = INFINITY;
    memcpy(raw + wpe_at + 4 * 9, &inf, 4);
    spit(p, raw, n);
    free(raw);
    float *back = calloc(lay.total, sizeof *back);
    assert_non_null(back);
    assert_int_equal(llmc_load(p, &lay, back, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "nan.bin: wpe element 9 is +inf (non-finite)"));
    assert_int_equal(llmc_load(p, &lay, back, DTYPE_BF16, err), -1);
    assert_non_null(strstr(err, "wpe element 9 is +inf"));
    free(back);
    free(w);
}

/* ---- stale temp files ---- */

static void touch(const char *p) {
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs("partial", f);
    fclose(f);
}

static bool exists(const char *p) { return access(p, F_OK) == 0; }

static void test_remove_stale_temps(void **state) {
    struct fixture *fx = *state;
    char host[128], target[256], p[6][600], err[FILEIO_ERR_LEN];
    assert_int_equal(gethostname(host, sizeof host), 0);
    host[sizeof host - 1] = '\0';
    path_in(fx, "run.state", target);
    /* a pid that is surely gone: a child that exited and was reaped */
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) _exit(0);
    assert_int_equal(waitpid(child, NULL, 0), child);
    snprintf(p[0], sizeof p[0], "%s.shardlab-tmp.%s.%ld", target, host, (long)child);    /* stale */
    snprintf(p[1], sizeof p[1], "%s.shardlab-tmp.%s.%ld", target, host, (long)getpid()); /* stale: ours */
    snprintf(p[2], sizeof p[2], "%s.shardlab-tmp.%s.%ld", target, host, (long)getppid()); /* live */
    snprintf(p[3], sizeof p[3], "%s.shardlab-tmp.other-host.%ld", target, (long)child);  /* not ours to judge */
    snprintf(p[4], sizeof p[4], "%s/other.state.shardlab-tmp.%s.%ld", fx->dir, host, (long)child); /* other target */
    snprintf(p[5], sizeof p[5], "%s.shardlab-tmp.%s.12x", target, host);                 /* not a pid */
    for (int i = 0; i < 6; i++) touch(p[i]);
    touch(target);

    char *log_text = NULL;
    size_t log_len = 0;
    FILE *log = open_memstream(&log_text, &log_len);
    assert_non_null(log);
    assert_int_equal(atomic_remove_stale(target, log, err), 2);
    fclose(log);
    printf("%s", log_text);
    assert_false(exists(p[0]));
    assert_false(exists(p[1]));
    for (int i = 2; i < 6; i++) assert_true(exists(p[i]));
    assert_true(exists(target));
    char want[700];
    snprintf(want, sizeof want, "removed stale temp file %s (from a killed run, pid %ld)\n", p[0], (long)child);
    assert_non_null(strstr(log_text, want));
    free(log_text);
    /* nothing left to remove; a target in a folder that does not exist has none */
    assert_int_equal(atomic_remove_stale(target, NULL, err), 0);
    path_in(fx, "no/such/dir/x.state", target);
    assert_int_equal(atomic_remove_stale(target, NULL, err), 0);

    /* the temp file of a write in progress carries this scheme's name */
    struct atomic_file af;
    path_in(fx, "w.bin", target);
    assert_int_equal(atomic_open(&af, target, err), 0);
    snprintf(want, sizeof want, "%s.shardlab-tmp.%s.%ld", target, host, (long)getpid());
    assert_string_equal(af.tmp_path, want);
    assert_true(exists(want));
    atomic_abort(&af);
    assert_false(exists(want));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_vectors),
        cmocka_unit_test_setup_teardown(test_flipped_byte_refused_by_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_nonfinite_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_nonfinite_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_stale_temps, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
