/* Shared by the trainer's end-to-end tests on configs/tiny.conf
 * (test_train.c, test_train_resume.c, test_train_rejects.c; one program
 * each): a mkdtemp directory holding byte-level shards cut from
 * data/kjv.txt (made by the group setup, emptied and removed by the group
 * teardown), configs/tiny.conf on those shards, one thread on a 1 x 1 x 1
 * grid, and snapshots of the parameters, master weights and Adam moments
 * for bit-for-bit comparisons. Header-only: the test includes cmocka
 * first. */
#ifndef SHARDLAB_TEST_TRAIN_FIXTURE_H
#define SHARDLAB_TEST_TRAIN_FIXTURE_H

#include <cblas.h>
#include <dirent.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../train/run/run.h"
#include "grid_single.h"
#include "shard_write.h"

/* train: the first 200 KB of the corpus; val: 64 KB from far later (the
 * corpus is 1.9 MB), text the model never trains on. */
enum { TRAIN_BYTES = 200 * 1024, VAL_OFFSET = 1400 * 1024, VAL_BYTES = 64 * 1024 };

struct fixture {
    char dir[64];
    char train[128], val[128];
};

static struct fixture *FX; /* set by the group setup */
static struct grid GRID;    /* one process: a 1 x 1 x 1 grid */

static inline void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", FX->dir, name); }

static inline int write_text_shard(const unsigned char *text, size_t n, const char *path) {
    uint16_t *tok = malloc(n * sizeof *tok);
    if (!tok) return -1;
    size_t k = tokenize_bytes(text, n, tok);
    char err[DATA_ERR_LEN];
    int rc = shard_write(path, tok, k, err);
    if (rc) fprintf(stderr, "%s\n", err);
    free(tok);
    return rc;
}

static inline int group_setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    grid_init_single(&GRID);
    FX = calloc(1, sizeof *FX);
    if (!FX) return -1;
    snprintf(FX->dir, sizeof FX->dir, "/tmp/shardlab_test_train_XXXXXX");
    if (!mkdtemp(FX->dir)) return -1;
    FILE *f = fopen("data/kjv.txt", "rb");
    if (!f) {
        fprintf(stderr, "data/kjv.txt not found: run the tests from the repository root\n");
        return -1;
    }
    unsigned char *text = malloc(VAL_OFFSET + VAL_BYTES);
    size_t got = text ? fread(text, 1, VAL_OFFSET + VAL_BYTES, f) : 0;
    fclose(f);
    if (got != VAL_OFFSET + VAL_BYTES) {
        free(text);
        return -1;
    }
    path_in(FX->train, sizeof FX->train, "train.bin");
    path_in(FX->val, sizeof FX->val, "val.bin");
    int rc = write_text_shard(text, TRAIN_BYTES, FX->train) || write_text_shard(text + VAL_OFFSET, VAL_BYTES, FX->val);
    free(text);
    return rc ? -1 : 0;
}

static inline int group_teardown(void **state) {
    (void)state;
    DIR *d = opendir(FX->dir);
    if (d) {
        char p[sizeof FX->dir + sizeof((struct dirent *)0)->d_name + 1];
        for (struct dirent *e; (e = readdir(d));) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(p, sizeof p, "%s/%s", FX->dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(FX->dir);
    free(FX);
    return 0;
}

/* configs/tiny.conf on the fixture's shards; validation only at the end. */
static inline void tiny_config(struct config *c) {
    config_defaults(c);
    char err[CONFIG_ERR_LEN];
    if (config_load_file(c, "configs/tiny.conf", err) != 0) fail_msg("%s", err);
    snprintf(c->train_data, sizeof c->train_data, "%s", FX->train);
    snprintf(c->val_data, sizeof c->val_data, "%s", FX->val);
    c->val_every = 1000000;
    c->threads = 1;
}

static inline void set(struct config *c, const char *key, const char *value) {
    char err[CONFIG_ERR_LEN];
    if (config_set(c, key, value, err) != 0) fail_msg("%s", err);
}

static inline void open_ok(struct trainer *tr, const struct config *c) {
    char err[TRAINER_ERR_LEN];
    if (trainer_open(tr, c, &GRID, NULL, err) != 0) fail_msg("trainer_open: %s", err);
}

static inline void run_ok(struct trainer *tr) {
    char err[TRAINER_ERR_LEN];
    if (trainer_run(tr, err) != 0) fail_msg("trainer_run: %s", err);
}

/* ---- snapshots of the optimizer state ---------------------------------- */

struct snapshot {
    size_t psi;
    void *params;
    float *master, *adam_m, *adam_v;  /* master NULL in fp32 mode */
    size_t param_bytes;
};

static inline void snap(struct snapshot *s, const struct trainer *tr) {
    const struct engine *e = &tr->engine;
    s->psi = e->lay.total;
    s->param_bytes = s->psi * dtype_size(tr->cfg->param_dtype);
    s->params = malloc(s->param_bytes);
    s->adam_m = malloc(s->psi * sizeof(float));
    s->adam_v = malloc(s->psi * sizeof(float));
    s->master = e->z.st.master ? malloc(s->psi * sizeof(float)) : NULL;
    assert_true(s->params && s->adam_m && s->adam_v && (s->master || !e->z.st.master));
    memcpy(s->params, e->z.st.params, s->param_bytes);
    memcpy(s->adam_m, e->z.st.s1, s->psi * sizeof(float));
    memcpy(s->adam_v, e->z.st.s2, s->psi * sizeof(float));
    if (s->master) memcpy(s->master, e->z.st.master, s->psi * sizeof(float));
}

static inline void snap_free(struct snapshot *s) {
    free(s->params), free(s->master), free(s->adam_m), free(s->adam_v);
}

static inline void assert_same_states(const struct snapshot *a, const struct snapshot *b) {
    assert_int_equal(a->psi, b->psi);
    assert_int_equal(a->param_bytes, b->param_bytes);
    assert_true(memcmp(a->params, b->params, a->param_bytes) == 0);
    assert_true((a->master == NULL) == (b->master == NULL));
    if (a->master) assert_true(memcmp(a->master, b->master, a->psi * sizeof(float)) == 0);
    assert_true(memcmp(a->adam_m, b->adam_m, a->psi * sizeof(float)) == 0);
    assert_true(memcmp(a->adam_v, b->adam_v, a->psi * sizeof(float)) == 0);
}

#endif
