/* A hook the step calls at its phase boundaries, so a layer above (the
 * trainer's memory timeline, include/timeline.h) can look at the engine
 * between units without parallel/ depending on it. Unset (at == NULL): a
 * no-op. The call comes once a phase's work is done and before anything it
 * used is released or reused (a unit's forward: after its compute; its
 * backward: after its gradient was handed to the model states), except
 * PHASE_REDUCE_GRADS, which comes before the step's reduction starts. */
#ifndef SHARDLAB_PHASE_HOOK_H
#define SHARDLAB_PHASE_HOOK_H

enum phase_kind {
    PHASE_FORWARD,        /* one unit's forward (unit: its index) */
    PHASE_BACKWARD,       /* one unit's backward and its gradient hand-off */
    PHASE_REDUCE_GRADS,   /* the step's gradient reduction (unit -1) */
    PHASE_UPDATE,         /* clip and update of this rank's segments (unit -1) */
    PHASE_GATHER_PARAMS,  /* ZeRO-1/2: updated params all-gathered (unit -1) */
    PHASE_NUM_KINDS
};

/* at(): micro_batch is the one the schedule runs (0-based within the step,
 * as the trace numbers them; the schedule's order, not the count of
 * phases, says which), -1 for the step's own phases. */
struct phase_hook {
    void (*at)(void *ctx, enum phase_kind kind, int unit, int micro_batch);
    void *ctx;
};

static inline void phase_hook_call(const struct phase_hook *h, enum phase_kind kind, int unit, int micro_batch) {
    if (h->at) h->at(h->ctx, kind, unit, micro_batch);
}

#endif
