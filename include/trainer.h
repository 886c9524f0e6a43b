/* The training run: configuration in, steps, validation, checkpoints,
 * metrics and the measured tables out. One struct holds the whole run
 * context; nothing global. */
#ifndef SHARDLAB_TRAINER_H
#define SHARDLAB_TRAINER_H

#include <stdio.h>

#include "config.h"
#include "counters.h"
#include "data.h"
#include "engine.h"
#include "grid.h"
#include "mem.h"

enum { TRAINER_ERR_LEN = 1024 };

struct trainer {
    const struct config *cfg;
    struct grid *grid;          /* dp x tp x pp; the engine uses its dp group */
    struct mem_tracker mem;
    struct flop_counter flops;
    struct engine engine;
    bool engine_open;           /* engine_init ran (its buffers to free) */
    struct data_loader train, val;
    bool has_val;
    int32_t *inputs, *targets;  /* one micro-batch */
    int step;                   /* optimizer steps completed */
    FILE *json;
    double train_seconds;       /* wall time inside steps */
    double last_val_loss;
    double peak_flops;          /* FLOP/s for MFU; 0 = unknown */
    double startup_tracked_peak, startup_rss; /* bytes, at the end of trainer_open */
    double model_flops_per_step; /* theory, per rank: fixed by the config, so computed once */
    int stop_after;             /* > 0: trainer_run stops (and writes save_state) once step reaches it,
                                 * before steps; the LR schedule still follows steps. 0: off */
    char opt8_resume[160];      /* how a resume loaded 8-bit states (the line rank 0 prints); "" if none */
};

/* The model's shape and the engine's options, from a configuration. */
struct model_shape trainer_model_shape(const struct config *c);
struct engine_options trainer_engine_options(const struct config *c);

/* Builds everything (data, model, init/load/resume). Collective over the
 * grid: when any rank fails, every rank returns -1 (the failing rank with
 * its message, the others saying so), and the trainer is torn down. */
int trainer_open(struct trainer *tr, const struct config *cfg, struct grid *grid, char err[TRAINER_ERR_LEN]);
/* Runs the remaining steps; returns -1 (with err) only on I/O failure. */
int trainer_run(struct trainer *tr, char err[TRAINER_ERR_LEN]);
void trainer_close(struct trainer *tr);

/* Mean loss over the first val_batches micro-batches of the validation data. */
float trainer_validate(struct trainer *tr);

/* llm.c model files, one unit at a time (train/model_file.c). Collective. */
int trainer_load_model(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]);
int trainer_save_model(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]);

/* Resume states (train/state.c). */
int trainer_save_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]);
int trainer_load_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]);

/* This process's peak resident set so far (getrusage), bytes. */
double peak_rss_bytes(void);

/* Every rank's rc agreed over the grid: a failure anywhere fails every
 * rank (those that did not fail get a message saying so). */
int trainer_agree(struct trainer *tr, int rc, char err[TRAINER_ERR_LEN]);

/* Generates cfg->sample_tokens tokens after cfg->sample_prompt (train/sample.c).
 * Collective: every rank runs it; out may be NULL on all but one. */
void trainer_sample(struct trainer *tr, FILE *out);

#endif
