/* Whole-buffer checkpoint calls, for tests only. The library moves model
 * files and resume states one unit at a time (no rank ever holds a full
 * copy: train/ckpt/checkpoint.h's readers and writers); a test that has the
 * whole model, or a few whole arrays, in one buffer loads and saves it with
 * these, built on those piecewise calls. */
#ifndef SHARDLAB_TESTS_CKPT_WHOLE_H
#define SHARDLAB_TESTS_CKPT_WHOLE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../train/ckpt/checkpoint.h"


/* The tensor as it lies in a flat parameter buffer of layout lay. */
static inline struct tensor_info whole_buffer_tensor(const struct model_layout *lay, struct tensor_id id) {
    if (id.layer >= 0) return layout_layer_tensor(lay, id.layer, (enum layer_tensor)id.kind);
    switch ((enum model_tensor)id.kind) {
    case MODEL_WTE: return layout_embed_tensor(lay, EMB_WTE);
    case MODEL_WPE: return layout_embed_tensor(lay, EMB_WPE);
    case MODEL_LNF_W: return layout_head_tensor(lay, HEAD_LNF_W);
    case MODEL_LNF_B: return layout_head_tensor(lay, HEAD_LNF_B);
    default: return layout_head_tensor(lay, HEAD_LM);
    }
}

static inline int whole_check_dtype(enum dtype dt, const char *what, char err[CKPT_ERR_LEN]) {
    if (dt == DTYPE_FP32 || dt == DTYPE_BF16) return 0;
    snprintf(err, CKPT_ERR_LEN, "%s: unknown dtype %d", what, (int)dt);
    return -1;
}

/* One named array of a resume state. */
struct state_section {
    char name[STATE_NAME_LEN];
    enum dtype dtype;
    size_t numel;
    void *data;
};

/* Loads weights into params (layout order, param_dt), converting from the
 * file's dtype. The file's shape must equal lay->shape. */
static inline int llmc_load(const char *path, const struct model_layout *lay, void *params, enum dtype param_dt,
                            char err[CKPT_ERR_LEN]) {
    if (whole_check_dtype(param_dt, "llmc_load params", err)) return -1;
    struct llmc_reader r;
    if (llmc_open(&r, path, &lay->shape, err)) return -1;
    int rc = 0, n = llmc_num_tensors(&lay->shape);
    for (int i = 0; rc == 0 && i < n; i++) { /* file order: sequential reads */
        struct tensor_id id = llmc_file_order(&lay->shape, i);
        struct tensor_info t = whole_buffer_tensor(lay, id);
        if (t.numel == 0) continue; /* not of this architecture */
        rc = llmc_read(&r, id, 0, t.numel, (char *)params + t.offset * dtype_size(param_dt), param_dt, err);
    }
    llmc_close(&r);
    return rc;
}

/* Writes atomically; file_dt picks version 3 (fp32) or 5 (bf16). */
static inline int llmc_save(const char *path, const struct model_layout *lay, const void *params,
                            enum dtype param_dt, enum dtype file_dt, char err[CKPT_ERR_LEN]) {
    if (whole_check_dtype(param_dt, "llmc_save params", err)) return -1;
    struct llmc_writer w;
    if (llmc_create(&w, path, &lay->shape, file_dt, err)) return -1;
    int n = llmc_num_tensors(&lay->shape);
    for (int i = 0; i < n; i++) {
        struct tensor_id id = llmc_file_order(&lay->shape, i);
        struct tensor_info t = whole_buffer_tensor(lay, id);
        if (t.numel == 0) continue; /* not of this architecture */
        /* A failed write has abandoned the file already. */
        if (llmc_write(&w, id, 0, t.numel, (const char *)params + t.offset * dtype_size(param_dt), param_dt, err))
            return -1;
    }
    return llmc_commit(&w, err);
}

/* Writes meta and the sections atomically (resume_create checks the
 * declarations). */
static inline int resume_save(const char *path, const struct resume_meta *meta, const struct state_section *sections,
                              int n, char err[CKPT_ERR_LEN]) {
    if (n < 0) {
        snprintf(err, CKPT_ERR_LEN, "%d sections given", n);
        return -1;
    }
    struct state_decl *decls = n ? calloc((size_t)n, sizeof *decls) : NULL;
    if (n && !decls) {
        snprintf(err, CKPT_ERR_LEN, "out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        memcpy(decls[i].name, sections[i].name, STATE_NAME_LEN);
        decls[i].dtype = sections[i].dtype, decls[i].numel = sections[i].numel;
        if (sections[i].numel && !sections[i].data) {
            snprintf(err, CKPT_ERR_LEN, "section '%s': no data for %zu elements", sections[i].name,
                     sections[i].numel);
            free(decls);
            return -1;
        }
    }
    struct resume_writer w;
    int rc = resume_create(&w, path, meta, decls, n, err);
    free(decls);
    if (rc) return -1;
    /* A failed write has abandoned the file already. */
    for (int i = 0; i < n; i++)
        if (resume_write_at(&w, i, 0, sections[i].numel, sections[i].data, err)) return -1;
    return resume_commit(&w, err);
}

/* Reads meta, then fills each given section (name, dtype, numel must match
 * one in the file; a section missing from the file or of another size is an
 * error that names it). */
static inline int resume_load(const char *path, struct resume_meta *meta, struct state_section *sections, int n,
                              char err[CKPT_ERR_LEN]) {
    struct resume_reader r;
    struct resume_meta m;
    if (resume_open(&r, path, &m, err)) return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        struct state_section *s = &sections[i];
        int k = resume_find(&r, s->name, s->dtype, s->numel, err);
        rc = k < 0 ? -1 : resume_read_at(&r, k, 0, s->numel, s->data, err);
    }
    resume_close(&r);
    if (rc == 0) *meta = m;
    return rc;
}

#endif
