/* The training run: configuration in, steps, validation, checkpoints,
 * metrics and the measured tables out. One struct holds the whole run
 * context; nothing global. */
#ifndef SHARDLAB_TRAINER_H
#define SHARDLAB_TRAINER_H

#include <stdio.h>

#include "config.h"
#include "counters.h"
#include "data.h"
#include "device.h"
#include "engine.h"
#include "grid.h"
#include "mem.h"
#include "timeline.h"
#include "trace.h"
#include "progress.h"
#include "schedule.h"

enum { TRAINER_ERR_LEN = 1024 };

/* A validation loss that is not there (the run has not validated, or a
 * step did not): losses are >= 0. */
#define NO_VAL_LOSS (-1.0f)
static inline bool has_val_loss(double v) { return v >= 0; }

struct trainer {
    const struct config *cfg;
    struct grid *grid;          /* dp x tp x pp; the engine uses its dp group */
    struct device_info dev;     /* where the model runs (include/device.h): the CPU, or this rank's GPU */
    enum mem_space space;       /* where the engine's buffers live: MEM_DEVICE on a GPU */
    struct mem_tracker mem;
    struct flop_counter flops;
    struct engine engine;
    bool engine_open;           /* engine_init ran (its buffers to free) */
    struct pipeline pipe;       /* this rank's stage and the step's schedule (include/schedule.h) */
    struct schedule_timing pipe_run; /* summed over the run's steps: the measured bubble */
    struct data_loader train, val;
    bool has_val;
    int32_t *inputs, *targets;  /* one micro-batch */
    int step;                   /* optimizer steps completed */
    FILE *json;
    double train_seconds;       /* wall time inside steps */
    double last_val_loss;       /* NO_VAL_LOSS until the run validates */
    double peak_flops;          /* FLOP/s for MFU; 0 = unknown */
    const char *peak_source;    /* where peak_flops came from, as the FLOP table names it */
    double startup_tracked_peak, startup_rss; /* bytes, at the end of trainer_open */
    double device_used_peak;    /* a GPU run: the highest cudaMemGetInfo used bytes seen (start-up, each step) */
    double device_total;        /* its total bytes */
    double model_flops_per_step; /* theory, per rank: fixed by the config, so computed once */
    int skipped_steps;          /* updates dropped for a non-finite loss or norm (on_nonfinite skip_step),
                                 * over the whole run: kept in resume states */
    struct mem_timeline timeline; /* bytes in use phase by phase, of the latest step (include/timeline.h) */
    struct progress progress;   /* the step line and its ETA (rank 0 prints) */
    struct trace trace;         /* --trace: this rank's timeline (include/trace.h); off when trace is "" */
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
int trainer_open(struct trainer *tr, const struct config *cfg, struct grid *grid, const struct device_info *dev,
                 char err[TRAINER_ERR_LEN]);
/* Runs the remaining steps. Returns 0 when done; -1 (with err) on I/O
 * failure and on a NaN or Inf loss or gradient norm (on_nonfinite stop, or
 * more than max_skipped_steps skipped: the update of that step is not
 * applied and nothing is saved after it, so files already written stay as
 * they were); or, when a stop signal reached any rank
 * (include/stop_signal.h), its number (> 0), after the step it interrupted
 * and a resume state written to trainer_stop_state_path (train/outputs.c). */
int trainer_run(struct trainer *tr, char err[TRAINER_ERR_LEN]);
void trainer_close(struct trainer *tr);

/* Mean loss over the first val_batches micro-batches of the validation data. */
float trainer_validate(struct trainer *tr);

/* Before trainer_open, with c->init_from set: the file's header against
 * the config. n_layer, d_model, n_head and vocab_size must equal the
 * file's (the message names the key and both values); max_seq_len, when
 * 0, becomes the file's, and must equal it otherwise; seq_len may be any
 * length up to it (GPT-2's files hold 1024 positions; a run at T = 64
 * uses the first 64 rows, and --save writes all of them back). */
int trainer_adopt_model_file(struct config *c, char err[TRAINER_ERR_LEN]);
/* llm.c model files, one unit at a time (train/model_file.c). Collective. */
int trainer_load_model(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]);
int trainer_save_model(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]);

/* Resume states (train/state.c). */
int trainer_save_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]);
/* The bytes trainer_save_state writes. */
uint64_t trainer_state_bytes(const struct trainer *tr);
int trainer_load_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]);

/* This process's peak resident set so far (getrusage), bytes. */
double peak_rss_bytes(void);
/* Where the run's model lives (train/trainer_device.c): dev, or the CPU
 * when NULL; on a GPU the tracker's device space allocates with cudaMalloc. */
void trainer_place(struct trainer *tr, const struct device_info *dev);
/* The GPU's kernel context (one cuBLAS handle, the GEMM math), reached by
 * the kernels through the run's flop counter (include/counters.h), after
 * checking that --attention flash takes this shape there. On the CPU:
 * nothing, or the error that names what needs a GPU (--gemm_dtype bf16).
 * 0, or -1 with a message. trainer_close_kernels undoes it (any time). */
int trainer_open_kernels(struct trainer *tr, char err[TRAINER_ERR_LEN]);
void trainer_close_kernels(struct trainer *tr);
/* A GPU run: samples the driver's used bytes into device_used_peak. */
void trainer_sample_device_memory(struct trainer *tr);

/* train/layout_check.c: 0 when the trainer runs this config on grid g,
 * else -1 with the reason (every rank decides alike). */
int trainer_check_layout(const struct config *cfg, const struct grid *g, char err[TRAINER_ERR_LEN]);

/* Every rank's rc agreed over the grid: a failure anywhere fails every
 * rank (those that did not fail get a message saying so). */
int trainer_agree(struct trainer *tr, int rc, char err[TRAINER_ERR_LEN]);
/* The largest of every rank's value (in [0, 64): signal numbers), agreed over the grid. */
int trainer_agree_max(struct trainer *tr, int mine);

/* Generates cfg->sample_tokens tokens after cfg->sample_prompt (train/sample.c).
 * Collective: every rank runs it; out may be NULL on all but one. */
void trainer_sample(struct trainer *tr, FILE *out);

#endif
