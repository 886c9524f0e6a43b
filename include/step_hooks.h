/* The named points of a training step, and the instruments that observe
 * them. The step calls step_hook at each point and names no instrument:
 * train/run/run_loop.c (train_step: the step's begin and end),
 * parallel/step.c (step_run: its optimizer phase), parallel/engine.c (a
 * micro-batch's forward and backward, a unit's span and its phase
 * boundary) and
 * parallel/zero/ (the collectives that move a unit, its release, the
 * update's phases). The trace (train/measure/measure_trace.c), the memory
 * timeline (measure_timeline.c), energy (train/run/run_energy.c), the FLOP
 * count and the peak tracker, and the device's kernel timing
 * (train/run/run_hooks.c) each attach an observer (train/run/run_hooks.c
 * attaches them). A step without observers runs the same. */
#ifndef SHARDLAB_STEP_HOOKS_H
#define SHARDLAB_STEP_HOOKS_H

/* The phase boundaries the memory timeline samples (train/measure/timeline.h).
 * The boundary comes once a phase's work is done and before anything it
 * used is released or reused (a unit's forward: after its compute; its
 * backward: after its gradient was handed to the model states), except
 * PHASE_REDUCE_GRADS, which comes before the step's reduction starts. */
enum phase_kind {
    PHASE_FORWARD,        /* one unit's forward (unit: its index) */
    PHASE_BACKWARD,       /* one unit's backward and its gradient hand-off */
    PHASE_REDUCE_GRADS,   /* the step's gradient reduction (unit -1) */
    PHASE_UPDATE,         /* clip and update of this rank's segments (unit -1) */
    PHASE_GATHER_PARAMS,  /* ZeRO-1/2: updated params all-gathered (unit -1) */
    PHASE_NUM_KINDS
};

enum step_point {
    STEP_BEGINS,          /* step: the one about to run (1-based) */
    STEP_ENDS,            /* metrics: the step's, which observers complete */
    OPTIMIZER_BEGINS,     /* the forwards and backwards are done; reduce, clip, update, gather follow */
    OPTIMIZER_ENDS,
    MICRO_BATCH_BEGINS,   /* phase (PHASE_FORWARD or PHASE_BACKWARD), micro_batch, chunk */
    MICRO_BATCH_ENDS,
    UNIT_BEGINS,          /* a unit's forward or backward: phase, unit, micro_batch */
    UNIT_ENDS,
    PHASE_DONE,           /* the boundary after a phase: phase, unit (-1: the step's), micro_batch */
    UNIT_MOVES,           /* the collectives that follow move unit `unit` (an all_gather posted ahead, a late wait) */
    UNIT_MOVED,           /* ... until here */
    UNIT_RELEASED,        /* ZeRO-3: unit `unit`'s gathered params released; bytes: its buffer's */
};

struct step_metrics; /* train/run/run_loop.c's */

struct step_event {
    enum step_point at;
    enum phase_kind phase;
    int unit, micro_batch, chunk, step;
    double bytes;
    struct step_metrics *metrics;
};

struct step_observer {
    void (*see)(void *self, const struct step_event *ev);
    void *self;
};

/* At most this many instruments watch a step (five today). */
enum { STEP_MAX_OBSERVERS = 8 };

struct step_hooks {
    struct step_observer observer[STEP_MAX_OBSERVERS];
    int n;
};

/* Adds an observer; -1 when the table is full (a programming error the
 * caller reports). */
static inline int step_hooks_attach(struct step_hooks *h, struct step_observer o) {
    if (h->n >= STEP_MAX_OBSERVERS) return -1;
    h->observer[h->n++] = o;
    return 0;
}

/* The step reached ev.at: every observer sees it, in the order attached.
 * h NULL: nobody watches. */
static inline void step_hook(const struct step_hooks *h, struct step_event ev) {
    if (!h) return;
    for (int i = 0; i < h->n; i++) h->observer[i].see(h->observer[i].self, &ev);
}

#endif
