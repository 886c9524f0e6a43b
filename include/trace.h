/* The run's timeline recorder (--trace FILE): what each rank did when, as
 * spans of time, for a Chrome trace-event file (train/measure/measure_trace.c writes
 * it; open it in https://ui.perfetto.dev or chrome://tracing). Header-only,
 * so every level records into it: the schedules (forward, backward of each
 * micro-batch), the trainer (step, optimizer, validation) and the MPI
 * collectives (every call, with its group and counted bytes).
 *
 * One recorder per rank, in the run context: a fixed array of events
 * allocated once through the memory tracker (MEM_SCRATCH, "trace events"),
 * so the memory table accounts for it. A NULL recorder, or one never opened
 * (zeroed), records nothing: callers need no ifs. When the array is full,
 * recording stops and the events that did not fit are counted (dropped);
 * the file says how many.
 *
 * A unit's life (ZeRO's unit: the embedding, a layer, the head): the
 * step's observer (struct trace_watch, train/measure/measure_trace.c, on
 * include/step_hooks.h) sets the unit the engine works on (trace_set_unit)
 * around its forward and backward spans, tags the collectives that move
 * a unit (the all-gather of its params, the reduce-scatter of its
 * gradient) and records when ZeRO-3 releases the unit's gathered params;
 * every event carries the unit set when it was added.
 *
 * Spans: `int ev = trace_begin(t, TRACE_FORWARD, k); ...; trace_end(t, ev);`.
 * The event takes its array slot at begin, so the array is in begin order
 * and spans nest (a collective inside a forward inside a step). A span
 * begun when the array was full gets token -1, which trace_end ignores.
 *
 * Time: CLOCK_MONOTONIC in integer nanoseconds. On one host the clock is
 * system-wide, so ranks line up; across hosts the clocks are NOT aligned
 * (each host's monotonic clock starts at its own boot), so a multi-host
 * trace shows each host's ranks shifted by an unknown offset. */
#ifndef SHARDLAB_TRACE_H
#define SHARDLAB_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "mem.h"

enum trace_kind {
    TRACE_STEP,        /* a whole optimizer step */
    TRACE_FORWARD,     /* one micro-batch's forward on this rank (a chunk of it: interleaved schedules) */
    TRACE_BACKWARD,    /* its backward */
    TRACE_SEND,        /* point to point: a blocking send, or an isend's post */
    TRACE_RECV,        /* a blocking receive, or an irecv's post */
    TRACE_WAIT,        /* waiting for a non-blocking transfer or collective to complete */
    TRACE_COLLECTIVE,  /* a blocking collective, or a non-blocking one's post */
    TRACE_OPTIMIZER,   /* reduce, clip, update, redistribute */
    TRACE_VALIDATION,  /* the validation forwards and their mean */
    TRACE_UNIT_FORWARD,  /* one unit's forward inside a micro-batch's (its params' wait included) */
    TRACE_UNIT_BACKWARD, /* one unit's backward, its gradient handed to ZeRO */
    TRACE_RELEASE,     /* stage 3: the unit's gathered params released (an instant; bytes: the buffer's) */
    TRACE_NUM_KINDS
};

/* The unit an event belongs to: kind as include/layout.h's enum unit_kind
 * (-1: none), layer its global index for a layer unit (else -1). */
struct trace_unit {
    int16_t kind;
    int32_t layer;
};

static const struct trace_unit TRACE_NO_UNIT = {.kind = -1, .layer = -1};

/* How a communication event relates to its transfer. */
enum trace_call {
    TRACE_CALL_NONE,      /* not communication */
    TRACE_CALL_BLOCKING,  /* the whole transfer, inside one call */
    TRACE_CALL_POST,      /* a non-blocking post (short): the counters count the transfer here */
    TRACE_CALL_WAIT,      /* the wait that completes a post */
};

/* One span. Fixed size, the same on every rank: rank 0 receives them as bytes. */
struct trace_event {
    int64_t t0, t1;        /* CLOCK_MONOTONIC ns; t1 < t0: begun, never ended */
    double bytes;          /* communication: the bytes the comm counters count for it (ring volumes,
                            * include/collectives.h); on a wait, its post's */
    int32_t kind;          /* enum trace_kind */
    int32_t step;          /* the step it belongs to (1-based; trace_set_step), 0 before the first */
    int32_t micro_batch;   /* 0-based within the step; -1: none */
    int32_t chunk;         /* virtual stage of an interleaved schedule; 0 otherwise */
    int16_t call;          /* enum trace_call */
    int16_t coll;          /* enum coll_kind (include/collectives.h); -1: none */
    int16_t group;         /* enum grid_group (include/grid.h); -1: none */
    int16_t peer;          /* point to point: the peer's rank in the group; -1: none */
    int16_t unit_kind;     /* the unit (struct trace_unit), -1: none */
    int32_t layer;
};

struct trace {
    struct trace_event *events;  /* NULL: off */
    size_t capacity, n;
    size_t dropped;              /* events that did not fit */
    int step;                    /* stamped on the events that follow */
    struct trace_unit unit;      /* likewise (trace_set_unit) */
};

static inline int64_t trace_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Allocates room for `capacity` events (tracked: MEM_SCRATCH, "trace
 * events"). 0, or -1 when the allocation failed (recorded in the tracker,
 * include/mem.h; t is then off). */
static inline int trace_open(struct trace *t, struct mem_tracker *mem, size_t capacity) {
    *t = (struct trace){.unit = TRACE_NO_UNIT};
    if (capacity == 0) return 0;
    t->events = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, "trace events", capacity * sizeof *t->events);
    if (!t->events) return -1;
    t->capacity = capacity;
    return 0;
}

static inline void trace_close(struct trace *t, struct mem_tracker *mem) {
    if (t->events) mem_free(mem, t->events);
    *t = (struct trace){0};
}

static inline bool trace_on(const struct trace *t) { return t && t->events; }

/* The step whose events follow (1-based). */
static inline void trace_set_step(struct trace *t, int step) {
    if (trace_on(t)) t->step = step;
}

/* The unit the events that follow belong to; returns the one set before,
 * to put back (TRACE_NO_UNIT when off). */
static inline struct trace_unit trace_set_unit(struct trace *t, struct trace_unit u) {
    if (!trace_on(t)) return TRACE_NO_UNIT;
    struct trace_unit before = t->unit;
    t->unit = u;
    return before;
}

/* Appends ev, stamped with the current step and unit; returns its token (index), or
 * -1 when off or full (then counted as dropped). */
static inline int trace_add(struct trace *t, struct trace_event ev) {
    if (!trace_on(t)) return -1;
    if (t->n == t->capacity || t->n >= (size_t)INT32_MAX) {
        t->dropped++;
        return -1;
    }
    ev.step = t->step;
    ev.unit_kind = t->unit.kind;
    ev.layer = t->unit.layer;
    t->events[t->n] = ev;
    return (int)t->n++;
}

/* A span of `kind` starting now; chunk: the virtual stage (0 unless the
 * schedule is interleaved). micro_batch: 0-based within the step, -1: none. */
static inline int trace_begin_chunk(struct trace *t, enum trace_kind kind, int micro_batch, int chunk) {
    if (!trace_on(t)) return -1;
    int64_t now = trace_now_ns();
    return trace_add(t, (struct trace_event){.t0 = now, .t1 = now - 1, .kind = kind, .micro_batch = micro_batch,
                                             .chunk = chunk, .coll = -1, .group = -1, .peer = -1});
}

static inline int trace_begin(struct trace *t, enum trace_kind kind, int micro_batch) {
    return trace_begin_chunk(t, kind, micro_batch, 0);
}

/* An instant of `kind` now, of `bytes` (a release). */
static inline void trace_instant(struct trace *t, enum trace_kind kind, int micro_batch, double bytes) {
    if (!trace_on(t)) return;
    int64_t now = trace_now_ns();
    trace_add(t, (struct trace_event){.t0 = now, .t1 = now, .bytes = bytes, .kind = kind, .micro_batch = micro_batch,
                                      .coll = -1, .group = -1, .peer = -1});
}

/* Ends the span of token `ev` now (-1: a no-op). */
static inline void trace_end(struct trace *t, int ev) {
    if (!trace_on(t) || ev < 0 || (size_t)ev >= t->n) return;
    t->events[ev].t1 = trace_now_ns();
}

/* "step", "forward", ...: the kinds' names (a collective's comes from coll_kind_name). */
static inline const char *trace_kind_name(enum trace_kind k) {
    static const char *const names[TRACE_NUM_KINDS] = {
        [TRACE_STEP] = "step",           [TRACE_FORWARD] = "forward",     [TRACE_BACKWARD] = "backward",
        [TRACE_SEND] = "send",           [TRACE_RECV] = "recv",           [TRACE_WAIT] = "wait",
        [TRACE_COLLECTIVE] = "collective", [TRACE_OPTIMIZER] = "optimizer", [TRACE_VALIDATION] = "validation",
        [TRACE_UNIT_FORWARD] = "forward", [TRACE_UNIT_BACKWARD] = "backward", [TRACE_RELEASE] = "release"};
    return (unsigned)k < TRACE_NUM_KINDS ? names[k] : "?";
}

/* The trace as an observer of the step (include/step_hooks.h): the spans
 * it has open (step, optimizer, micro-batch, unit: they nest) and the unit
 * tags it put back as the collectives that moved another unit end. */
enum { TRACE_WATCH_DEPTH = 8 };
struct model_layout;
struct trace_watch {
    struct trace *trace;
    const struct model_layout *lay; /* names units: their kind and layer */
    int span[TRACE_WATCH_DEPTH], spans;
    struct trace_unit tag[TRACE_WATCH_DEPTH];
    int tags;
};

#endif
