/* libFuzzer harness: llm.c model files of both architectures, GPT-2's and
 * LLaMA 3's (llmc_read_header, llmc_open,
 * llmc_read of every tensor in both dtypes, llmc_load). The trainer opens a
 * file against the shape of a validated configuration, so a header shape
 * is opened only when the config keys accept it (config_set + 
 * config_validate); any other is only checked to be refused against a
 * fixed shape. Properties checked beyond "no crash, no undefined
 * behaviour, no leak":
 *  - every refusal leaves a message;
 *  - a tensor read in the file's dtype is exactly the file's bytes at
 *    llmc_tensor_offset; read in the other dtype, it is their conversion;
 *  - ranges outside a tensor are refused;
 *  - llmc_load puts every tensor where the layout says. */
#include "../../train/ckpt/checkpoint.h"
#include "../ckpt_whole.h"
#include "../../train/config/config.h"
#include "fuzz_input.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { HEADER_BYTES = 1024 };

/* Whether a configuration with this shape passes the config checks (a
 * LLaMA file's: its arch, KV, F and RoPE keys too). */
static bool config_accepts(const struct model_shape *s) {
    struct config c;
    config_defaults(&c);
    const struct {
        const char *key;
        int value;
    } keys[] = {{"n_layer", s->L},    {"d_model", s->C},       {"n_head", s->NH},
                {"seq_len", s->T},    {"vocab_size", s->V},    {"n_kv_head", s->KV},
                {"ffn_dim", s->F},    {"rope_theta", (int)s->rope_theta}, {"rope_scaled", s->rope_scaled}};
    char err[CONFIG_ERR_LEN], value[16];
    if (s->arch == ARCH_LLAMA && config_set(&c, "arch", "llama", err) != 0) return false;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (s->arch != ARCH_LLAMA && i >= 5) break; /* GPT-2's header has the first five */
        snprintf(value, sizeof value, "%d", keys[i].value);
        if (config_set(&c, keys[i].key, value, err) != 0) return false;
    }
    return config_validate(&c, err) == 0;
}

static size_t numel_of(const struct model_layout *lay, struct tensor_id id) {
    if (id.layer >= 0) return layout_layer_tensor(lay, id.layer, (enum layer_tensor)id.kind).numel;
    switch ((enum model_tensor)id.kind) {
    case MODEL_WTE: return layout_embed_tensor(lay, EMB_WTE).numel;
    case MODEL_WPE: return layout_embed_tensor(lay, EMB_WPE).numel;
    case MODEL_LNF_W: return layout_head_tensor(lay, HEAD_LNF_W).numel;
    case MODEL_LNF_B: return layout_head_tensor(lay, HEAD_LNF_B).numel;
    default: return layout_head_tensor(lay, HEAD_LM).numel;
    }
}

/* Where the tensor sits in llmc_load's buffer (the layout's flat order). */
static size_t buffer_offset(const struct model_layout *lay, struct tensor_id id) {
    if (id.layer >= 0) return layout_layer_tensor(lay, id.layer, (enum layer_tensor)id.kind).offset;
    switch ((enum model_tensor)id.kind) {
    case MODEL_WTE: return layout_embed_tensor(lay, EMB_WTE).offset;
    case MODEL_WPE: return layout_embed_tensor(lay, EMB_WPE).offset;
    case MODEL_LNF_W: return layout_head_tensor(lay, HEAD_LNF_W).offset;
    case MODEL_LNF_B: return layout_head_tensor(lay, HEAD_LNF_B).offset;
    default: return layout_head_tensor(lay, HEAD_LM).offset;
    }
}

/* Reads tensor id whole, in both dtypes, and checks it against the file's
 * bytes and against the fp32 copy llmc_load made (whole). */
static void check_tensor(struct llmc_reader *r, const uint8_t *data, struct tensor_id id, const float *whole) {
    const struct model_layout *lay = &r->lay;
    size_t n = numel_of(lay, id), fsz = dtype_size(r->file_dt);
    size_t off = llmc_tensor_offset(&lay->shape, id);
    FUZZ_CHECK(off != SIZE_MAX);
    const uint8_t *bytes = data + HEADER_BYTES + off * fsz;
    char err[CKPT_ERR_LEN];
    void *raw = malloc(n * sizeof(float) + 1); /* room for a read in either dtype (the middle piece below) */
    float *f32 = malloc(n * sizeof *f32 + 1);
    FUZZ_CHECK(raw && f32);
    FUZZ_CHECK(llmc_read(r, id, 0, n, raw, r->file_dt, err) == 0);
    FUZZ_CHECK(memcmp(raw, bytes, n * fsz) == 0);
    FUZZ_CHECK(llmc_read(r, id, 0, n, f32, DTYPE_FP32, err) == 0);
    for (size_t i = 0; i < n; i++) {
        float want;
        if (r->file_dt == DTYPE_FP32) memcpy(&want, bytes + 4 * i, 4);
        else want = bf16_to_f32(((const bf16 *)raw)[i]);
        FUZZ_CHECK(memcmp(&f32[i], &want, 4) == 0);
    }
    FUZZ_CHECK(memcmp(whole + buffer_offset(lay, id), f32, n * sizeof *f32) == 0);
    /* a piece in the other dtype, from the middle */
    enum dtype other = r->file_dt == DTYPE_FP32 ? DTYPE_BF16 : DTYPE_FP32;
    FUZZ_CHECK(llmc_read(r, id, n / 2, n - n / 2, raw, other, err) == 0);
    /* outside the tensor */
    memset(err, 'x', sizeof err);
    FUZZ_CHECK(llmc_read(r, id, n, 1, f32, DTYPE_FP32, err) != 0);
    fuzz_check_message(err, sizeof err);
    FUZZ_CHECK(llmc_read(r, id, 1, SIZE_MAX, f32, DTYPE_FP32, err) != 0);
    free(raw);
    free(f32);
}

static void check_open_file(const char *path, const uint8_t *data, const struct model_shape *shape) {
    struct llmc_reader r;
    char err[CKPT_ERR_LEN];
    memset(err, 'x', sizeof err);
    if (llmc_open(&r, path, shape, err) != 0) {
        fuzz_check_message(err, sizeof err);
        FUZZ_CHECK(r.f == NULL && r.buf == NULL);
        return;
    }
    /* the size check passed, so the model is no larger than the input */
    float *whole = malloc(r.lay.total * sizeof *whole + 1);
    FUZZ_CHECK(whole != NULL);
    /* a NaN or Inf anywhere in the weights: the load is refused, naming it */
    size_t elems = r.lay.total;
    if (dtype_first_nonfinite(data + 1024, r.file_dt, elems) != elems) {
        memset(err, 'x', sizeof err);
        FUZZ_CHECK(llmc_load(path, &r.lay, whole, DTYPE_FP32, err) != 0);
        fuzz_check_message(err, sizeof err);
        FUZZ_CHECK(strstr(err, "(non-finite)") != NULL);
        free(whole);
        llmc_close(&r);
        return;
    }
    FUZZ_CHECK(llmc_load(path, &r.lay, whole, DTYPE_FP32, err) == 0);
    for (int t = 0; t < MODEL_NUM_TENSORS; t++) check_tensor(&r, data, model_tensor_id((enum model_tensor)t), whole);
    for (int l = 0; l < shape->L; l++)
        for (int k = 0; k < LAYER_NUM_TENSORS; k++) check_tensor(&r, data, layer_tensor_id(l, (enum layer_tensor)k), whole);
    struct tensor_id none = layer_tensor_id(shape->L, LAYER_LN1_W);
    memset(err, 'x', sizeof err);
    FUZZ_CHECK(llmc_read(&r, none, 0, 1, whole, DTYPE_FP32, err) != 0);
    fuzz_check_message(err, sizeof err);
    free(whole);
    llmc_close(&r);
    llmc_close(&r); /* safe twice */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_input_path(data, size);
    struct model_shape shape;
    int version;
    char err[CKPT_ERR_LEN];
    memset(err, 'x', sizeof err);
    if (llmc_read_header(path, &shape, &version, err) != 0) {
        fuzz_check_message(err, sizeof err);
        return 0;
    }
    FUZZ_CHECK(version == LLMC_VERSION_FP32 || version == LLMC_VERSION_BF16);
    FUZZ_CHECK(shape.Vp == reference_vocab(&shape));
    if (config_accepts(&shape)) check_open_file(path, data, &shape);
    /* against another shape: refused, naming the field */
    struct model_shape other = shape;
    other.NH = shape.NH == 1 ? 2 : 1;
    struct llmc_reader r;
    memset(err, 'x', sizeof err);
    FUZZ_CHECK(llmc_open(&r, path, &other, err) != 0);
    fuzz_check_message(err, sizeof err);
    FUZZ_CHECK(strstr(err, "n_head") != NULL);
    return 0;
}
