/* Pipeline schedules: the order in which one step's m micro-batches go
 * through this rank's stage, and the point-to-point traffic between
 * stages (activations forward, their gradients backward, (B,T,C) in the
 * activation dtype over the pp group's collectives table).
 *
 *   gpipe  all m forwards, then all m backwards (Huang et al. 2019): every
 *          stage holds m micro-batches' activations;
 *   1f1b   PipeDream-Flush (Narayanan et al. 2021): stage s of p runs
 *          min(p - s - 1, m) warm-up forwards, then alternates one forward
 *          and one backward, then drains; it holds min(p - s, m).
 *
 *   interleaved  interleaved 1F1B (Narayanan et al. 2021, section 2.2.2):
 *          each rank holds v model chunks (virtual stages; include/
 *          pipe_stages.h), chunk c of rank s being virtual stage c p + s, so
 *          the last rank's chunk c feeds rank 0's chunk c + 1. Megatron-
 *          LM's order: virtual micro-batch i is micro-batch
 *          i mod p + p floor(i / (p v)) of chunk floor(i / p) mod v going
 *          forward (of chunk v - 1 - that going backward); rank s warms up
 *          with min(2 (p - s - 1) + (v - 1) p, m v) forwards, then
 *          alternates, then drains. m must be a multiple of p.
 *
 * GPipe and 1F1B leave the same bubble, (p - 1) / (m + p - 1) of the step
 * when every stage's forward and backward take the same time; interleaving
 * cuts it to (p - 1) / (v m + p - 1) for v times the boundary messages.
 * With one stage, 1f1b is forward then backward of each micro-batch in
 * turn, in one slot.
 *
 * Micro-batch k of chunk c lives in activation slot k mod slots_c of that
 * chunk's slots (engine_chunk_slot), slots_c being the most of the chunk's
 * micro-batches the order has in flight (schedule_chunk_slots). No buffer is added
 * for the traffic: a stage receives the activation into the slot's input,
 * sends its output from the slot's output, receives the incoming gradient
 * into the slot's output (its activation is no longer needed) and sends
 * the outgoing gradient from the slot's input. Sends are non-blocking; a
 * slot's sends are waited for before the slot is written again, which
 * cannot deadlock: the receiver has matched them before it could send what
 * this stage waits on next. */
#ifndef SHARDLAB_SCHEDULE_H
#define SHARDLAB_SCHEDULE_H

#include <stdint.h>

#include "collectives.h"
#include "engine.h"
#include "pipe_stages.h"
#include "step_hooks.h"

/* The order of a step's micro-batches over the stages (parallel/pipeline/order.c). */
enum schedule_kind { SCHEDULE_GPIPE, SCHEDULE_1F1B, SCHEDULE_INTERLEAVED, SCHEDULE_NUM };

const char *schedule_name(enum schedule_kind k);

/* Activation slots stage `stage` of p needs for m micro-batches (gpipe,
 * 1f1b: one chunk). */
int schedule_slots(enum schedule_kind k, int p, int stage, int m);

/* Whether schedule k runs p stages of v chunks over m micro-batches:
 * gpipe and 1f1b with v = 1 and any m; interleaved with p >= 2, v in
 * 2..RANK_MAX_CHUNKS and m a multiple of p. */
bool schedule_runs(enum schedule_kind k, int p, int m, int v);

/* One operation of a stage's order: a micro-batch's forward or backward
 * through one of the rank's chunks (0 unless interleaved). */
enum pipe_op_kind { PIPE_FORWARD, PIPE_BACKWARD };
struct pipe_op {
    int micro_batch;
    short chunk;         /* < RANK_MAX_CHUNKS */
    unsigned char kind;  /* enum pipe_op_kind, in a byte: the op stays 8 bytes, as before chunks */
};
/* Operation i (0 <= i < 2 m v) of stage `stage`'s order (v = 1 but for
 * interleaved; the arguments must pass schedule_runs). */
struct pipe_op schedule_op(enum schedule_kind k, int p, int stage, int m, int v, int i);
/* The 2 m v operations of a step, in order, into ops (room for 2 m v).
 * Returns their number, or -1 when !schedule_runs. */
int schedule_order_v(enum schedule_kind k, int p, int stage, int m, int v, struct pipe_op *ops);
/* Forwards before the first backward on stage `stage`. */
int schedule_warmup(enum schedule_kind k, int p, int stage, int m, int v);
/* The most micro-batches of the rank's chunk `chunk` in flight (forward
 * run, backward not) at once in the order: the chunk's activation slots.
 * v = 1: schedule_slots. 0 when !schedule_runs. */
int schedule_chunk_slots(enum schedule_kind k, int p, int stage, int m, int v, int chunk);

/* Time of the last schedule run on this rank, seconds. busy: inside the
 * engine's forward and backward; waiting: in receives and send waits. The
 * measured bubble is 1 - busy / total. */
struct schedule_timing {
    double total, busy, waiting;
};

/* One rank's stage of the pipeline. */
struct pipeline {
    struct engine *e;
    struct collectives *pp;        /* the stage's group: rank = stage */
    enum schedule_kind kind;
    int m;                         /* micro-batches per step */
    int v;                         /* chunks per rank (the engine layout's): 1 but for interleaved */
    bool one_slot;                 /* forward only: every micro-batch in its chunk's first slot */
    struct pipe_op *ops;           /* 2 m v, from schedule_order_v */
    struct coll_request act_sent[GPT_MAX_SLOTS], grad_sent[GPT_MAX_SLOTS]; /* pending sends by slot */
    bool act_pending[GPT_MAX_SLOTS], grad_pending[GPT_MAX_SLOTS];
    struct schedule_timing last;
};

/* The ops table is tracked (scratch). The engine must have been built with
 * schedule_chunk_slots() slots for each of its layout's chunks (v of
 * them). Returns 0, or -1 when the table could not be allocated (the
 * tracker holds the message) or the schedule does not run this shape
 * (schedule_runs; the trainer refuses it first, with the reason). */
int pipeline_init(struct pipeline *p, struct engine *e, struct collectives *pp, enum schedule_kind kind, int m,
                  struct mem_tracker *mem);
void pipeline_free(struct pipeline *p, struct mem_tracker *mem);

/* One step's forward and backward passes over m micro-batches (each
 * through every chunk), each weighted dloss in the loss, drawn from src
 * (include/engine.h: struct batch_source); inputs, targets: (B,T) buffers
 * the schedule fills. The receives and send waits show in the trace as
 * the pp group's own spans. Gradients accumulate in the engine. Returns
 * the sum of the micro-batch losses on the last stage, 0 on the others. */
double pipeline_step(struct pipeline *p, float dloss, const struct batch_source *src, int32_t *inputs,
                     int32_t *targets);
/* n forwards only (no gradient), one micro-batch at a time through every
 * stage (chunk by chunk), in each chunk's first slot: evaluation. Returns the sum of the losses on the last
 * stage, 0 on the others. */
double pipeline_forward_only(struct pipeline *p, int n, const struct batch_source *src, int32_t *inputs,
                             int32_t *targets);

#endif
