/* The Chrome trace-event file of a run (train/measure/trace_file.h). Rank 0
 * writes its own events, then receives each other rank's into the same
 * array (every rank's capacity is the same: it comes from the config) and
 * writes them: no rank ever holds more than one rank's events. At the end,
 * the step's observer that records a rank's spans (trace_observer). */
#include "trace_file.h"

#include <inttypes.h>
#include <mpi.h>
#include <stdint.h>
#include <string.h>

#include "collectives.h"
#include "fileio.h"
#include "grid.h"
#include "layout.h"
#include "pipe_stages.h"

size_t trace_capacity(const struct config *c) {
    if (!*c->trace) return 0;
    if (c->trace_events > 0) return (size_t)c->trace_events;
    /* A bound, not a count. Units: embedding, head, one per layer. A
     * micro-batch: its forward and backward, and per unit at most an
     * all-gather in each pass, a reduce-scatter and a DDP bucket, each a
     * post and a wait (8), its forward and backward spans and their
     * releases (4), and pipeline transfers (10). A step: its span,
     * the optimizer, the scalars and agreement, ZeRO-1/2's per-unit
     * collectives. A validation: per micro-batch a forward's gathers. A
     * save (state or model file): a few gathers per unit. */
    double U = c->n_layer + 2.0;
    /* cp: per layer a forward's ring (cp - 1 exchanges, 4 events each) and a
     * backward's (cp - 1 exchanges and cp dK,dV sends and receives), with
     * full recompute a second forward: within 16 cp events */
    double ring = c->cp > 1 ? 16.0 * c->cp * c->n_layer : 0;
    double per_micro = 10 + 12 * U + ring;
    double per_step = 16 + 4 * U + c->grad_accum * per_micro;
    double vals = c->val_every > 0 && *c->val_data ? c->steps / c->val_every + 1.0 : 0;
    double per_val = 4 + c->val_batches * (4 * U + 1 + ring);
    double saves = (c->save_state_every > 0 ? c->steps / c->save_state_every : 0) + 2.0;
    double n = 64 + (double)c->steps * per_step + vals * per_val + saves * 16 * U;
    return n > TRACE_AUTO_MAX_EVENTS ? TRACE_AUTO_MAX_EVENTS : (size_t)n;
}

enum { TAG_HEADER = 7301, TAG_EVENTS = 7302 };

/* What each rank tells rank 0 before its events. */
struct rank_header {
    int64_t n, dropped;
};

static const char *call_name(int call) {
    return call == TRACE_CALL_POST ? "post" : call == TRACE_CALL_WAIT ? "wait" : "blocking";
}

/* ns since base as microseconds with three decimals, exactly. */
static void fmt_us(char out[32], int64_t ns) {
    snprintf(out, 32, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
}

static void write_event(FILE *f, const struct trace_event *e, int tid, int64_t base) {
    char name[96], ts[32], dur[32];
    enum trace_kind k = (enum trace_kind)e->kind;
    bool comm = e->call != TRACE_CALL_NONE;
    const char *group = grid_group_name((enum grid_group)e->group);
    char unit[32] = ""; /* the unit the event belongs to, if any */
    if (e->unit_kind == UNIT_LAYER) snprintf(unit, sizeof unit, "layer %d", e->layer);
    else if (e->unit_kind >= 0) snprintf(unit, sizeof unit, "%s", e->unit_kind == UNIT_EMBED ? "embedding" : "head");
    bool of_unit = k == TRACE_UNIT_FORWARD || k == TRACE_UNIT_BACKWARD || k == TRACE_RELEASE;
    if (k == TRACE_STEP) snprintf(name, sizeof name, "step %d", e->step);
    else if (of_unit) snprintf(name, sizeof name, "%s %s", trace_kind_name(k), unit); /* "forward layer 3" */
    else if ((k == TRACE_FORWARD || k == TRACE_BACKWARD) && e->chunk > 0)
        snprintf(name, sizeof name, "%s v%d %d", trace_kind_name(k), e->chunk, e->micro_batch);
    else if (k == TRACE_FORWARD || k == TRACE_BACKWARD)
        snprintf(name, sizeof name, "%s %d", trace_kind_name(k), e->micro_batch);
    else if (comm) /* "post all-gather dp: layer 3" for a unit's */
        snprintf(name, sizeof name, "%s%s %s%s%s", e->call == TRACE_CALL_BLOCKING ? "" : e->call == TRACE_CALL_POST ? "post " : "wait ",
                 coll_kind_name((enum coll_kind)e->coll), group, *unit ? ": " : "", unit);
    else snprintf(name, sizeof name, "%s", trace_kind_name(k));
    bool unfinished = e->t1 < e->t0;
    fmt_us(ts, e->t0 - base);
    fmt_us(dur, unfinished ? 0 : e->t1 - e->t0);
    fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%s,\"dur\":%s,\"pid\":0,\"tid\":%d,"
               "\"args\":{\"step\":%d",
            name, comm ? "comm" : k == TRACE_RELEASE ? "release" : of_unit ? "unit" : trace_kind_name(k), ts, dur, tid,
            e->step);
    if (e->micro_batch >= 0) fprintf(f, ",\"micro_batch\":%d,\"chunk\":%d", e->micro_batch, e->chunk);
    if (*unit) fprintf(f, ",\"unit\":\"%s\"", unit);
    if (k == TRACE_RELEASE) fprintf(f, ",\"bytes\":%.17g", e->bytes);
    if (comm) {
        fprintf(f, ",\"kind\":\"%s\",\"group\":\"%s\",\"call\":\"%s\",\"%s\":%.17g",
                coll_kind_name((enum coll_kind)e->coll), group, call_name(e->call),
                e->call == TRACE_CALL_WAIT ? "posted_bytes" : "bytes", e->bytes);
        if (e->peer >= 0) fprintf(f, ",\"peer\":%d", e->peer);
    }
    if (unfinished) fprintf(f, ",\"unfinished\":true");
    fprintf(f, "}}");
}

/* One rank's track: its name (with its grid coordinates and counts), its
 * events, and the instant that says how many did not fit. */
static void write_rank(FILE *f, const struct grid *g, int r, const struct trace_event *ev, int64_t n,
                       int64_t dropped, int64_t base) {
    struct grid_coords at = grid_coords_of(r, g->dp, g->cp, g->tp);
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"rank %d (dp %d, "
               "cp %d, tp %d, pp %d)\",\"recorded\":%" PRId64 ",\"dropped\":%" PRId64 "}}",
            r, r, at.dp_rank, at.cp_rank, at.tp_rank, at.pp_rank, n, dropped);
    fprintf(f, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"sort_index\":%d}}", r,
            r);
    int64_t last = base;
    for (int64_t i = 0; i < n; i++) {
        write_event(f, &ev[i], r, base);
        int64_t end = ev[i].t1 > ev[i].t0 ? ev[i].t1 : ev[i].t0;
        if (end > last) last = end;
    }
    if (dropped > 0) {
        char ts[32];
        fmt_us(ts, last - base);
        fprintf(f, ",\n{\"name\":\"trace full: %" PRId64 " events dropped\",\"cat\":\"trace\",\"ph\":\"i\",\"s\":\"t\","
                   "\"ts\":%s,\"pid\":0,\"tid\":%d,\"args\":{\"dropped\":%" PRId64 "}}",
                dropped, ts, r, dropped);
    }
}

static void write_head(FILE *f, const struct trainer *tr) {
    fprintf(f, "{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,"
               "\"args\":{\"name\":\"shardlab (%d ranks)\"}}",
            tr->grid->world_size);
}

static void write_tail(FILE *f, const struct trainer *tr, int64_t recorded, int64_t dropped) {
    const struct config *c = tr->cfg;
    const struct grid *g = tr->grid;
    fprintf(f, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"program\":\"shardlab train\","
               "\"clock\":\"CLOCK_MONOTONIC; ts from the earliest event of any rank; not aligned across hosts\","
               "\"world_size\":%d,\"dp\":%d,\"cp\":%d,\"tp\":%d,\"pp\":%d,\"schedule\":\"%s\",\"zero\":%d,\"steps\":%d,\"steps_run\":%d,"
               "\"grad_accum\":%d,\"micro_batch\":%d,\"seq_len\":%d,\"n_layer\":%d,\"d_model\":%d,\"n_head\":%d,"
               "\"overlap\":%d,\"capacity_per_rank\":%zu,\"recorded\":%" PRId64 ",\"dropped\":%" PRId64 "}}\n",
            g->world_size, g->dp, g->cp, g->tp, g->pp, schedule_name(c->schedule), c->zero, c->steps, tr->step, c->grad_accum, c->micro_batch,
            c->seq_len, c->n_layer, c->d_model, c->n_head, c->overlap ? 1 : 0, tr->trace.capacity, recorded,
            dropped);
}

int trace_file_write(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    const struct config *c = tr->cfg;
    if (!*c->trace) return 0;
    struct grid *g = tr->grid;
    grid_attach_trace(g, NULL); /* what follows (sampling, the reports) is not the run's timeline */
    struct trace *t = &tr->trace;
    int64_t mine = INT64_MAX, base;
    for (size_t i = 0; i < t->n; i++)
        if (t->events[i].t0 < mine) mine = t->events[i].t0;
    MPI_Allreduce(&mine, &base, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
    if (base == INT64_MAX) base = 0; /* no rank recorded anything (steps 0) */
    MPI_Datatype event_type;
    MPI_Type_contiguous((int)sizeof(struct trace_event), MPI_BYTE, &event_type);
    MPI_Type_commit(&event_type);
    int rc = 0;
    if (g->world_rank != 0) {
        struct rank_header h = {.n = (int64_t)t->n, .dropped = (int64_t)t->dropped};
        MPI_Send(&h, (int)sizeof h, MPI_BYTE, 0, TAG_HEADER, MPI_COMM_WORLD);
        MPI_Send(t->events, (int)t->n, event_type, 0, TAG_EVENTS, MPI_COMM_WORLD);
    } else {
        /* every rank's events are received even when the file failed, so no rank waits in its send */
        struct atomic_file af;
        char e2[FILEIO_ERR_LEN];
        bool open = atomic_open(&af, c->trace, e2) == 0;
        if (!open) {
            snprintf(err, TRAINER_ERR_LEN, "trace %.400s: %s", c->trace, e2);
            rc = -1;
        }
        if (open) write_head(af.f, tr);
        int64_t recorded = 0, dropped = 0;
        for (int r = 0; r < g->world_size; r++) {
            struct rank_header h = {.n = (int64_t)t->n, .dropped = (int64_t)t->dropped};
            if (r > 0) {
                MPI_Recv(&h, (int)sizeof h, MPI_BYTE, r, TAG_HEADER, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                /* the same config, so the same capacity: rank 0's array holds any rank's events */
                MPI_Recv(t->events, (int)t->capacity, event_type, r, TAG_EVENTS, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
            recorded += h.n;
            dropped += h.dropped;
            if (open) write_rank(af.f, g, r, t->events, h.n, h.dropped, base);
        }
        if (open) {
            write_tail(af.f, tr, recorded, dropped);
            if (ferror(af.f)) {
                snprintf(err, TRAINER_ERR_LEN, "writing trace %.400s failed (disk full?)", c->trace);
                atomic_abort(&af);
                rc = -1;
            } else if (atomic_commit(&af, e2) != 0) {
                snprintf(err, TRAINER_ERR_LEN, "trace %.400s: %s", c->trace, e2);
                rc = -1;
            }
        }
        if (rc == 0) {
            printf("trace: %s (%" PRId64 " events from %d rank%s%s; open in https://ui.perfetto.dev)\n", c->trace,
                   recorded, g->world_size, g->world_size == 1 ? "" : "s", dropped ? ", some dropped" : "");
            if (dropped)
                printf("trace: %" PRId64 " events did not fit (trace_events %zu per rank); the file keeps the first\n",
                       dropped, t->capacity);
            fflush(stdout);
        }
    }
    MPI_Type_free(&event_type);
    t->n = 0; /* rank 0's array now holds another rank's events */
    return trainer_agree(tr, rc, err);
}

/* ---- the step's observer: its spans and unit tags */

static void watch_open(struct trace_watch *w, int span) {
    if (w->spans < TRACE_WATCH_DEPTH) w->span[w->spans] = span;
    w->spans++;
}

static void watch_close(struct trace_watch *w) {
    if (w->spans > 0 && --w->spans < TRACE_WATCH_DEPTH) trace_end(w->trace, w->span[w->spans]);
}

static struct trace_unit unit_tag(const struct trace_watch *w, int u) {
    if (u < 0) return TRACE_NO_UNIT;
    struct unit_info ui = layout_unit(w->lay, u);
    return (struct trace_unit){.kind = (int16_t)ui.kind, .layer = ui.kind == UNIT_LAYER ? ui.layer : -1};
}

/* The events that follow carry unit u, until untag puts back the one before. */
static void tag(struct trace_watch *w, int u) {
    struct trace_unit was = trace_set_unit(w->trace, unit_tag(w, u));
    if (w->tags < TRACE_WATCH_DEPTH) w->tag[w->tags] = was;
    w->tags++;
}

static void untag(struct trace_watch *w) {
    if (w->tags > 0 && --w->tags < TRACE_WATCH_DEPTH) trace_set_unit(w->trace, w->tag[w->tags]);
}

static void trace_see(void *self, const struct step_event *ev) {
    struct trace_watch *w = self;
    struct trace *t = w->trace;
    bool fwd = ev->phase == PHASE_FORWARD;
    switch (ev->at) {
    case STEP_BEGINS:
        trace_set_step(t, ev->step);
        watch_open(w, trace_begin(t, TRACE_STEP, -1));
        break;
    case OPTIMIZER_BEGINS: watch_open(w, trace_begin(t, TRACE_OPTIMIZER, -1)); break;
    case MICRO_BATCH_BEGINS:
        watch_open(w, trace_begin_chunk(t, fwd ? TRACE_FORWARD : TRACE_BACKWARD, ev->micro_batch, ev->chunk));
        break;
    case UNIT_BEGINS: /* the unit set first: its span carries it */
        tag(w, ev->unit);
        watch_open(w, trace_begin(t, fwd ? TRACE_UNIT_FORWARD : TRACE_UNIT_BACKWARD, ev->micro_batch));
        break;
    case UNIT_ENDS:
        watch_close(w);
        untag(w);
        break;
    case STEP_ENDS:
    case OPTIMIZER_ENDS:
    case MICRO_BATCH_ENDS: watch_close(w); break;
    case UNIT_MOVES: tag(w, ev->unit); break;
    case UNIT_MOVED: untag(w); break;
    case UNIT_RELEASED:
        tag(w, ev->unit);
        trace_instant(t, TRACE_RELEASE, -1, ev->bytes);
        untag(w);
        break;
    case PHASE_DONE: break;
    }
}

struct step_observer trace_observer(struct trace_watch *w, struct trace *t, const struct model_layout *lay) {
    *w = (struct trace_watch){.trace = t, .lay = lay};
    return (struct step_observer){.see = trace_see, .self = w};
}
