/* Output paths checked before the first step. */
#include "../ckpt/ckpt.h"
#include "run_outputs.h"

#include <string.h>
#include <sys/statvfs.h>

#include "../ckpt/checkpoint.h"
#include "../measure/trace_file.h"

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
 * another kind (include/fileio.h); the --config files are inputs too. */
static int check_distinct(const struct config *c, const char stop[FILEIO_PATH_LEN], char err[TRAINER_ERR_LEN]) {
    const struct named_path keys[] = {
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
    enum { NUM_KEYS = sizeof keys / sizeof keys[0] };
    struct named_path files[NUM_KEYS + CONFIG_FILES_MAX];
    memcpy(files, keys, sizeof keys);
    for (int i = 0; i < c->n_config_files; i++)
        files[NUM_KEYS + i] = (struct named_path){"--config", c->config_files[i], "config", false};
    char e2[FILEIO_ERR_LEN];
    if (path_check_distinct(files, NUM_KEYS + c->n_config_files, e2) == 0) return 0;
    snprintf(err, TRAINER_ERR_LEN, "%s", e2);
    return -1;
}

int trainer_recheck_output(struct trainer *tr, const char *key, const char *path, char err[TRAINER_ERR_LEN]) {
    int rc = 0;
    if (tr->grid->world_rank == 0) {
        char stop[FILEIO_PATH_LEN], e2[FILEIO_ERR_LEN] = "";
        trainer_stop_state_path(tr->cfg, stop);
        if (path_check_output(path, key, e2) != 0) snprintf(err, TRAINER_ERR_LEN, "%s", e2);
        rc = *e2 || check_distinct(tr->cfg, stop, err) != 0 ? -1 : 0;
        size_t used = strlen(err);
        if (rc != 0) /* the file changed since start-up: say when it was found */
            snprintf(err + used, TRAINER_ERR_LEN - used, " (found as %s was to be written)", key);
    }
    /* bookkeeping, off the timeline: --trace records the run's own calls */
    struct trace *traced = tr->grid->dp_comm.trace;
    grid_attach_trace(tr->grid, NULL);
    rc = trainer_agree(tr, rc, err);
    grid_attach_trace(tr->grid, traced);
    return rc;
}

/* The bytes of the log's step records, for the free-space warning: about
 * this many each (the run's record and reports are a few more). */
enum { LOG_RECORD_BYTES = 512, LOG_SCAN_BYTES = 1 << 14 };

/* A log a resumed run appends to must end in a newline: a record cut
 * mid-line (a run killed while writing it, a disk that filled) would get
 * the next one glued to it. Refused, naming where the last whole record
 * ends, rather than repaired: the cut bytes are the user's to judge. */
static int log_check_append(const char *path, char err[TRAINER_ERR_LEN]) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0; /* absent: a new log (path_check_output passed) */
    char buf[LOG_SCAN_BYTES];
    long long size = 0, whole = 0; /* bytes read; bytes up to the last newline */
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        for (size_t i = 0; i < n; i++)
            if (buf[i] == '\n') whole = size + (long long)i + 1;
        size += (long long)n;
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad) {
        snprintf(err, TRAINER_ERR_LEN, "--log_json %.400s cannot be read to check its end", path);
        return -1;
    }
    if (size == whole) return 0;
    snprintf(err, TRAINER_ERR_LEN,
             "--log_json %.300s does not end in a newline: its last record was cut after byte %lld of %lld, and "
             "this resumed run would append to that line; cut it (truncate -s %lld %.300s) or give another "
             "--log_json (nothing was written)",
             path, whole, size, whole, path);
    return -1;
}

/* --log_json, an output like the others (a FIFO or a device refused, its
 * folder writable), and for a resumed run one that ends in a newline. */
static int check_log(const struct config *c, char err[TRAINER_ERR_LEN]) {
    uint64_t bytes = (uint64_t)c->steps * LOG_RECORD_BYTES;
    if (outputs_check_path(c->log_json, "--log_json", bytes, stderr, err) != 0) return -1;
    return *c->resume ? log_check_append(c->log_json, err) : 0;
}

int trainer_check_outputs(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    const struct config *c = tr->cfg;
    int rc = 0;
    if (tr->grid->world_rank == 0) {
        char stop[FILEIO_PATH_LEN], e2[TRAINER_ERR_LEN];
        trainer_stop_state_path(c, stop);
        rc = check_distinct(c, stop, err);
        struct model_shape file = tr->engine.lay.shape;
        file.Vp = reference_vocab(&file);
        uint64_t state = trainer_state_bytes(tr);
        if (rc == 0 && *c->save) rc = outputs_check_path(c->save, "--save", llmc_file_bytes(&file, c->param_dtype), stderr, err);
        if (rc == 0 && *c->save_state) rc = outputs_check_path(c->save_state, "--save_state", state, stderr, err);
        /* about 300 bytes of JSON per event */
        uint64_t trace = (uint64_t)trace_capacity(c) * (uint64_t)tr->grid->world_size * 300u;
        if (rc == 0 && *c->trace) rc = outputs_check_path(c->trace, "--trace", trace, stderr, err);
        if (rc == 0 && *c->log_json) rc = check_log(c, err);
        if (rc == 0 && !*c->save_state && outputs_check_path(stop, "the stop state", state, stderr, e2) != 0)
            fprintf(stderr, "warning: %s; a stop signal will fail to save (give --save_state)\n", e2);
    }
    fflush(stderr);
    return trainer_agree(tr, rc, err);
}
