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
#include "crc32c.h"

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
static void huge_vocab(unsigned char *b, size_t *n) { (void)n, set_int(b, 3, INT32_MAX); }
static void header_only_half(unsigned char *b, size_t *n) { (void)b, *n = 512; }

static void test_llmc_rejects(void **state) {
    struct fixture *fx = *state;
    expect_llmc_reject(fx, "magic.bin", bad_magic, "magic 20240520");
    expect_llmc_reject(fx, "v4.bin", version4, "version 4");
    expect_llmc_reject(fx, "trunc.bin", truncate4, "truncated");
    expect_llmc_reject(fx, "trail.bin", append4, "trailing");
    expect_llmc_reject(fx, "vp.bin", bad_vp, "padded_vocab_size is 200");
    expect_llmc_reject(fx, "half.bin", header_only_half, "truncated");
    /* a fuzzed vocabulary: refused before padding it overflows an int (UBSan) */
    expect_llmc_reject(fx, "vocab.bin", huge_vocab, "vocab_size is 2147483647 in the header, beyond the largest");

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

/* ---- llm.c model files, piece by piece ---- */

/* Deterministic shuffles (no global RNG state). */
static uint32_t lcg(uint32_t *s) { return *s = *s * 1664525u + 1013904223u; }
static void shuffle(int *a, int n, uint32_t *seed) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(lcg(seed) % (uint32_t)(i + 1)), t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

/* The tensor in the flat buffer (its offset there). */
static struct tensor_info buffer_tensor(const struct model_layout *lay, struct tensor_id id) {
    for (int i = 0; i < layout_num_tensors(lay); i++) {
        struct tensor_info t = layout_tensor(lay, i);
        struct tensor_id k = tensor_id_of(&t);
        if (k.layer == id.layer && k.kind == id.kind) return t;
    }
    fail_msg("no tensor (layer %d, kind %d)", id.layer, id.kind);
    return (struct tensor_info){0};
}

/* Files in fx->dir, and how many of them are temp files. */
static int files_and_temps(const struct fixture *fx, int *temps) {
    DIR *dir = opendir(fx->dir);
    assert_non_null(dir);
    int files = 0;
    *temps = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        if (e->d_name[0] == '.') continue;
        files++;
        *temps += strstr(e->d_name, ".shardlab-tmp.") != NULL;
    }
    closedir(dir);
    return files;
}

/* Files in fx->dir; fails on a leftover temp file. */
static int files_in_dir(const struct fixture *fx) {
    int temps, files = files_and_temps(fx, &temps);
    if (temps) fail_msg("%d temp file(s) left behind", temps);
    return files;
}

/* The i-th of the layout's tensors: embedding, head, then layer by layer. */
static struct tensor_id layout_id(const struct model_layout *lay, int i) {
    struct tensor_info t = layout_tensor(lay, i);
    return tensor_id_of(&t);
}

enum { PIECES = 3, MAX_UNIT_PIECES = LAYER_NUM_TENSORS * PIECES };

struct piece {
    struct tensor_id id;
    size_t first, n;
};

/* One unit's tensors, each cut into PIECES uneven ranges (the middle one
 * may be empty for a 1-element tensor... none here: C = 8). */
static int unit_pieces(const struct model_layout *lay, int unit, struct piece out[MAX_UNIT_PIECES]) {
    int k = 0;
    for (int i = 0; i < layout_num_tensors(lay); i++) {
        struct tensor_info t = layout_tensor(lay, i);
        if (t.unit != unit) continue;
        struct tensor_id id = tensor_id_of(&t);
        size_t numel = t.numel, a = numel / 3, b = 2 * numel / 3 + 1;
        out[k++] = (struct piece){id, 0, a};
        out[k++] = (struct piece){id, a, b - a};
        out[k++] = (struct piece){id, b, numel - b};
    }
    return k;
}

/* Writes the model unit by unit, units and the pieces within each in a
 * shuffled order, leaving out `skip` (a piece index over the whole run, -1:
 * none). Returns llmc_commit's result. */
static int write_pieces(const struct fixture *fx, const char *p, const void *params, enum dtype param_dt,
                        enum dtype file_dt, uint32_t seed, int skip, char err[CKPT_ERR_LEN]) {
    const struct model_layout *lay = &fx->lay;
    struct llmc_writer w;
    assert_int_equal(llmc_create(&w, p, &lay->shape, file_dt, err), 0);
    int units[L + 2], count = 0; /* embedding, head, L layers */
    assert_int_equal(lay->n_units, L + 2);
    for (int u = 0; u < lay->n_units; u++) units[u] = u;
    shuffle(units, lay->n_units, &seed);
    for (int u = 0; u < lay->n_units; u++) {
        struct piece pc[MAX_UNIT_PIECES];
        int order[MAX_UNIT_PIECES], n = unit_pieces(lay, units[u], pc);
        for (int i = 0; i < n; i++) order[i] = i;
        shuffle(order, n, &seed);
        for (int i = 0; i < n; i++, count++) {
            if (count == skip) continue;
            const struct piece *q = &pc[order[i]];
            size_t at = buffer_tensor(lay, q->id).offset + q->first;
            const char *src = (const char *)params + at * dtype_size(param_dt);
            assert_int_equal(llmc_write(&w, q->id, q->first, q->n, src, param_dt, err), 0);
        }
    }
    return llmc_commit(&w, err);
}

static void test_llmc_tensor_offset(void **state) {
    struct fixture *fx = *state;
    const struct model_shape *s = &fx->lay.shape;
    const size_t wte = 256 * C, wpe = T * C, N = fx->lay.total;
    assert_int_equal(llmc_tensor_offset(s, model_tensor_id(MODEL_WTE)), 0);
    assert_int_equal(llmc_tensor_offset(s, model_tensor_id(MODEL_WPE)), wte);
    /* ln1w of both layers, then ln1b of layer 0, then ln1b of layer 1. */
    assert_int_equal(llmc_tensor_offset(s, layer_tensor_id(0, LAYER_LN1_W)), wte + wpe);
    assert_int_equal(llmc_tensor_offset(s, layer_tensor_id(1, LAYER_LN1_W)), wte + wpe + C);
    assert_int_equal(llmc_tensor_offset(s, layer_tensor_id(1, LAYER_LN1_B)), wte + wpe + 3 * C);
    /* qkvw follows ln1w and ln1b of both layers. */
    assert_int_equal(llmc_tensor_offset(s, layer_tensor_id(1, LAYER_QKV_W)), wte + wpe + 4 * C + 3 * C * C);
    /* fcprojb of the last layer ends right before lnfw. */
    assert_int_equal(llmc_tensor_offset(s, layer_tensor_id(L - 1, LAYER_FCPROJ_B)), N - 3 * C);
    assert_int_equal(llmc_tensor_offset(s, model_tensor_id(MODEL_LNF_W)), N - 2 * C);
    assert_int_equal(llmc_tensor_offset(s, model_tensor_id(MODEL_LNF_B)), N - C);
    /* Names of no tensor. */
    assert_true(llmc_tensor_offset(s, layer_tensor_id(L, LAYER_LN1_W)) == SIZE_MAX);
    assert_true(llmc_tensor_offset(s, layer_tensor_id(0, LAYER_NUM_TENSORS)) == SIZE_MAX);
    assert_true(llmc_tensor_offset(s, model_tensor_id(MODEL_NUM_TENSORS)) == SIZE_MAX);
    assert_true(llmc_tensor_offset(s, (struct tensor_id){-2, 0}) == SIZE_MAX);
}

/* Pieces in any order give the very bytes llmc_save writes, for each pair
 * of buffer and file dtype (conversion on the way in included). */
static void test_llmc_pieces_equal_save(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", whole[256], pieces[256];
    path_in(fx, "whole.bin", whole);
    path_in(fx, "pieces.bin", pieces);
    const struct {
        const void *params;
        enum dtype param_dt, file_dt;
    } cases[] = {{fx->p32, DTYPE_FP32, DTYPE_FP32},
                 {fx->p32, DTYPE_FP32, DTYPE_BF16},
                 {fx->p16, DTYPE_BF16, DTYPE_BF16},
                 {fx->p16, DTYPE_BF16, DTYPE_FP32}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        assert_int_equal(llmc_save(whole, &fx->lay, cases[c].params, cases[c].param_dt, cases[c].file_dt, err), 0);
        for (uint32_t seed = 1; seed <= 3; seed++) {
            if (write_pieces(fx, pieces, cases[c].params, cases[c].param_dt, cases[c].file_dt, seed, -1, err))
                fail_msg("case %zu seed %u: %s", c, (unsigned)seed, err);
            size_t na, nb;
            unsigned char *a = slurp(whole, &na), *b = slurp(pieces, &nb);
            assert_int_equal(na, 1024 + fx->lay.total * dtype_size(cases[c].file_dt));
            assert_int_equal(nb, na);
            assert_memory_equal(a, b, na);
            free(a);
            free(b);
        }
    }
    assert_int_equal(files_in_dir(fx), 2);
}

/* Writing a range twice keeps the last write, and coverage still counts. */
static void test_llmc_overwrite(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", whole[256], p[256];
    path_in(fx, "whole.bin", whole);
    path_in(fx, "over.bin", p);
    assert_int_equal(llmc_save(whole, &fx->lay, fx->p32, DTYPE_FP32, DTYPE_FP32, err), 0);
    struct llmc_writer w;
    assert_int_equal(llmc_create(&w, p, &fx->lay.shape, DTYPE_FP32, err), 0);
    float junk[3 * C * C];
    for (int i = 0; i < 3 * C * C; i++) junk[i] = -1.0f;
    struct tensor_id qkv = layer_tensor_id(1, LAYER_QKV_W);
    assert_int_equal(llmc_write(&w, qkv, 10, 50, junk, DTYPE_FP32, err), 0);
    for (int i = 0; i < layout_num_tensors(&fx->lay); i++) {
        struct tensor_id id = layout_id(&fx->lay, i);
        struct tensor_info t = buffer_tensor(&fx->lay, id);
        assert_int_equal(llmc_write(&w, id, 0, t.numel, fx->p32 + t.offset, DTYPE_FP32, err), 0);
    }
    assert_int_equal(llmc_commit(&w, err), 0);
    size_t na, nb;
    unsigned char *a = slurp(whole, &na), *b = slurp(p, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    free(a);
    free(b);
}

/* Any range of any tensor reads back what the buffer held there. */
static void test_llmc_read_ranges(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p3[256], p5[256];
    path_in(fx, "r3.bin", p3);
    path_in(fx, "r5.bin", p5);
    assert_int_equal(llmc_save(p3, &fx->lay, fx->p32, DTYPE_FP32, DTYPE_FP32, err), 0);
    assert_int_equal(llmc_save(p5, &fx->lay, fx->p32, DTYPE_FP32, DTYPE_BF16, err), 0);
    struct llmc_reader r3, r5;
    assert_int_equal(llmc_open(&r3, p3, &fx->lay.shape, err), 0);
    assert_int_equal(llmc_open(&r5, p5, &fx->lay.shape, err), 0);
    assert_int_equal(r3.file_dt, DTYPE_FP32);
    assert_int_equal(r5.file_dt, DTYPE_BF16);
    const struct {
        struct tensor_id id;
        size_t first, n;
    } reads[] = {{layer_tensor_id(1, LAYER_QKV_W), 5, 17},     {layer_tensor_id(0, LAYER_FCPROJ_B), 7, 1},
                 {model_tensor_id(MODEL_WTE), 256 * C - 9, 9},   {model_tensor_id(MODEL_LNF_B), 0, C},
                 {layer_tensor_id(1, LAYER_LN2_W), 3, 0},      {layer_tensor_id(0, LAYER_FC_W), 0, 4 * C * C},
                 {model_tensor_id(MODEL_WPE), 1, T * C - 2}};
    float f[4 * C * C];
    bf16 h[4 * C * C];
    for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++) {
        const float *want = fx->p32 + buffer_tensor(&fx->lay, reads[i].id).offset + reads[i].first;
        size_t n = reads[i].n;
        f[0] = 0, h[0] = 0;
        assert_int_equal(llmc_read(&r3, reads[i].id, reads[i].first, n, f, DTYPE_FP32, err), 0);
        assert_memory_equal(f, want, n * sizeof *f);
        assert_int_equal(llmc_read(&r3, reads[i].id, reads[i].first, n, h, DTYPE_BF16, err), 0);
        for (size_t k = 0; k < n; k++) assert_int_equal(h[k], f32_to_bf16(want[k]));
        assert_int_equal(llmc_read(&r5, reads[i].id, reads[i].first, n, f, DTYPE_FP32, err), 0);
        for (size_t k = 0; k < n; k++) assert_true(f32_bits(f[k]) == f32_bits(round_to_bf16(want[k])));
        assert_int_equal(llmc_read(&r5, reads[i].id, reads[i].first, n, h, DTYPE_BF16, err), 0);
        for (size_t k = 0; k < n; k++) assert_int_equal(h[k], f32_to_bf16(want[k]));
    }
    /* Out of range, or no such tensor: errors, and the reader stays usable. */
    assert_int_equal(llmc_read(&r3, layer_tensor_id(1, LAYER_LN1_W), 4, 5, f, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "5 elements from element 4 are outside ln1w of layer 1, which has 8"));
    assert_int_equal(llmc_read(&r3, model_tensor_id(MODEL_WTE), SIZE_MAX, 2, f, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "outside wte"));
    assert_int_equal(llmc_read(&r3, layer_tensor_id(L, LAYER_LN1_W), 0, 1, f, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "no tensor (layer 2, kind 0) in a model of 2 layers"));
    assert_int_equal(llmc_read(&r3, model_tensor_id(MODEL_LNF_W), 0, C, f, DTYPE_FP32, err), 0);
    assert_memory_equal(f, fx->p32 + layout_head_tensor(&fx->lay, HEAD_LNF_W).offset, C * sizeof *f);
    llmc_close(&r3);
    llmc_close(&r3); /* twice is harmless */
    assert_int_equal(llmc_read(&r3, model_tensor_id(MODEL_WTE), 0, 1, f, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "not open"));
    llmc_close(&r5);
}

/* llmc_open checks what llmc_load did: shape field by field, exact size. */
static void test_llmc_open_rejects(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p[256];
    path_in(fx, "open.bin", p);
    assert_int_equal(llmc_save(p, &fx->lay, fx->p32, DTYPE_FP32, DTYPE_BF16, err), 0);
    struct llmc_reader r;
    struct model_shape s = fx->lay.shape;
    s.NH = 4;
    assert_int_equal(llmc_open(&r, p, &s, err), -1);
    assert_non_null(strstr(err, "open.bin: n_head is 2 in the file, 4 in the config"));
    assert_null(r.f);
    llmc_close(&r); /* safe after a failed open */
    size_t n;
    unsigned char *b = slurp(p, &n);
    spit(p, b, n - 2); /* one bf16 element short */
    assert_int_equal(llmc_open(&r, p, &fx->lay.shape, err), -1);
    assert_non_null(strstr(err, "open.bin is truncated"));
    spit(p, b, n + 2);
    assert_int_equal(llmc_open(&r, p, &fx->lay.shape, err), -1);
    assert_non_null(strstr(err, "open.bin is too long (trailing data)"));
    free(b);
    path_in(fx, "absent.bin", p);
    assert_int_equal(llmc_open(&r, p, &fx->lay.shape, err), -1);
    assert_non_null(strstr(err, "cannot open"));
}

/* A hole refuses the commit, names what is missing, and leaves neither the
 * file nor its temp file; an older file of that name stays as it was. */
static void test_llmc_commit_refuses_hole(void **state) {
    struct fixture *fx = *state;
    char err[CKPT_ERR_LEN] = "", p[256], old[256];
    path_in(fx, "hole.bin", p);
    assert_int_equal(write_pieces(fx, p, fx->p32, DTYPE_FP32, DTYPE_BF16, 7, 10, err), -1);
    assert_non_null(strstr(err, "hole.bin not saved: elements ["));
    assert_non_null(strstr(err, "were never written"));
    assert_int_equal(access(p, F_OK), -1);
    assert_int_equal(files_in_dir(fx), 0);

    /* An exact hole, with an older file in place. */
    path_in(fx, "old.bin", old);
    assert_int_equal(llmc_save(p, &fx->lay, fx->p16, DTYPE_BF16, DTYPE_BF16, err), 0);
    size_t n_before;
    unsigned char *before = slurp(p, &n_before);
    struct llmc_writer w;
    assert_int_equal(llmc_create(&w, p, &fx->lay.shape, DTYPE_BF16, err), 0);
    for (int i = 0; i < layout_num_tensors(&fx->lay); i++) {
        struct tensor_id id = layout_id(&fx->lay, i);
        struct tensor_info t = buffer_tensor(&fx->lay, id);
        if (id.layer == 1 && id.kind == LAYER_FC_W) {
            assert_int_equal(llmc_write(&w, id, 0, 3, fx->p32 + t.offset, DTYPE_FP32, err), 0);
            assert_int_equal(llmc_write(&w, id, 7, t.numel - 7, fx->p32 + t.offset + 7, DTYPE_FP32, err), 0);
        } else {
            assert_int_equal(llmc_write(&w, id, 0, t.numel, fx->p32 + t.offset, DTYPE_FP32, err), 0);
        }
    }
    assert_int_equal(llmc_commit(&w, err), -1);
    assert_non_null(strstr(err, "elements [3, 7) of fcw of layer 1 were never written"));
    size_t n_after;
    unsigned char *after = slurp(p, &n_after);
    assert_int_equal(n_after, n_before);
    assert_memory_equal(after, before, n_before);
    free(before);
    free(after);
    assert_int_equal(files_in_dir(fx), 1);
    /* The writer is done: further calls say so, abort is a no-op. */
    assert_int_equal(llmc_write(&w, model_tensor_id(MODEL_WTE), 0, 1, fx->p32, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "not open"));
    assert_int_equal(llmc_commit(&w, err), -1);
    llmc_abort(&w);

    /* A bad piece abandons the file at once. */
    assert_int_equal(llmc_create(&w, old, &fx->lay.shape, DTYPE_FP32, err), 0);
    int temps;
    assert_int_equal(files_and_temps(fx, &temps), 2);
    assert_int_equal(temps, 1);
    assert_int_equal(llmc_write(&w, layer_tensor_id(0, LAYER_QKV_B), 3 * C, 1, fx->p32, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "1 elements from element 24 are outside qkvb of layer 0, which has 24"));
    assert_int_equal(files_in_dir(fx), 1);
    assert_int_equal(access(old, F_OK), -1);
    llmc_abort(&w);

    /* Abort removes the temp file. */
    assert_int_equal(llmc_create(&w, old, &fx->lay.shape, DTYPE_FP32, err), 0);
    assert_int_equal(llmc_write(&w, model_tensor_id(MODEL_WTE), 0, 5, fx->p32, DTYPE_FP32, err), 0);
    llmc_abort(&w);
    llmc_abort(&w);
    assert_int_equal(files_in_dir(fx), 1);

    /* Shapes a reader would refuse are not written. */
    struct model_shape s = fx->lay.shape;
    s.Vp = 200;
    assert_int_equal(llmc_create(&w, old, &s, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "padded_vocab_size is 200"));
    s = fx->lay.shape, s.L = 0;
    assert_int_equal(llmc_create(&w, old, &s, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "n_layer is 0"));
    assert_int_equal(files_in_dir(fx), 1);
}

/* ---- resume states ---- */

enum {
    NP = 100,
    NM = 37,
    /* resume format version 2 (train/resume.c): the header (magic, version,
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
    assert_non_null(strstr(err, "resume state version 1, this build reads version 2 only (older states carry no "
                            "checksums"));
    free(raw);
}

/* Section names in a file obey the writer's rules: a file with two
 * sections of one name, an empty name or a name without its NUL is refused
 * on open (found by tests/fuzz/fuzz_resume: resume_find took the first of
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
    assert_int_equal(files_in_dir(fx), 2);
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
        assert_int_equal(files_in_dir(fx), 1);
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
    assert_int_equal(files_in_dir(fx), 1);
    assert_int_equal(resume_write_at(&w, 0, 0, 1, d.params, err), -1);
    assert_non_null(strstr(err, "not open"));
    resume_abort(&w);

    /* A bad piece abandons the file at once. */
    assert_int_equal(resume_create(&w, p, &meta, SAMPLE_DECLS, 4, err), 0);
    int temps;
    assert_int_equal(files_and_temps(fx, &temps), 2);
    assert_int_equal(temps, 1);
    assert_int_equal(resume_write_at(&w, 4, 0, 1, d.m, err), -1);
    assert_non_null(strstr(err, "no section 4 (4 declared)"));
    assert_int_equal(files_in_dir(fx), 1);
    resume_abort(&w);
    assert_int_equal(resume_create(&w, p, &meta, SAMPLE_DECLS, 4, err), 0);
    assert_int_equal(resume_write_at(&w, 2, 0, 1, d.m, err), -1);
    assert_non_null(strstr(err, "1 elements from element 0 are outside section 'empty' of 0"));
    assert_int_equal(files_in_dir(fx), 1);
    /* Abort removes the temp file. */
    assert_int_equal(resume_create(&w, p, &meta, SAMPLE_DECLS, 4, err), 0);
    resume_abort(&w);
    assert_int_equal(files_in_dir(fx), 1);
    /* Bad declarations create nothing. */
    struct state_decl twice[2] = {{"m", DTYPE_FP32, 3}, {"m", DTYPE_FP32, 3}};
    assert_int_equal(resume_create(&w, p, &meta, twice, 2, err), -1);
    assert_non_null(strstr(err, "section 'm' given twice"));
    assert_int_equal(files_in_dir(fx), 1);
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
        cmocka_unit_test_setup_teardown(test_llmc_fp32_roundtrip_v3, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_bf16_roundtrip_v5, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_dtype_conversion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_file_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_shape_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_tensor_offset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_pieces_equal_save, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_overwrite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_read_ranges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_open_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc_commit_refuses_hole, setup, teardown),
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
