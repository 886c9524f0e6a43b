/* The run (train/run/): a trainer opened from a configuration on a grid,
 * its steps, validation and sampling, and where its model lives. The
 * context itself is struct trainer (train/measure/trainer.h). */
#ifndef SHARDLAB_RUN_H
#define SHARDLAB_RUN_H

#include <stdio.h>

#include "../measure/trainer.h"

/* What a step measured (train_step): the step fills its loss, norm,
 * tokens, times and model FLOPs; its observers (train/run/run_hooks.c)
 * the issued FLOPs, GEMM time, MFU and joules. */
struct step_metrics {
    float loss, val_loss, lr; /* val_loss: NO_VAL_LOSS where the step did not validate */
    double grad_norm, ms, tokens_per_s, flops, model_flops, mfu, gemm_ms, optimizer_ms;
    double joules, planned_joules; /* the step's, every counted meter (NAN: not measured); E = t x P (NAN: no P) */
    double tokens;
    bool nonfinite; /* the loss or the gradient norm is NaN or Inf: no update was applied */
};

/* Attaches the step's observers (include/step_hooks.h) to tr->hooks:
 * the device's kernel timing, the trace (with --trace), the memory
 * timeline, the FLOP count and peak tracker, and energy. Before
 * engine_init: the engine's options point at tr->hooks. */
void trainer_attach_observers(struct trainer *tr);

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
 * (train/run/run_stop_signal.h), its number (> 0), after the step it interrupted
 * and a resume state written to trainer_stop_state_path (train/run/run_outputs.c). */
int trainer_run(struct trainer *tr, char err[TRAINER_ERR_LEN]);
void trainer_close(struct trainer *tr);

/* Mean loss over the first val_batches micro-batches of the validation data. */
float trainer_validate(struct trainer *tr);

/* Where the run's model lives (train/run/run_device.c): dev, or the CPU
 * when NULL; on a GPU the tracker's device space allocates with cudaMalloc. */
void trainer_place(struct trainer *tr, const struct device_info *dev);
/* The run's kernel context, reached by the kernels through the run's flop
 * counter (include/counters.h), and tr->gemm_dtype (--gemm_dtype, auto
 * resolved). On a GPU: one cuBLAS handle and the GEMM math, after checking
 * that --attention flash takes this shape there. On the CPU: with bf16
 * GEMMs oneDNN's context (include/onednn_gemms.h), or the error that names
 * what this CPU lacks for them; with fp32 nothing.
 * 0, or -1 with a message. trainer_close_kernels undoes it (any time). */
int trainer_open_kernels(struct trainer *tr, char err[TRAINER_ERR_LEN]);
void trainer_close_kernels(struct trainer *tr);
/* A GPU run: samples the driver's used bytes into device_used_peak. */
void trainer_sample_device_memory(struct trainer *tr);

/* The run's energy (train/run/run_energy.c): opens this rank's meter (a
 * GPU's NVML counter, else the host's RAPL packages) and decides, over the
 * world, which ranks count theirs: one per host's CPUs or per GPU, so two
 * ranks on one host or one GPU count it once. Collective (MPI_COMM_WORLD). */
void trainer_open_energy(struct trainer *tr);
/* The step's joules over every counted meter, from this rank's readings
 * before (start) and now: collective over the world when tr->energy_world
 * (one MPI_Allreduce of two doubles), NAN and no collective otherwise or
 * when a meter stopped during the step. Adds to energy_run_j. */
double trainer_step_energy(struct trainer *tr, double start_joules);

/* Generates cfg->sample_tokens tokens after cfg->sample_prompt (train/run/run_sample.c).
 * Collective: every rank runs it; out may be NULL on all but one. */
void trainer_sample(struct trainer *tr, FILE *out);

#endif
