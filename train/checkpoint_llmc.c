/* llm.c model files: read, validate, write.
 *
 * llm.c stores each tensor kind stacked over all layers (every layer's ln1w,
 * then every layer's ln1b, ...), while our buffer is unit-major (all of layer
 * 0, then all of layer 1). Both directions therefore walk the file's order
 * and scatter/gather through the layout's tensor table, converting dtypes a
 * chunk at a time so no second full copy of the model is ever held. Like
 * llm.c, the host is assumed little-endian. */
#include "checkpoint.h"
#include "fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

enum { LLMC_HEADER_INTS = 256, LLMC_HEADER_BYTES = LLMC_HEADER_INTS * 4, CHUNK_ELEMS = 1 << 16 };

/* Header slots. */
enum { H_MAGIC, H_VERSION, H_MAXT, H_V, H_L, H_NH, H_C, H_VP };

/* The i-th contiguous run of tensor data in llm.c's file order: wte, wpe,
 * then for each layer tensor kind its copy in layers 0..L-1, then lnfw, lnfb.
 * There are as many runs as the layout has tensors. */
static struct tensor_info llmc_run(const struct model_layout *lay, int i) {
    int L = lay->shape.L;
    if (i < 2) return layout_embed_tensor(lay, i == 0 ? EMB_WTE : EMB_WPE);
    i -= 2;
    if (i < L * LAYER_NUM_TENSORS) return layout_layer_tensor(lay, i % L, (enum layer_tensor)(i / L));
    i -= L * LAYER_NUM_TENSORS;
    return layout_head_tensor(lay, i == 0 ? HEAD_LNF_W : HEAD_LNF_B);
}

static int check_dtype(enum dtype dt, const char *what, char err[CKPT_ERR_LEN]) {
    if (dt == DTYPE_FP32 || dt == DTYPE_BF16) return 0;
    snprintf(err, CKPT_ERR_LEN, "%s: unknown dtype %d", what, (int)dt);
    return -1;
}

/* Validates magic, version and the shape fields, and fills shape/version. */
static int parse_header(const int32_t h[LLMC_HEADER_INTS], const char *path, struct model_shape *shape,
                        int *version, char err[CKPT_ERR_LEN]) {
    if (h[H_MAGIC] != LLMC_MODEL_MAGIC) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: not an llm.c model file (magic %d, expected %d)", path,
                 (int)h[H_MAGIC], LLMC_MODEL_MAGIC);
        return -1;
    }
    if (h[H_VERSION] != LLMC_VERSION_FP32 && h[H_VERSION] != LLMC_VERSION_BF16) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: unsupported llm.c model version %d (3 = fp32 and 5 = bf16 are)", path,
                 (int)h[H_VERSION]);
        return -1;
    }
    static const struct { int slot; const char *name; } fields[] = {
        {H_MAXT, "max_seq_len"}, {H_V, "vocab_size"}, {H_L, "n_layer"},
        {H_NH, "n_head"},        {H_C, "n_embd"},     {H_VP, "padded_vocab_size"},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (h[fields[i].slot] <= 0) {
            snprintf(err, CKPT_ERR_LEN, "%.300s: %s is %d in the header", path, fields[i].name,
                     (int)h[fields[i].slot]);
            return -1;
        }
    }
    /* Our layout always pads the vocabulary the way llm.c does; a file padded
     * otherwise could not be laid out, so say so here rather than later. */
    if (h[H_VP] != padded_vocab(h[H_V])) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: padded_vocab_size is %d but vocab_size %d pads to %d", path,
                 (int)h[H_VP], (int)h[H_V], padded_vocab(h[H_V]));
        return -1;
    }
    *shape = (struct model_shape){.L = h[H_L], .C = h[H_C], .NH = h[H_NH], .T = h[H_MAXT], .V = h[H_V], .Vp = h[H_VP]};
    *version = h[H_VERSION];
    return 0;
}

static int check_shape(const struct model_shape *file, const struct model_shape *cfg, const char *path,
                       char err[CKPT_ERR_LEN]) {
    const char *names[] = {"max_seq_len", "vocab_size", "n_layer", "n_head", "n_embd", "padded_vocab_size"};
    int f[] = {file->T, file->V, file->L, file->NH, file->C, file->Vp};
    int c[] = {cfg->T, cfg->V, cfg->L, cfg->NH, cfg->C, cfg->Vp};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (f[i] != c[i]) {
            snprintf(err, CKPT_ERR_LEN, "%.300s: %s is %d in the file, %d in the config", path, names[i], f[i], c[i]);
            return -1;
        }
    }
    return 0;
}

static void convert(void *dst, enum dtype dst_dt, const void *src, enum dtype src_dt, size_t n) {
    if (dst_dt == src_dt) {
        memcpy(dst, src, n * dtype_size(dst_dt));
    } else if (dst_dt == DTYPE_BF16) {
        const float *s = src;
        bf16 *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = f32_to_bf16(s[i]);
    } else {
        const bf16 *s = src;
        float *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = bf16_to_f32(s[i]);
    }
}

int llmc_read_header(const char *path, struct model_shape *shape, int *version, char err[CKPT_ERR_LEN]) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, CKPT_ERR_LEN, "cannot open %.300s: %s", path, strerror(errno));
        return -1;
    }
    int32_t h[LLMC_HEADER_INTS];
    int rc = read_exact(f, h, sizeof h, path, err) ? -1 : parse_header(h, path, shape, version, err);
    fclose(f);
    return rc;
}

/* The file must hold exactly the header and the tensors: a short file is
 * truncated, a long one is not the model the header describes. */
static int check_size(FILE *f, const char *path, off_t expect, char err[CKPT_ERR_LEN]) {
    off_t size = -1;
    if (fseeko(f, 0, SEEK_END) == 0) size = ftello(f);
    if (size < 0 || fseeko(f, LLMC_HEADER_BYTES, SEEK_SET) != 0) {
        snprintf(err, CKPT_ERR_LEN, "cannot seek in %.300s: %s", path, strerror(errno));
        return -1;
    }
    if (size != expect) {
        snprintf(err, CKPT_ERR_LEN, "%.300s is %s: %lld bytes, expected %lld for this shape", path,
                 size < expect ? "truncated" : "too long (trailing data)", (long long)size, (long long)expect);
        return -1;
    }
    return 0;
}

int llmc_load(const char *path, const struct model_layout *lay, void *params, enum dtype param_dt,
              char err[CKPT_ERR_LEN]) {
    if (check_dtype(param_dt, "llmc_load params", err)) return -1;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, CKPT_ERR_LEN, "cannot open %.300s: %s", path, strerror(errno));
        return -1;
    }
    int rc = -1, version;
    void *buf = NULL;
    int32_t h[LLMC_HEADER_INTS];
    struct model_shape shape;
    if (read_exact(f, h, sizeof h, path, err) || parse_header(h, path, &shape, &version, err) ||
        check_shape(&shape, &lay->shape, path, err))
        goto done;
    enum dtype file_dt = version == LLMC_VERSION_BF16 ? DTYPE_BF16 : DTYPE_FP32;
    size_t fsz = dtype_size(file_dt), psz = dtype_size(param_dt);
    if (check_size(f, path, (off_t)LLMC_HEADER_BYTES + (off_t)(lay->total * fsz), err)) goto done;
    if (file_dt != param_dt && !(buf = malloc(CHUNK_ELEMS * fsz))) {
        snprintf(err, CKPT_ERR_LEN, "out of memory loading %.300s", path);
        goto done;
    }
    for (int i = 0; i < layout_num_tensors(lay); i++) {
        struct tensor_info t = llmc_run(lay, i);
        char *dst = (char *)params + t.offset * psz;
        if (!buf) { /* same dtype: straight into place */
            if (read_exact(f, dst, t.numel * fsz, path, err)) goto done;
            continue;
        }
        for (size_t pos = 0; pos < t.numel;) {
            size_t k = t.numel - pos < CHUNK_ELEMS ? t.numel - pos : CHUNK_ELEMS;
            if (read_exact(f, buf, k * fsz, path, err)) goto done;
            convert(dst + pos * psz, param_dt, buf, file_dt, k);
            pos += k;
        }
    }
    rc = 0;
done:
    free(buf);
    fclose(f);
    return rc;
}

int llmc_save(const char *path, const struct model_layout *lay, const void *params, enum dtype param_dt,
              enum dtype file_dt, char err[CKPT_ERR_LEN]) {
    if (check_dtype(param_dt, "llmc_save params", err) || check_dtype(file_dt, "llmc_save file", err)) return -1;
    const struct model_shape *s = &lay->shape;
    int32_t h[LLMC_HEADER_INTS] = {0};
    h[H_MAGIC] = LLMC_MODEL_MAGIC;
    h[H_VERSION] = file_dt == DTYPE_BF16 ? LLMC_VERSION_BF16 : LLMC_VERSION_FP32;
    h[H_MAXT] = s->T, h[H_V] = s->V, h[H_L] = s->L, h[H_NH] = s->NH, h[H_C] = s->C, h[H_VP] = s->Vp;

    size_t fsz = dtype_size(file_dt), psz = dtype_size(param_dt);
    void *buf = NULL;
    if (file_dt != param_dt && !(buf = malloc(CHUNK_ELEMS * fsz))) {
        snprintf(err, CKPT_ERR_LEN, "out of memory saving %.300s", path);
        return -1;
    }
    struct atomic_file af;
    if (atomic_open(&af, path, err)) {
        free(buf);
        return -1;
    }
    /* atomic_write removes the temp file itself when it fails. */
    int rc = -1;
    if (atomic_write(&af, h, sizeof h, err)) goto done;
    for (int i = 0; i < layout_num_tensors(lay); i++) {
        struct tensor_info t = llmc_run(lay, i);
        const char *src = (const char *)params + t.offset * psz;
        if (!buf) {
            if (atomic_write(&af, src, t.numel * fsz, err)) goto done;
            continue;
        }
        for (size_t pos = 0; pos < t.numel;) {
            size_t k = t.numel - pos < CHUNK_ELEMS ? t.numel - pos : CHUNK_ELEMS;
            convert(buf, file_dt, src + pos * psz, param_dt, k);
            if (atomic_write(&af, buf, k * fsz, err)) goto done;
            pos += k;
        }
    }
    rc = atomic_commit(&af, err);
done:
    free(buf);
    return rc;
}
