/* The run context: one struct holds everything a training run owns
 * (configuration, grid, model and its states, data, counters, timeline,
 * trace); nothing global. Types only: every room of train/ takes it, and
 * what each does with it is declared by the room (train/run/run.h: the loop;
 * train/ckpt/ckpt.h: the run's files; train/report/report.h: the tables). */
#ifndef SHARDLAB_TRAINER_H
#define SHARDLAB_TRAINER_H

#include <stdio.h>

#include "../config/config.h"
#include "counters.h"
#include "data.h"
#include "device.h"
#include "energy.h"
#include "engine.h"
#include "grid.h"
#include "machine.h"
#include "mem.h"
#include "peak.h"
#include "timeline.h"
#include "step_hooks.h"
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
    struct exec_ctx flops;
    enum dtype gemm_dtype;      /* the layer GEMMs' operands: --gemm_dtype, auto resolved (trainer_open_kernels) */
    struct engine engine;
    bool engine_open;           /* engine_init ran (its buffers to free) */
    struct pipeline pipe;       /* this rank's stage and the step's schedule (include/schedule.h) */
    struct schedule_timing pipe_run; /* summed over the run's steps: the measured bubble */
    struct data_loader train, val;
    bool has_val;
    int32_t *inputs, *targets;  /* one micro-batch */
    int step;                   /* optimizer steps completed */
    FILE *json;
    int json_errno;             /* the first failed write to json: its errno (0: none) */
    int json_failed_step;       /* the step whose record could not be written */
    bool stdout_broken;         /* rank 0: a write to stdout failed with EPIPE (its reader is gone) */
    double train_seconds;       /* wall time inside steps */
    double val_seconds;         /* wall time validating (between steps, not in train_seconds) */
    double last_val_loss;       /* NO_VAL_LOSS until the run validates */
    double peak_flops;          /* FLOP/s for MFU; 0 = unknown: peak.flops once the run starts */
    struct peak_tracker peak;   /* a measured CPU peak rises to the best rate a step measured (peak.h) */
    const char *peak_source;    /* where peak_flops came from, as the FLOP table names it */
    double startup_tracked_peak, startup_rss; /* bytes, at the end of trainer_open */
    double device_used_peak;    /* a GPU run: the highest cudaMemGetInfo used bytes seen (start-up, each step) */
    double device_total;        /* its total bytes */
    double model_flops_per_step; /* theory, per rank: fixed by the config, so computed once */
    int skipped_steps;          /* updates dropped for a non-finite loss or norm (on_nonfinite skip_step),
                                 * over the whole run: kept in resume states */
    struct mem_timeline timeline; /* bytes in use phase by phase, of the latest step (train/measure/timeline.h) */
    struct progress progress;   /* the step line and its ETA (rank 0 prints) */
    struct trace trace;         /* --trace: this rank's timeline (include/trace.h); off when trace is "" */
    /* The step's observers (include/step_hooks.h; train/run/run_hooks.c
     * attaches them): the trace's state, and what the FLOP count, the peak
     * tracker and the energy meter read as a step begins. */
    struct step_hooks hooks;
    struct trace_watch trace_watch;
    struct exec_ctx step_start_flops;
    double step_start_joules;
    int stop_after;             /* > 0: trainer_run stops (and writes save_state) once step reaches it,
                                 * before steps; the LR schedule still follows steps. 0: off */
    char opt8_resume[160];      /* how a resume loaded 8-bit states (the line rank 0 prints); "" if none */
    /* The OpenMP team (train/run/run_team.c): its size now (1..threads), and
     * whether it follows the cores others leave free, watched between steps. */
    int team;
    bool team_follows;
    struct core_watch cores;
    /* Energy (train/run/run_energy.c, train/measure/energy.h): this rank's meter,
     * whether it is the one counted for its host's CPUs or its GPU, and
     * the run's joules summed over the counted meters of the world */
    struct energy_meter energy;
    bool energy_owner;          /* this rank counts its meter (the lowest rank on that host's CPUs or that GPU) */
    int energy_devices;         /* counted meters over the world: hosts on the CPU, GPUs on GPUs */
    bool energy_world;          /* every counted meter is available: the steps carry joules */
    double energy_run_j;        /* joules over the run's steps, every counted meter */
    int energy_steps;           /* steps in energy_run_j (a meter that stops leaves the rest out) */
    double watts;               /* the planner's P per device for E = t x P; 0: none */
    char watts_source[64];      /* where watts came from: "--watts", "NVML enforced power limit" */
};

/* Every rank's rc agreed over the grid (grid_agree, include/grid.h): a
 * failure anywhere fails every rank (those that did not fail get a message
 * saying so). */
static inline int trainer_agree(struct trainer *tr, int rc, char err[TRAINER_ERR_LEN]) {
    return grid_agree(tr->grid, rc, err, TRAINER_ERR_LEN);
}
/* The largest of every rank's value (in [0, 64): signal numbers), agreed over the grid. */
static inline int trainer_agree_max(struct trainer *tr, int mine) { return grid_agree_max(tr->grid, mine); }

#endif
