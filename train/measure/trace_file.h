/* --trace FILE: the run's timeline (include/trace.h) as one Chrome
 * trace-event JSON file, written by world rank 0 from every rank's events
 * (train/measure/measure_trace.c). Open it in https://ui.perfetto.dev or
 * chrome://tracing: one track per rank (pid 0, tid = world rank, named
 * "rank R (dp d, tp t, pp p)"), "X" complete events with ts and dur in
 * microseconds from the earliest event of any rank.
 *
 * Names: "step S", "forward M" / "backward M" (micro-batch M of the step;
 * "forward vC M" for virtual stage C > 0), "optimizer", "validation", and
 * for communication "KIND GROUP" (a blocking call, e.g. "all-gather dp"),
 * "post KIND GROUP" and "wait KIND GROUP" (non-blocking). Args: step,
 * micro_batch and chunk; for communication kind, group, call (blocking,
 * post, wait), bytes (blocking and post: the bytes the comm counters count,
 * so a step's "bytes" sum to the comm table's per-step figures times
 * steps) or posted_bytes (wait: its post's, not counted again) and peer
 * (point to point, the rank in the group). Each rank's thread_name event
 * carries "recorded" and "dropped"; a rank whose array filled up also has an
 * instant event "trace full: N events dropped". */
#ifndef SHARDLAB_TRACE_FILE_H
#define SHARDLAB_TRACE_FILE_H

#include <stddef.h>

#include "../config/config.h"
#include "step_hooks.h"
#include "trace.h"
#include "trainer.h"

/* The observer that records the step's spans, unit tags and releases
 * into t (include/step_hooks.h), w its state; lay: the engine's layout,
 * which names the units (read when an event comes, so it may be filled
 * after). */
struct step_observer trace_observer(struct trace_watch *w, struct trace *t, const struct model_layout *lay);

/* The most events per rank the automatic capacity gives (48 MiB); a larger
 * run keeps its first steps, or sets trace_events. */
enum { TRACE_AUTO_MAX_EVENTS = 1 << 20 };

/* Events per rank for c (0 when c->trace is ""): trace_events when set;
 * otherwise a bound on what the run records, from its size (steps, grad_accum,
 * units, validations, saves), at most TRACE_AUTO_MAX_EVENTS. The same on
 * every rank, and what the memory theory counts. */
size_t trace_capacity(const struct config *c);

/* Collective over the world: stops recording (the grid's groups detach),
 * sends every rank's events to world rank 0, which writes c->trace
 * atomically (include/fileio.h). A no-op returning 0 when trace is off.
 * -1 on every rank (with err) when the file could not be written. */
int trace_file_write(struct trainer *tr, char err[TRAINER_ERR_LEN]);

#endif
