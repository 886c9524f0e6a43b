/* Checkpoints. Two formats:
 *  - llm.c model files (weights only): 256 int32 header {20240326, version,
 *    maxT, V, L, NH, C, Vp, ...}, then the tensors in llm.c's order (wte, wpe,
 *    then each per-layer tensor stacked over layers, then lnfw, lnfb).
 *    Version 3 stores fp32, version 5 bf16.
 *  - resume states (ours): everything needed for a bit-exact continuation,
 *    as named sections, so a later optimizer adds sections, not a format. */
#ifndef SHARDLAB_CHECKPOINT_H
#define SHARDLAB_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "layout.h"

enum {
    LLMC_MODEL_MAGIC = 20240326,
    LLMC_VERSION_FP32 = 3,
    LLMC_VERSION_BF16 = 5,
    CKPT_ERR_LEN = 512,
    STATE_NAME_LEN = 32
};

/* Reads only the header: the model shape (Vp included) and the version. */
int llmc_read_header(const char *path, struct model_shape *shape, int *version, char err[CKPT_ERR_LEN]);
/* Loads weights into params (layout order, param_dt), converting from the
 * file's dtype. The file's shape must equal lay->shape. */
int llmc_load(const char *path, const struct model_layout *lay, void *params, enum dtype param_dt,
              char err[CKPT_ERR_LEN]);
/* Writes atomically; file_dt picks version 3 (fp32) or 5 (bf16). */
int llmc_save(const char *path, const struct model_layout *lay, const void *params, enum dtype param_dt,
              enum dtype file_dt, char err[CKPT_ERR_LEN]);

/* One named array of a resume state. */
struct state_section {
    char name[STATE_NAME_LEN];
    enum dtype dtype;
    size_t numel;
    void *data;
};

struct resume_meta {
    uint64_t step;            /* optimizer steps completed */
    uint64_t seed;
    uint64_t data_epoch, data_cursor;
    struct model_shape shape;
    uint32_t fingerprint;     /* hash of the keys that must match on resume */
};

/* Writes meta and the sections atomically. */
int resume_save(const char *path, const struct resume_meta *meta, const struct state_section *sections, int n,
                char err[CKPT_ERR_LEN]);
/* Reads meta, then fills each given section (name, dtype, numel must match
 * one in the file; a section missing from the file or of another size is an
 * error that names it). */
int resume_load(const char *path, struct resume_meta *meta, struct state_section *sections, int n,
                char err[CKPT_ERR_LEN]);

#endif
