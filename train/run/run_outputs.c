/* Output paths checked before the first step. */
#include "ckpt.h"
#include "run_outputs.h"

#include <string.h>
#include <sys/statvfs.h>

#include "checkpoint.h"
#include "trace_file.h"

void trainer_stop_state_path(const struct config *c, char path[FILEIO_PATH_LEN]) {
    if (*c->save_state) {
        snprintf(path, FILEIO_PATH_LEN, "%s", c->save_state);
        return;
    }
    /* a --save too long for the suffix falls back to the fixed name */
    if (*c->save && snprintf(path, FILEIO_PATH_LEN, "%s.state", c->save) < FILEIO_PATH_LEN) return;
    snprintf(path, FILEIO_PATH_LEN, "shardlab_state.bin");
}

/* The directory holding path: what precedes its last '/', or ".". */
static void parent_dir(const char *path, char dir[FILEIO_PATH_LEN]) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, FILEIO_PATH_LEN, ".");
    else if (slash == path) snprintf(dir, FILEIO_PATH_LEN, "/");
    else snprintf(dir, FILEIO_PATH_LEN, "%.*s", (int)(slash - path), path);
}

int outputs_check_path(const char *path, const char *what, uint64_t bytes, FILE *warn, char err[TRAINER_ERR_LEN]) {
    char e2[FILEIO_ERR_LEN];
    if (path_check_output(path, what, e2) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "%s", e2);
        return -1;
    }
    /* the probe is the writer's own first step: its temp file, made and removed */
    struct atomic_file probe;
    if (atomic_open(&probe, path, e2) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "%s %.400s cannot be written: %s", what, path, e2);
        return -1;
    }
    atomic_abort(&probe);
    char dir[FILEIO_PATH_LEN];
    parent_dir(path, dir);
    struct statvfs fs;
    if (warn && statvfs(dir, &fs) == 0) {
        /* the temp file is written in full before it replaces an old one, so
         * the whole size must be free even when path exists */
        uint64_t avail = (uint64_t)fs.f_bavail * fs.f_frsize;
        if (avail < bytes)
            fprintf(warn, "warning: %s %s needs %llu bytes; %s has %llu free\n", what, path,
                    (unsigned long long)bytes, dir, (unsigned long long)avail);
    }
    return 0;
}

/* The run's files by key: no output over another, nor over an input of
 * another kind (include/fileio.h). */
static int check_distinct(const struct config *c, const char stop[FILEIO_PATH_LEN], char err[TRAINER_ERR_LEN]) {
    const struct named_path files[] = {
        {"--save", c->save, "model file", true},
        {"--save_state", c->save_state, "resume state", true},
        {"the stop state", *c->save_state ? "" : stop, "resume state", true},
        {"--log_json", c->log_json, "metrics log", true},
        {"--trace", c->trace, "trace", true},
        {"--train_data", c->train_data, "token shard", false},
        {"--val_data", c->val_data, "token shard", false},
        {"--init_from", c->init_from, "model file", false},
        {"--resume", c->resume, "resume state", false},
    };
    char e2[FILEIO_ERR_LEN];
    if (path_check_distinct(files, (int)(sizeof files / sizeof files[0]), e2) == 0) return 0;
    snprintf(err, TRAINER_ERR_LEN, "%s", e2);
    return -1;
}

int trainer_check_outputs(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    const struct config *c = tr->cfg;
    int rc = 0;
    if (tr->grid->world_rank == 0) {
        char stop[FILEIO_PATH_LEN], e2[TRAINER_ERR_LEN];
        trainer_stop_state_path(c, stop);
        rc = check_distinct(c, stop, err);
        struct model_shape file = tr->engine.lay.shape;
        file.Vp = padded_vocab(file.V);
        uint64_t state = trainer_state_bytes(tr);
        if (rc == 0 && *c->save) rc = outputs_check_path(c->save, "--save", llmc_file_bytes(&file, c->param_dtype), stderr, err);
        if (rc == 0 && *c->save_state) rc = outputs_check_path(c->save_state, "--save_state", state, stderr, err);
        /* about 300 bytes of JSON per event */
        uint64_t trace = (uint64_t)trace_capacity(c) * (uint64_t)tr->grid->world_size * 300u;
        if (rc == 0 && *c->trace) rc = outputs_check_path(c->trace, "--trace", trace, stderr, err);
        if (rc == 0 && !*c->save_state && outputs_check_path(stop, "the stop state", state, stderr, e2) != 0)
            fprintf(stderr, "warning: %s; a stop signal will fail to save (give --save_state)\n", e2);
    }
    fflush(stderr);
    return trainer_agree(tr, rc, err);
}
