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
#include "mem.h"

enum { TRAINER_ERR_LEN = 1024 };

struct trainer {
    const struct config *cfg;
    struct mem_tracker mem;
    struct flop_counter flops;
    struct engine engine;
    struct data_loader train, val;
    bool has_val;
    int32_t *inputs, *targets;  /* one micro-batch */
    int step;                   /* optimizer steps completed */
    FILE *json;
    double train_seconds;       /* wall time inside steps */
    double last_val_loss;
    double peak_flops;          /* FLOP/s for MFU; 0 = unknown */
    int stop_after;             /* > 0: trainer_run stops (and writes save_state) once step reaches it,
                                 * before steps; the LR schedule still follows steps. 0: off */
};

/* Builds everything (data, model, init/load/resume). On failure returns -1
 * with a message; the trainer is then already torn down. */
int trainer_open(struct trainer *tr, const struct config *cfg, char err[TRAINER_ERR_LEN]);
/* Runs the remaining steps; returns -1 (with err) only on I/O failure. */
int trainer_run(struct trainer *tr, char err[TRAINER_ERR_LEN]);
void trainer_close(struct trainer *tr);

/* Mean loss over the first val_batches micro-batches of the validation data. */
float trainer_validate(struct trainer *tr);

/* Resume states (train/state.c). */
int trainer_save_state(const struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]);
int trainer_load_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]);

/* Generates cfg->sample_tokens tokens after cfg->sample_prompt (train/sample.c). */
void trainer_sample(struct trainer *tr, FILE *out);

/* The measured-vs-theory tables (train/report.c): memory per category
 * (model states to the byte, activations against the saved-tensor formula),
 * FLOPs per step with MFU/HFU, and communication. With json, memory records
 * also go there. */
void report_buffers(FILE *out, const struct trainer *tr);
void report_memory(FILE *out, FILE *json, const struct trainer *tr, const char *when);
void report_flops(FILE *out, const struct trainer *tr, int steps);
void report_comm(FILE *out, const struct trainer *tr);

#endif
