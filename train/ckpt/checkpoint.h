/* Checkpoints. Two formats:
 *  - llm.c model files (weights only), of either architecture. GPT-2's
 *    (train_gpt2.py): 256 int32 header {20240326, version, maxT, V, L, NH, C,
 *    Vp, ...}, then the tensors in llm.c's order (wte, wpe, then each
 *    per-layer tensor stacked over layers, then lnfw, lnfb). LLaMA 3's
 *    (train_llama3.py's write_model; the header's slots are in
 *    ckpt_llmc_llama.c): magic 20240803, then wte, each per-layer tensor
 *    stacked over layers (ln1w, qkvw, attprojw, ln2w, fcw, fc2w, fcprojw),
 *    lnfw, lm_head, the vocabulary unpadded. Version 3 stores fp32, version
 *    5 bf16, in both.
 *  - resume states (ours): everything needed for a bit-exact continuation,
 *    as named sections, so a later optimizer adds sections, not a format.
 * Both are read and written in pieces at any offset, in any order, so no
 * rank ever needs the whole model in one buffer: a writer records what it
 * was given and refuses to commit a file with a hole; a reader checks the
 * file once on open and then serves any range. (Tests that hold a whole
 * model in one buffer use tests/ckpt_whole.h, built on these.) */
#ifndef SHARDLAB_CHECKPOINT_H
#define SHARDLAB_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtype.h"
#include "fileio.h"
#include "layout.h"
#include "rangeset.h"

enum {
    LLMC_MODEL_MAGIC = 20240326,
    LLMC_LLAMA_MAGIC = 20240803, /* LLaMA 3 (train_llama3.py) */
    LLMC_VERSION_FP32 = 3,
    LLMC_VERSION_BF16 = 5,
    CKPT_ERR_LEN = 512,
    STATE_NAME_LEN = 32,
    DATA_PATTERN_LEN = 512
};

/* The model's tensors outside the layers, in llm.c's file order (an
 * architecture's file has those of its layout: gpt2 no lm_head, llama no
 * wpe and lnfb; the others are empty, at offset where they would be). */
enum model_tensor { MODEL_WTE, MODEL_WPE, MODEL_LNF_W, MODEL_LNF_B, MODEL_LM, MODEL_NUM_TENSORS };

/* One named tensor of the model: layer -1 with kind an enum model_tensor,
 * or layer 0..L-1 with kind an enum layer_tensor. Build them with the
 * helpers below rather than by hand. */
struct tensor_id {
    int layer;
    int kind;
};

static inline struct tensor_id model_tensor_id(enum model_tensor t) { return (struct tensor_id){-1, (int)t}; }
static inline struct tensor_id layer_tensor_id(int layer, enum layer_tensor t) {
    return (struct tensor_id){layer, (int)t};
}

/* The model tensor a rank's tensor is (the head's copy of wte is wte). */
static inline struct tensor_id tensor_id_of(const struct tensor_info *t) {
    if (t->kind == UNIT_LAYER) return layer_tensor_id(t->layer, (enum layer_tensor)t->id);
    if (t->kind == UNIT_EMBED) return model_tensor_id(t->id == EMB_WTE ? MODEL_WTE : MODEL_WPE);
    return model_tensor_id(t->id == HEAD_LNF_W   ? MODEL_LNF_W
                           : t->id == HEAD_LNF_B ? MODEL_LNF_B
                           : t->id == HEAD_LM    ? MODEL_LM
                                                 : MODEL_WTE);
}

/* The file's tensors, empty ones included: MODEL_NUM_TENSORS + L x
 * LAYER_NUM_TENSORS of them; the i-th in file order (wte, wpe, each layer
 * kind over layers 0..L-1, lnfw, lnfb, lm_head), and its elements in a
 * file of shape s (0: absent from this architecture). */
int llmc_num_tensors(const struct model_shape *s);
struct tensor_id llmc_file_order(const struct model_shape *s, int i);
size_t llmc_tensor_numel(const struct model_shape *s, struct tensor_id id);

/* Element offset of the tensor's element 0 in the data section (after the
 * 1024-byte header) of an llm.c file of shape s; SIZE_MAX when id names no
 * tensor of s. */
size_t llmc_tensor_offset(const struct model_shape *s, struct tensor_id id);

/* The bytes of an llm.c file of shape s (s->Vp = reference_vocab(s)) in file_dt. */
uint64_t llmc_file_bytes(const struct model_shape *s, enum dtype file_dt);

/* Reads only the header: the model shape (Vp included; T = maxT = the
 * file's max_seq_len, LLaMA's block_size; for LLaMA also arch, KV, F (from
 * the file's size), rope_theta, rope_scaled, and norm_eps 0: not in the
 * file) and the version. */
int llmc_read_header(const char *path, struct model_shape *shape, int *version, char err[CKPT_ERR_LEN]);
/* An open, checked llm.c model file. */
struct llmc_reader {
    FILE *f;
    char path[FILEIO_PATH_LEN];
    struct model_layout lay; /* of the file's shape */
    enum dtype file_dt;      /* fp32 (version 3) or bf16 (version 5) */
    void *buf;               /* one chunk, for dtype conversion */
};

/* Opens path and checks magic, version, that the shape equals *expect
 * (every field, Vp included, arch, KV, F and for LLaMA rope_theta and
 * rope_scaled, but not norm_eps, which no file holds; max_seq_len against the position rows,
 * shape_pos_rows; T itself is the run's and not in the file; the message
 * names the first that differs) and
 * that the file is exactly header + tensors long. On failure nothing is
 * left open. */
int llmc_open(struct llmc_reader *r, const char *path, const struct model_shape *expect, char err[CKPT_ERR_LEN]);
/* Reads elements [first, first + n) of tensor id into dst as dst_dt; a NaN
 * or Inf in the file is an error naming the file, tensor and element. */
int llmc_read(struct llmc_reader *r, struct tensor_id id, size_t first, size_t n, void *dst, enum dtype dst_dt,
              char err[CKPT_ERR_LEN]);
/* Safe on a reader that failed to open or is already closed. */
void llmc_close(struct llmc_reader *r);

/* An llm.c model file being written into its temp file. */
struct llmc_writer {
    bool open;
    struct atomic_file af;
    struct model_layout lay;
    enum dtype file_dt;
    struct range_set written; /* data-section elements written so far */
    void *buf;                /* one chunk, for dtype conversion */
};

/* Starts the temp file (include/fileio.h) and writes the header of s's
 * architecture; file_dt picks version 3 (fp32) or 5 (bf16). s->Vp must be
 * reference_vocab(s). */
int llmc_create(struct llmc_writer *w, const char *path, const struct model_shape *s, enum dtype file_dt,
                char err[CKPT_ERR_LEN]);
/* Writes elements [first, first + n) of tensor id from src (src_dt),
 * converted to the file's dtype, at their place in the file. Pieces may come
 * in any order; writing a range twice keeps the last. A NaN or Inf is
 * refused (naming the tensor and element). Any error abandons the file (the
 * temp file is removed; llmc_abort is then a no-op). */
int llmc_write(struct llmc_writer *w, struct tensor_id id, size_t first, size_t n, const void *src, enum dtype src_dt,
               char err[CKPT_ERR_LEN]);
/* Fails, naming the tensor and range, if any element was never written;
 * otherwise fsyncs and renames over path. Either way the writer is done:
 * on failure no file is made and the old one, if any, stays. */
int llmc_commit(struct llmc_writer *w, char err[CKPT_ERR_LEN]);
/* Gives up: removes the temp file. Safe after commit or a failed call. */
void llmc_abort(struct llmc_writer *w);

/* The training data a state's data position refers to: the pattern as
 * given, and what the loader read (include/data.h's data_content: files,
 * bytes and a digest of their contents). A version-2 state's digest is of
 * the files' paths and sizes instead (of_contents false): it is not
 * compared (docs/RELIABILITY.md). */
struct data_sources {
    char pattern[DATA_PATTERN_LEN];
    uint64_t files, bytes;
    uint32_t digest;
    bool of_contents;
};

struct resume_meta {
    uint64_t step;            /* optimizer steps completed */
    uint64_t seed;
    uint64_t data_epoch, data_cursor;
    uint64_t skipped_steps;   /* updates dropped for non-finite values (--on_nonfinite skip_step) */
    struct model_shape shape;
    uint32_t fingerprint;     /* hash of the keys that must match on resume */
    struct data_sources data;
};

/* A section as declared before its data is written. */
struct state_decl {
    char name[STATE_NAME_LEN];
    enum dtype dtype;
    size_t numel;
};

struct resume_file_section; /* where one section lies in the file (ckpt_state_format.c) */

/* A resume state being written into its temp file. */
struct resume_writer {
    bool open;
    struct atomic_file af;
    struct resume_meta meta;
    int n;
    struct resume_file_section *sections;
    struct range_set written; /* file bytes of section data written so far */
};

/* Starts the temp file (include/fileio.h) for n sections (names distinct;
 * n may be 0). Section i is then filled with resume_write_at(w, i, ...);
 * the header, the section table and the checksums are written by
 * resume_commit. */
int resume_create(struct resume_writer *w, const char *path, const struct resume_meta *meta,
                  const struct state_decl *decls, int n, char err[CKPT_ERR_LEN]);
/* Writes elements [first, first + n) of section `section` (raw, in the
 * section's dtype). Pieces may come in any order. A NaN or Inf is refused
 * (naming the section and element). Any error abandons the file
 * (resume_abort is then a no-op). */
int resume_write_at(struct resume_writer *w, int section, size_t first, size_t n, const void *src,
                    char err[CKPT_ERR_LEN]);
/* Fails, naming the section and range, if any element was never written;
 * otherwise computes each section's CRC32C (as pieces arrive when they come
 * in order, else by reading the section back in chunks), writes the header
 * and section table with their own CRC32C, fsyncs and renames over path.
 * The writer is done either way. */
int resume_commit(struct resume_writer *w, char err[CKPT_ERR_LEN]);
/* Gives up: removes the temp file. Safe after commit or a failed call. */
void resume_abort(struct resume_writer *w);

/* An open, checked resume state. */
struct resume_reader {
    FILE *f;
    char path[FILEIO_PATH_LEN];
    int n;
    struct resume_file_section *sections;
};

/* Opens path, checks magic, version, the checksum of the header and section
 * table (a flipped step, seed, data position, data sources or section
 * size is refused as a corrupt header), that the section table matches the
 * file's length exactly (truncated or trailing data is an error) and that
 * section names are 1 to 31 characters and distinct, and fills *meta. On
 * failure nothing is left open. */
int resume_open(struct resume_reader *r, const char *path, struct resume_meta *meta, char err[CKPT_ERR_LEN]);
/* Whether the state has a section of this name (an older state may not). */
bool resume_has(const struct resume_reader *r, const char *name);
/* Index of the section called name, which must hold numel elements of
 * dtype and match its checksum (verified here, streaming the section in
 * chunks); -1 with a message naming it when it is missing, differs or is
 * corrupt. */
int resume_find(const struct resume_reader *r, const char *name, enum dtype dtype, size_t numel,
                char err[CKPT_ERR_LEN]);
/* Reads elements [first, first + n) of section `section` into dst (raw); a
 * NaN or Inf is an error naming the section and element. */
int resume_read_at(struct resume_reader *r, int section, size_t first, size_t n, void *dst, char err[CKPT_ERR_LEN]);
/* Safe on a reader that failed to open or is already closed. */
void resume_close(struct resume_reader *r);

/* The bytes of a resume state with these n sections. */
uint64_t resume_file_bytes(const struct state_decl *decls, int n);

#endif
