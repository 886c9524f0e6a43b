/* llm.c model files: read, validate, write, in pieces.
 *
 * llm.c stores each tensor kind stacked over all layers (every layer's ln1w,
 * then every layer's ln1b, ...), while our buffer is unit-major (all of layer
 * 0, then all of layer 1). A tensor is therefore found by its file offset
 * (llmc_tensor_offset), and any range of it is read or written there,
 * converting dtypes a chunk at a time. Like llm.c, the host is assumed
 * little-endian. Both architectures' files follow the one order (wte, wpe,
 * layer kinds, lnfw, lnfb, lm_head), each holding its layout's tensors; an
 * absent one is empty. LLaMA's header is ckpt_llmc_llama.c's. */
#include "checkpoint.h"
#include "ckpt_llmc_llama.h"
#include "fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

enum { CHUNK_ELEMS = 1 << 16 };

/* Header slots. */
enum { H_MAGIC, H_VERSION, H_MAXT, H_V, H_L, H_NH, H_C, H_VP };

static bool valid_id(const struct model_layout *lay, struct tensor_id id) {
    if (id.layer == -1) return id.kind >= 0 && id.kind < MODEL_NUM_TENSORS;
    return id.layer >= 0 && id.layer < lay->shape.L && id.kind >= 0 && id.kind < LAYER_NUM_TENSORS;
}

/* Only layout_embed_tensor and layout_layer_tensor (a tensor's numel) are
 * asked of the layout here, so the file order does not depend on how the
 * layout groups tensors into units. */

static struct tensor_info model_tensor(const struct model_layout *lay, enum model_tensor t) {
    switch (t) {
    case MODEL_WTE: return layout_embed_tensor(lay, EMB_WTE);
    case MODEL_WPE: return layout_embed_tensor(lay, EMB_WPE);
    case MODEL_LNF_W: return layout_head_tensor(lay, HEAD_LNF_W);
    case MODEL_LNF_B: return layout_head_tensor(lay, HEAD_LNF_B);
    default: return layout_head_tensor(lay, HEAD_LM);
    }
}

/* Elements in one layer's tensors of the kinds before `kind`. */
static size_t layer_kinds_before(const struct model_layout *lay, int kind) {
    size_t n = 0;
    for (int k = 0; k < kind; k++) n += layout_layer_tensor(lay, 0, (enum layer_tensor)k).numel;
    return n;
}

/* The tensor's name and shape, with its offset in the file's data section
 * in place of its offset in the buffer. id must be valid. */
static struct tensor_info file_tensor(const struct model_layout *lay, struct tensor_id id) {
    size_t L = (size_t)lay->shape.L, wte = layout_embed_tensor(lay, EMB_WTE).numel;
    size_t stacked = wte + layout_embed_tensor(lay, EMB_WPE).numel; /* where the layer tensors begin */
    struct tensor_info t;
    if (id.layer >= 0) {
        t = layout_layer_tensor(lay, id.layer, (enum layer_tensor)id.kind);
        /* every layer's copy of each earlier kind, then this kind's earlier layers */
        t.offset = stacked + L * layer_kinds_before(lay, id.kind) + (size_t)id.layer * t.numel;
        return t;
    }
    size_t head = stacked + L * layer_kinds_before(lay, LAYER_NUM_TENSORS); /* lnfw */
    size_t lnfw = model_tensor(lay, MODEL_LNF_W).numel, lnfb = model_tensor(lay, MODEL_LNF_B).numel;
    t = model_tensor(lay, (enum model_tensor)id.kind);
    switch ((enum model_tensor)id.kind) {
    case MODEL_WTE: t.offset = 0; break;
    case MODEL_WPE: t.offset = wte; break;
    case MODEL_LNF_W: t.offset = head; break;
    case MODEL_LNF_B: t.offset = head + lnfw; break;
    default: t.offset = head + lnfw + lnfb; break; /* lm_head */
    }
    return t;
}

/* Elements in the data section: lm_head is last (empty in GPT-2's). */
static size_t data_numel(const struct model_layout *lay) {
    struct tensor_info last = file_tensor(lay, model_tensor_id(MODEL_LM));
    return last.offset + last.numel;
}

int llmc_num_tensors(const struct model_shape *s) { return MODEL_NUM_TENSORS + s->L * LAYER_NUM_TENSORS; }

size_t llmc_tensor_numel(const struct model_shape *s, struct tensor_id id) {
    struct model_layout lay;
    layout_init_whole(&lay, *s);
    return valid_id(&lay, id) ? file_tensor(&lay, id).numel : 0;
}

size_t llmc_tensor_offset(const struct model_shape *s, struct tensor_id id) {
    struct model_layout lay;
    layout_init_whole(&lay, *s);
    return valid_id(&lay, id) ? file_tensor(&lay, id).offset : SIZE_MAX;
}

/* The i-th of llmc_num_tensors() tensors in llm.c's file order: wte, wpe, then
 * for each layer tensor kind its copy in layers 0..L-1, then lnfw, lnfb,
 * lm_head. */
static struct tensor_id file_order(int L, int i) {
    if (i < 2) return model_tensor_id(i == 0 ? MODEL_WTE : MODEL_WPE);
    i -= 2;
    if (i < L * LAYER_NUM_TENSORS) return layer_tensor_id(i % L, (enum layer_tensor)(i / L));
    i -= L * LAYER_NUM_TENSORS;
    return model_tensor_id(i == 0 ? MODEL_LNF_W : i == 1 ? MODEL_LNF_B : MODEL_LM);
}

struct tensor_id llmc_file_order(const struct model_shape *s, int i) { return file_order(s->L, i); }

static int check_dtype(enum dtype dt, const char *what, char err[CKPT_ERR_LEN]) {
    if (dt == DTYPE_FP32 || dt == DTYPE_BF16) return 0;
    snprintf(err, CKPT_ERR_LEN, "%s: unknown dtype %d", what, (int)dt);
    return -1;
}

/* "wte", or "qkvw of layer 3", for messages. */
static void tensor_label(const struct tensor_info *t, struct tensor_id id, char out[48]) {
    if (id.layer < 0) snprintf(out, 48, "%s", t->name);
    else snprintf(out, 48, "%s of layer %d", t->name, id.layer);
}

/* A valid id and [first, first + n) inside its tensor; *t gets the tensor
 * at its file offset. */
static int check_range(const struct model_layout *lay, struct tensor_id id, size_t first, size_t n,
                       const char *path, struct tensor_info *t, char err[CKPT_ERR_LEN]) {
    if (!valid_id(lay, id)) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: no tensor (layer %d, kind %d) in a model of %d layers", path, id.layer,
                 id.kind, lay->shape.L);
        return -1;
    }
    *t = file_tensor(lay, id);
    if (first > t->numel || n > t->numel - first) {
        char label[48];
        tensor_label(t, id, label);
        snprintf(err, CKPT_ERR_LEN, "%.300s: %zu elements from element %zu are outside %s, which has %zu", path, n,
                 first, label, t->numel);
        return -1;
    }
    return 0;
}

/* n values (dtype dt) of tensor id from element `first` must be finite. */
static int check_finite(const struct tensor_info *t, struct tensor_id id, size_t first, size_t n, const void *x,
                        enum dtype dt, const char *path, const char *what, char err[CKPT_ERR_LEN]) {
    size_t bad = dtype_first_nonfinite(x, dt, n);
    if (bad == n) return 0;
    char label[48];
    tensor_label(t, id, label);
    snprintf(err, CKPT_ERR_LEN, "%.300s%s: %s element %zu is %s (non-finite)", path, what, label, first + bad,
             dtype_nonfinite_name(x, dt, bad));
    return -1;
}

/* Validates magic, version and the shape fields, and fills shape/version.
 * file_bytes (the file's size) is LLaMA's only: it gives F. */
static int parse_header(const int32_t h[LLMC_HEADER_INTS], const char *path, int64_t file_bytes,
                        struct model_shape *shape, int *version, char err[CKPT_ERR_LEN]) {
    if (h[H_MAGIC] == LLMC_LLAMA_MAGIC) return llama_parse_header(h, path, file_bytes, shape, version, err);
    if (h[H_MAGIC] != LLMC_MODEL_MAGIC) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: not an llm.c model file (magic %d, expected %d for GPT-2 or %d for "
                 "LLaMA 3)", path, (int)h[H_MAGIC], LLMC_MODEL_MAGIC, LLMC_LLAMA_MAGIC);
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
    /* A fuzzed vocabulary near INT_MAX would overflow the padding sum in
     * padded_vocab; no tokenizer comes near this bound. */
    if (h[H_V] > LLMC_MAX_VOCAB) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: vocab_size is %d in the header, beyond the largest accepted (%d)", path,
                 (int)h[H_V], LLMC_MAX_VOCAB);
        return -1;
    }
    if (h[H_C] > LLMC_MAX_EMBD) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: n_embd is %d in the header, beyond the largest accepted (%d)", path,
                 (int)h[H_C], LLMC_MAX_EMBD);
        return -1;
    }
    /* heads of whole width, as llm.c asserts; a fuzzed n_head near INT_MAX
     * would overflow the layout's q, k, v row count (NH + 2 NH) heads */
    if (h[H_C] % h[H_NH] != 0) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: n_head %d does not divide n_embd %d in the header", path, (int)h[H_NH],
                 (int)h[H_C]);
        return -1;
    }
    /* Our layout always pads the vocabulary the way llm.c does; a file padded
     * otherwise could not be laid out, so say so here rather than later.
     * Padded in 64 bits: a vocab_size within 127 of INT32_MAX pads past it
     * (padded_vocab's int would overflow), and then no Vp matches. */
    const long long want_vp = ((long long)h[H_V] + VOCAB_PAD - 1) / VOCAB_PAD * VOCAB_PAD;
    if (h[H_VP] != want_vp) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: padded_vocab_size is %d but vocab_size %d pads to %lld", path,
                 (int)h[H_VP], (int)h[H_V], want_vp);
        return -1;
    }
    /* the file's own layout runs at its full length: T = maxT */
    *shape = (struct model_shape){.L = h[H_L], .C = h[H_C], .NH = h[H_NH], .T = h[H_MAXT], .maxT = h[H_MAXT],
                                  .V = h[H_V], .Vp = h[H_VP]};
    *version = h[H_VERSION];
    return 0;
}

static const char *arch_text(enum model_arch a) { return a == ARCH_LLAMA ? "LLaMA 3" : "GPT-2"; }

static int check_shape(const struct model_shape *file, const struct model_shape *cfg, const char *path,
                       char err[CKPT_ERR_LEN]) {
    if (file->arch != cfg->arch) {
        snprintf(err, CKPT_ERR_LEN, "%.300s is a %s model file, and the run's model is %s (--arch)", path,
                 arch_text(file->arch), arch_text(cfg->arch));
        return -1;
    }
    bool llama = file->arch == ARCH_LLAMA;
    /* max_seq_len is LLaMA's block_size; padded_vocab_size is its vocab_size */
    const char *names[] = {"max_seq_len", "vocab_size", "n_layer", "n_head", "n_embd", "padded_vocab_size",
                           "n_kv_head", "MLP width (ffn_dim)", "rope_scaled"};
    /* the sequence length is the run's: only the position table's rows are the file's */
    int f[] = {shape_pos_rows(file), file->V, file->L, file->NH, file->C, file->Vp, kv_heads(file),
               mlp_width(file), llama && file->rope_scaled};
    int c[] = {shape_pos_rows(cfg), cfg->V, cfg->L, cfg->NH, cfg->C, cfg->Vp, kv_heads(cfg), mlp_width(cfg),
               llama && cfg->rope_scaled};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (f[i] != c[i]) {
            snprintf(err, CKPT_ERR_LEN, "%.300s: %s is %d in the file, %d in the config", path, names[i], f[i], c[i]);
            return -1;
        }
    }
    if (llama && file->rope_theta != cfg->rope_theta) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: rope_theta is %g in the file, %g in the config", path,
                 (double)file->rope_theta, (double)cfg->rope_theta);
        return -1;
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

/* The values' dtype of a file of this header version. */
static enum dtype file_dtype(int version) { return version == LLMC_VERSION_BF16 ? DTYPE_BF16 : DTYPE_FP32; }

/* The file's size in bytes; -1 with a message. */
static off_t file_size(FILE *f, const char *path, char err[CKPT_ERR_LEN]) {
    off_t size = -1;
    if (fseeko(f, 0, SEEK_END) == 0) size = ftello(f);
    if (size < 0) snprintf(err, CKPT_ERR_LEN, "cannot seek in %.300s: %s", path, strerror(errno));
    return size;
}

/* The file must hold exactly the header and the tensors: a short file is
 * truncated, a long one is not the model the header describes. */
static int check_size(FILE *f, const char *path, off_t expect, char err[CKPT_ERR_LEN]) {
    off_t size = file_size(f, path, err);
    if (size < 0) return -1;
    if (size != expect) {
        snprintf(err, CKPT_ERR_LEN, "%.300s is %s: %lld bytes, expected %lld for this shape", path,
                 size < expect ? "truncated" : "too long (trailing data)", (long long)size, (long long)expect);
        return -1;
    }
    return 0;
}

static off_t data_byte(size_t element, enum dtype file_dt) {
    return (off_t)LLMC_HEADER_BYTES + (off_t)(element * dtype_size(file_dt));
}

uint64_t llmc_file_bytes(const struct model_shape *s, enum dtype file_dt) {
    struct model_layout lay;
    layout_init_whole(&lay, *s);
    return (uint64_t)data_byte(data_numel(&lay), file_dt);
}

/* The shape, and the size it implies checked against the file's, so that
 * a header claiming more than the file holds (2^30 positions in a 70 KB
 * file) says "truncated" before anything is sized from it. */
int llmc_read_header(const char *path, struct model_shape *shape, int *version, char err[CKPT_ERR_LEN]) {
    if (path_check_input(path, "model file", err) != 0) return -1; /* a FIFO would block fopen */
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, CKPT_ERR_LEN, "cannot open %.300s: %s", path, strerror(errno));
        return -1;
    }
    int32_t h[LLMC_HEADER_INTS];
    off_t size = file_size(f, path, err);
    int rc = size < 0 || read_exact_at(f, 0, h, sizeof h, path, err) ? -1
                                                                     : parse_header(h, path, size, shape, version, err);
    if (rc == 0)
        rc = check_size(f, path, (off_t)llmc_file_bytes(shape, file_dtype(*version)), err);
    fclose(f);
    return rc;
}

/* ---- reader ---- */

int llmc_open(struct llmc_reader *r, const char *path, const struct model_shape *expect, char err[CKPT_ERR_LEN]) {
    *r = (struct llmc_reader){0};
    if (strlen(path) >= sizeof r->path) {
        snprintf(err, CKPT_ERR_LEN, "path too long: %.300s", path);
        return -1;
    }
    snprintf(r->path, sizeof r->path, "%s", path);
    if (path_check_input(path, "model file", err) != 0) return -1;
    if (!(r->f = fopen(path, "rb"))) {
        snprintf(err, CKPT_ERR_LEN, "cannot open %.300s: %s", path, strerror(errno));
        return -1;
    }
    int32_t h[LLMC_HEADER_INTS];
    struct model_shape shape;
    int version;
    off_t size = file_size(r->f, path, err);
    if (size < 0 || read_exact_at(r->f, 0, h, sizeof h, path, err) || parse_header(h, path, size, &shape, &version, err) ||
        check_shape(&shape, expect, path, err))
        goto fail;
    r->file_dt = file_dtype(version);
    layout_init_whole(&r->lay, shape);
    if (check_size(r->f, path, data_byte(data_numel(&r->lay), r->file_dt), err)) goto fail;
    if (!(r->buf = malloc(CHUNK_ELEMS * sizeof(float)))) {
        snprintf(err, CKPT_ERR_LEN, "out of memory reading %.300s", path);
        goto fail;
    }
    return 0;
fail:
    llmc_close(r);
    return -1;
}

int llmc_read(struct llmc_reader *r, struct tensor_id id, size_t first, size_t n, void *dst, enum dtype dst_dt,
              char err[CKPT_ERR_LEN]) {
    struct tensor_info t;
    if (!r->f) {
        snprintf(err, CKPT_ERR_LEN, "llmc_read: the reader is not open");
        return -1;
    }
    if (check_dtype(dst_dt, "llmc_read destination", err) || check_range(&r->lay, id, first, n, r->path, &t, err))
        return -1;
    off_t at = data_byte(t.offset + first, r->file_dt);
    size_t fsz = dtype_size(r->file_dt), dsz = dtype_size(dst_dt);
    if (dst_dt == r->file_dt) {
        if (read_exact_at(r->f, at, dst, n * fsz, r->path, err)) return -1;
    } else {
        for (size_t pos = 0; pos < n;) {
            size_t k = n - pos < CHUNK_ELEMS ? n - pos : CHUNK_ELEMS;
            if (read_exact_at(r->f, at + (off_t)(pos * fsz), r->buf, k * fsz, r->path, err)) return -1;
            convert((char *)dst + pos * dsz, dst_dt, r->buf, r->file_dt, k);
            pos += k;
        }
    }
    /* what the model receives, after any conversion */
    return check_finite(&t, id, first, n, dst, dst_dt, r->path, "", err);
}

void llmc_close(struct llmc_reader *r) {
    if (r->f) fclose(r->f);
    free(r->buf);
    r->f = NULL, r->buf = NULL;
}

/* ---- writer ---- */

/* Frees what the writer holds; its temp file is already gone or renamed. */
static void writer_release(struct llmc_writer *w) {
    free(w->buf);
    range_set_free(&w->written);
    w->buf = NULL, w->open = false;
}

void llmc_abort(struct llmc_writer *w) {
    if (w->open) atomic_abort(&w->af);
    writer_release(w);
}

/* An error that abandons the file. */
static int writer_fail(struct llmc_writer *w) {
    llmc_abort(w);
    return -1;
}

int llmc_create(struct llmc_writer *w, const char *path, const struct model_shape *s, enum dtype file_dt,
                char err[CKPT_ERR_LEN]) {
    *w = (struct llmc_writer){0};
    range_set_init(&w->written);
    if (check_dtype(file_dt, "llmc_create file", err)) return -1;
    int32_t h[LLMC_HEADER_INTS] = {0};
    bool llama = s->arch == ARCH_LLAMA;
    if (llama) {
        if (llama_fill_header(h, s, file_dt, path, err) || llama_check_header(h, path, err)) return -1;
    } else {
        h[H_MAGIC] = LLMC_MODEL_MAGIC;
        h[H_VERSION] = file_dt == DTYPE_BF16 ? LLMC_VERSION_BF16 : LLMC_VERSION_FP32;
        h[H_MAXT] = shape_pos_rows(s), h[H_V] = s->V, h[H_L] = s->L, h[H_NH] = s->NH, h[H_C] = s->C, h[H_VP] = s->Vp;
    }
    /* What a reader would refuse is not written: GPT-2's header is checked
     * before the shape is laid out, LLaMA's slots too, and then its F
     * against the size the layout gives, as a reader recovers it. */
    struct model_shape checked;
    int version;
    if (!llama && parse_header(h, path, 0, &checked, &version, err)) return -1;
    if (layout_init(&w->lay, *s, rank_desc_whole(s)) != 0) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: max_seq_len %d is shorter than seq_len %d", path, s->maxT, s->T);
        return -1;
    }
    if (llama && parse_header(h, path, data_byte(data_numel(&w->lay), file_dt), &checked, &version, err)) return -1;
    w->file_dt = file_dt;
    if (!(w->buf = malloc(CHUNK_ELEMS * sizeof(float)))) {
        snprintf(err, CKPT_ERR_LEN, "out of memory saving %.300s", path);
        return -1;
    }
    if (atomic_open(&w->af, path, err)) return writer_fail(w);
    w->open = true;
    /* atomic_write removes the temp file itself when it fails. */
    if (atomic_write(&w->af, h, sizeof h, err)) {
        w->open = false;
        return writer_fail(w);
    }
    return 0;
}

int llmc_write(struct llmc_writer *w, struct tensor_id id, size_t first, size_t n, const void *src, enum dtype src_dt,
               char err[CKPT_ERR_LEN]) {
    struct tensor_info t;
    if (!w->open) {
        snprintf(err, CKPT_ERR_LEN, "llmc_write: the writer is not open (committed, aborted or failed before)");
        return -1;
    }
    if (check_dtype(src_dt, "llmc_write source", err) || check_range(&w->lay, id, first, n, w->af.path, &t, err))
        return writer_fail(w);
    off_t at = data_byte(t.offset + first, w->file_dt);
    size_t fsz = dtype_size(w->file_dt), ssz = dtype_size(src_dt);
    bool same = src_dt == w->file_dt; /* then the whole range goes in one write, straight from src */
    for (size_t pos = 0; pos < n;) {
        size_t k = same || n - pos < CHUNK_ELEMS ? n - pos : CHUNK_ELEMS;
        const void *piece = (const char *)src + pos * ssz;
        if (!same) convert(w->buf, w->file_dt, piece, src_dt, k), piece = w->buf;
        /* what the file would hold, after any conversion */
        if (check_finite(&t, id, first + pos, k, piece, w->file_dt, w->af.path, " not saved", err))
            return writer_fail(w);
        /* atomic_write_at removes the temp file itself when it fails. */
        if (atomic_write_at(&w->af, at + (off_t)(pos * fsz), piece, k * fsz, err)) {
            w->open = false;
            return writer_fail(w);
        }
        pos += k;
    }
    if (range_set_add(&w->written, t.offset + first, t.offset + first + n)) {
        snprintf(err, CKPT_ERR_LEN, "out of memory saving %.300s", w->af.path);
        return writer_fail(w);
    }
    return 0;
}

int llmc_commit(struct llmc_writer *w, char err[CKPT_ERR_LEN]) {
    if (!w->open) {
        snprintf(err, CKPT_ERR_LEN, "llmc_commit: the writer is not open (committed, aborted or failed before)");
        return -1;
    }
    struct range gap;
    if (range_set_first_gap(&w->written, 0, data_numel(&w->lay), &gap)) {
        for (int i = 0; i < llmc_num_tensors(&w->lay.shape); i++) {
            struct tensor_id id = file_order(w->lay.shape.L, i);
            struct tensor_info t = file_tensor(&w->lay, id);
            if (gap.lo >= t.offset + t.numel) continue;
            size_t end = gap.hi < t.offset + t.numel ? (size_t)gap.hi : t.offset + t.numel;
            char label[48];
            tensor_label(&t, id, label);
            snprintf(err, CKPT_ERR_LEN, "%.300s not saved: elements [%zu, %zu) of %s were never written", w->af.path,
                     (size_t)gap.lo - t.offset, end - t.offset, label);
            break;
        }
        return writer_fail(w);
    }
    int rc = atomic_commit(&w->af, err);
    writer_release(w);
    return rc;
}
