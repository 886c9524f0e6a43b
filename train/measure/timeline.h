/* The memory timeline of one optimizer step: at every phase boundary of
 * the step (each unit's forward, each unit's backward with its gradient
 * hand-off, the gradient reduction, the update, ZeRO-1/2's params
 * all-gather) the bytes IN USE on this rank, by category (docs/MEMORY.md):
 *
 *   model states and scratch: every allocated byte (they persist);
 *   activations: the tensors a slot's forward saved for units whose
 *     backward has not yet run, plus the one-layer recompute buffers
 *     during a layer's forward or backward;
 *   comm: a gathered unit buffer (ZeRO-3) while the phase reads it, while
 *     an all-gather into it is in flight, and the embedding's through the
 *     forward (the tied head reads its wte); a reduce-scatter bucket while
 *     the phase fills it or its reduce-scatter is in flight.
 *
 * Every buffer is allocated once at start-up, so "allocated" is flat
 * through a step; "in use" is what a step needs, phase by phase. A
 * phase's bytes are those in use at any moment of it. The measured side
 * reads the engine (pending requests, buffers' tracked sizes); the theory
 * (theory_trainer_timeline_peak, train/theory/accounting.h) derives the same
 * from the config alone.
 *
 * One step is kept (the latest the trainer ran): a fixed array in the run
 * context; phases past its end are counted, not kept (the peak still is). */
#ifndef SHARDLAB_TIMELINE_H
#define SHARDLAB_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>

#include "layout.h"
#include "mem.h"
#include "step_hooks.h"

struct engine;

enum { TIMELINE_MAX_PHASES = 512, TIMELINE_MAX_LIVE = 64 /* GPT_MAX_SLOTS */ };

/* One phase of the step: what ran and the bytes in use during it. */
struct timeline_phase {
    int kind;          /* enum phase_kind */
    int unit, layer;   /* the unit (-1: none) and, for a layer unit, its layer index (else -1) */
    int unit_kind;     /* enum unit_kind of the unit (-1: none) */
    int micro_batch;   /* 0-based within the step, as the trace's; -1 for the optimizer's phases */
    int index;         /* position in the step, 0-based */
    double bytes[MEM_NUM_CATEGORIES];
};

struct mem_timeline {
    const struct engine *engine;
    bool active;       /* recording (a training step); validation and sampling are not */
    int step;          /* the recorded step, 1-based */
    int forward_mb;    /* the micro-batch of the last forward phase (-1 at the step's start) */
    int started, done; /* micro-batches whose forward began, whose backward ended, this step */
    /* several chunks (interleaved): the (micro-batch, chunk) passes in flight, and the last forward's chunk */
    int live_mb[TIMELINE_MAX_LIVE], live_chunk[TIMELINE_MAX_LIVE], n_live, forward_chunk;
    int n, dropped;    /* phases kept, phases past TIMELINE_MAX_PHASES */
    struct timeline_phase peak;  /* the first phase with the largest total */
    struct timeline_phase phase[TIMELINE_MAX_PHASES];
};

/* The step's observer (include/step_hooks.h) that records the phases of
 * the engine at `e`; the timeline must outlive the engine and not move. */
struct step_observer timeline_observer(struct mem_timeline *t, const struct engine *e);
/* Starts recording step `step` (1-based), forgetting the previous one. */
void timeline_begin_step(struct mem_timeline *t, int step);
void timeline_end_step(struct mem_timeline *t);

double timeline_total(const struct timeline_phase *p);
/* "micro-batch 1 backward layer 3", "optimizer: reduce grads" */
void timeline_phase_name(const struct timeline_phase *p, char *buf, size_t len);
/* Whether ZeRO-3 holds the embedding's gathered params at a phase of kind
 * `kind` on a unit of `unit_kind` (include/layout.h): a tied head reads
 * wte, so through the forward and the head's backward; an untied head's
 * rank (llama) only in the embedding's own forward. The one rule the
 * measured timeline (measure_timeline.c) and its theory
 * (train/theory/theory_timeline.c) both apply. */
static inline bool timeline_embed_in_use(bool tied, enum phase_kind kind, int unit_kind) {
    return (kind == PHASE_FORWARD && (tied || unit_kind == UNIT_EMBED)) ||
           (kind == PHASE_BACKWARD && unit_kind == UNIT_HEAD && tied);
}

/* A phase with its names filled in from the unit (bytes zero). */
struct timeline_phase timeline_phase_at(enum phase_kind kind, int unit, int unit_kind, int layer, int micro_batch);

#endif
