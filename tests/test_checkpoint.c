/* llm.c model files: round trips, dtype conversion, the exact llm.c tensor
 * order, rejections, and the piecewise reader and writer (tests/test_resume.c
 * has the resume states and the atomic writes). */
#include <dirent.h>
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
#include "file_fixture.h"

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
    if (scratch_dir_make(fx->dir, "test_llmc") != 0) return -1;
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
    scratch_dir_remove(fx->dir);
    free(fx->p32);
    free(fx->p16);
    free(fx);
    return 0;
}

static void path_in(const struct fixture *fx, const char *name, char out[256]) { path_in_dir(fx->dir, name, out); }



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
    assert_int_equal(files_in_dir(fx->dir), 2);
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
    assert_int_equal(files_in_dir(fx->dir), 0);

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
    assert_int_equal(files_in_dir(fx->dir), 1);
    /* The writer is done: further calls say so, abort is a no-op. */
    assert_int_equal(llmc_write(&w, model_tensor_id(MODEL_WTE), 0, 1, fx->p32, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "not open"));
    assert_int_equal(llmc_commit(&w, err), -1);
    llmc_abort(&w);

    /* A bad piece abandons the file at once. */
    assert_int_equal(llmc_create(&w, old, &fx->lay.shape, DTYPE_FP32, err), 0);
    int temps;
    assert_int_equal(files_and_temps(fx->dir, &temps), 2);
    assert_int_equal(temps, 1);
    assert_int_equal(llmc_write(&w, layer_tensor_id(0, LAYER_QKV_B), 3 * C, 1, fx->p32, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "1 elements from element 24 are outside qkvb of layer 0, which has 24"));
    assert_int_equal(files_in_dir(fx->dir), 1);
    assert_int_equal(access(old, F_OK), -1);
    llmc_abort(&w);

    /* Abort removes the temp file. */
    assert_int_equal(llmc_create(&w, old, &fx->lay.shape, DTYPE_FP32, err), 0);
    assert_int_equal(llmc_write(&w, model_tensor_id(MODEL_WTE), 0, 5, fx->p32, DTYPE_FP32, err), 0);
    llmc_abort(&w);
    llmc_abort(&w);
    assert_int_equal(files_in_dir(fx->dir), 1);

    /* Shapes a reader would refuse are not written. */
    struct model_shape s = fx->lay.shape;
    s.Vp = 200;
    assert_int_equal(llmc_create(&w, old, &s, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "padded_vocab_size is 200"));
    s = fx->lay.shape, s.L = 0;
    assert_int_equal(llmc_create(&w, old, &s, DTYPE_FP32, err), -1);
    assert_non_null(strstr(err, "n_layer is 0"));
    assert_int_equal(files_in_dir(fx->dir), 1);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
