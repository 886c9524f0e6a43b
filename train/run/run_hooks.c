/* The step's instruments, attached to its named points (include/step_hooks.h):
 * the step (parallel/step.c, parallel/engine.c, train/run/run_loop.c's
 * train_step) calls the points and reads
 * none of these. In the order attached, which is the order they see a
 * point:
 *   kernel timing  a GPU's queued kernels waited for before the optimizer's
 *                  clock starts and before it stops (include/device.h; a
 *                  run on the host has none to wait for);
 *   trace          the step's spans, unit tags and releases (--trace;
 *                  train/measure/measure_trace.c);
 *   timeline       the bytes in use phase by phase (measure_timeline.c);
 *   FLOPs, peak    the step's issued FLOPs and GEMM time from the run's
 *                  counter, its rates raising a probed peak (peak.h), MFU;
 *   energy         the meters read around the step (run_energy.c). */
#include "run.h"

#include <math.h>

#include "device.h"
#include "../measure/progress.h"
#include "../theory/theory.h"
#include "../measure/trace_file.h"

static void kernels_see(void *self, const struct step_event *ev) {
    struct trainer *tr = self;
    if (ev->at == OPTIMIZER_BEGINS || ev->at == OPTIMIZER_ENDS) device_kernels_sync(&tr->dev, &tr->flops);
}

/* The step's rates raise a probed peak (peak.h): its GEMMs over their own
 * time, its issued GEMM FLOPs and its model FLOPs over the step's. Said
 * the first time, by the rank whose peak rose (each rank keeps its own). */
static void observe_peak(struct trainer *tr, const struct exec_ctx *before, double model_flops, double dt) {
    const struct exec_ctx *f = &tr->flops;
    double issued = f->gemm - before->gemm + f->attention - before->attention;
    double gemm_s = f->gemm_seconds - before->gemm_seconds;
    const double rate[PEAK_RATES] = {[PEAK_RATE_GEMMS] = gemm_s > 0 ? issued / gemm_s : 0.0,
                                     [PEAK_RATE_ISSUED] = issued / dt, [PEAK_RATE_MODEL] = model_flops / dt};
    const double was = tr->peak.flops;
    const bool first = tr->peak.raised_step < 0;
    if (!peak_tracker_observe(&tr->peak, tr->step, rate)) return;
    tr->peak_flops = tr->peak.flops;
    if (!first) return;
    if (tr->grid->world_rank == 0) progress_end_line(&tr->progress, stdout);
    printf("rank %d: peak raised to %.1f GFLOP/s: step %d's %s ran faster than the start-up probe (%.1f GFLOP/s); "
           "the peak is now the best rate observed\n",
           tr->grid->world_rank, tr->peak.flops / 1e9, tr->step, peak_rate_name(tr->peak.raised_by), was / 1e9);
    fflush(stdout);
}

static void flops_see(void *self, const struct step_event *ev) {
    struct trainer *tr = self;
    if (ev->at == STEP_BEGINS) tr->step_start_flops = tr->flops;
    if (ev->at != STEP_ENDS) return;
    struct step_metrics *m = ev->metrics;
    const struct exec_ctx *before = &tr->step_start_flops;
    double dt = m->ms / 1e3;
    m->flops = flops_total(&tr->flops) - flops_total(before);
    m->gemm_ms = (tr->flops.gemm_seconds - before->gemm_seconds) * 1e3;
    observe_peak(tr, before, m->model_flops, dt);
    m->mfu = tr->peak_flops > 0 ? m->model_flops / dt / tr->peak_flops : 0.0;
}

static void energy_see(void *self, const struct step_event *ev) {
    struct trainer *tr = self;
    if (ev->at == STEP_BEGINS) {
        if (tr->energy_world) energy_read(&tr->energy); /* a failure: trainer_step_energy */
        tr->step_start_joules = tr->energy.joules;
    } else if (ev->at == STEP_ENDS) {
        struct step_metrics *m = ev->metrics;
        m->joules = trainer_step_energy(tr, tr->step_start_joules); /* collective when measured */
        m->planned_joules = tr->watts > 0 ? theory_energy_joules(m->ms / 1e3, tr->energy_devices, tr->watts) : NAN;
    }
}

void trainer_attach_observers(struct trainer *tr) {
    struct step_observer in_order[] = {
        /* only where kernels queue: on the host each has returned when its call has */
        tr->space == MEM_DEVICE ? (struct step_observer){kernels_see, tr} : (struct step_observer){0},
        *tr->cfg->trace ? trace_observer(&tr->trace_watch, &tr->trace, &tr->engine.lay) : (struct step_observer){0},
        timeline_observer(&tr->timeline, &tr->engine),
        {flops_see, tr},
        {energy_see, tr},
    };
    tr->hooks = (struct step_hooks){0};
    for (size_t i = 0; i < sizeof in_order / sizeof in_order[0]; i++)
        if (in_order[i].see) step_hooks_attach(&tr->hooks, in_order[i]); /* fewer than STEP_MAX_OBSERVERS */
}
