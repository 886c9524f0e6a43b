/* GPipe and 1F1B over the pp group (include/schedule.h). */
#include "schedule.h"

#include <time.h>

enum { TAG_ACTIVATION = 1, TAG_GRADIENT = 2 }; /* MPI keeps each tag's messages in order */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

const char *schedule_name(enum schedule_kind k) {
    static const char *const names[SCHEDULE_NUM] = {[SCHEDULE_GPIPE] = "gpipe", [SCHEDULE_1F1B] = "1f1b"};
    return (unsigned)k < SCHEDULE_NUM ? names[k] : "?";
}

static int min_int(int a, int b) { return a < b ? a : b; }

int schedule_slots(enum schedule_kind k, int p, int stage, int m) {
    return k == SCHEDULE_GPIPE ? m : min_int(p - stage, m);
}

int schedule_order(enum schedule_kind k, int p, int stage, int m, struct pipe_op *ops) {
    int n = 0;
    if (k == SCHEDULE_GPIPE) {
        for (int i = 0; i < m; i++) ops[n++] = (struct pipe_op){PIPE_FORWARD, i};
        for (int i = 0; i < m; i++) ops[n++] = (struct pipe_op){PIPE_BACKWARD, i};
        return n;
    }
    int warmup = min_int(p - stage - 1, m), f = 0, b = 0;
    while (f < warmup) ops[n++] = (struct pipe_op){PIPE_FORWARD, f++};
    while (f < m) { /* steady state: one forward, one backward */
        ops[n++] = (struct pipe_op){PIPE_FORWARD, f++};
        ops[n++] = (struct pipe_op){PIPE_BACKWARD, b++};
    }
    while (b < m) ops[n++] = (struct pipe_op){PIPE_BACKWARD, b++}; /* drain */
    return n;
}

int pipeline_init(struct pipeline *p, struct engine *e, struct collectives *pp, enum schedule_kind kind, int m,
                  struct mem_tracker *mem) {
    *p = (struct pipeline){.e = e, .pp = pp, .kind = kind, .m = m,
                           .slots = schedule_slots(kind, pp->size, pp->rank, m)};
    p->ops = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, "pipeline schedule", 2 * (size_t)m * sizeof *p->ops);
    if (!p->ops) return -1;
    schedule_order(kind, pp->size, pp->rank, m, p->ops);
    return 0;
}

void pipeline_free(struct pipeline *p, struct mem_tracker *mem) { mem_free(mem, p->ops); }

static bool first_stage(const struct pipeline *p) { return p->pp->rank == 0; }
static bool last_stage(const struct pipeline *p) { return p->pp->rank == p->pp->size - 1; }

/* B T C, or this tp rank's B (T/tp) C with sequence parallelism */
static size_t act_numel(const struct pipeline *p) { return engine_stage_numel(p->e); }

/* Waits for a pending send; the time counts as waiting. */
static void wait_send(struct pipeline *p, struct coll_request *r, bool *pending) {
    if (!*pending) return;
    double t0 = now();
    p->pp->wait(p->pp, *r);
    p->last.waiting += now() - t0;
    *pending = false;
}

static void receive(struct pipeline *p, void *buf, int peer, int tag) {
    double t0 = now();
    p->pp->recv(p->pp, buf, act_numel(p), p->e->o.act_dtype, peer, tag);
    p->last.waiting += now() - t0;
}

static double forward(struct pipeline *p, int k, float dloss, const struct batch_source *src, int32_t *inputs,
                      int32_t *targets) {
    struct engine *e = p->e;
    int slot = k % p->slots, stage = p->pp->rank;
    src->next(src->ctx, inputs, targets);
    if (!first_stage(p)) {
        /* the slot's sends of its previous micro-batch left before it is overwritten */
        wait_send(p, &p->grad_sent[slot], &p->grad_pending[slot]);
        wait_send(p, &p->act_sent[slot], &p->act_pending[slot]);
        receive(p, engine_stage_input(e, slot), stage - 1, TAG_ACTIVATION);
    }
    struct mb_input in = {.inputs = inputs, .targets = targets};
    double t0 = now();
    int ev = trace_begin(src->trace, TRACE_FORWARD, k);
    double loss = engine_forward(e, slot, &in, NULL, dloss);
    trace_end(src->trace, ev);
    p->last.busy += now() - t0;
    if (!last_stage(p)) {
        wait_send(p, &p->act_sent[slot], &p->act_pending[slot]);
        p->act_sent[slot] = p->pp->isend(p->pp, engine_stage_output(e, slot), act_numel(p), e->o.act_dtype,
                                         stage + 1, TAG_ACTIVATION);
        p->act_pending[slot] = true;
    }
    return loss;
}

static void backward(struct pipeline *p, int k, struct trace *trace) {
    struct engine *e = p->e;
    int slot = k % p->slots, stage = p->pp->rank;
    void *dx_in = NULL, *dx_out = first_stage(p) ? NULL : engine_stage_input(e, slot);
    if (!last_stage(p)) { /* the gradient arrives where the sent activation was */
        wait_send(p, &p->act_sent[slot], &p->act_pending[slot]);
        dx_in = engine_stage_output(e, slot);
        receive(p, dx_in, stage + 1, TAG_GRADIENT);
    }
    double t0 = now();
    int ev = trace_begin(trace, TRACE_BACKWARD, k);
    engine_backward(e, slot, dx_in, dx_out);
    trace_end(trace, ev);
    p->last.busy += now() - t0;
    if (dx_out) {
        p->grad_sent[slot] = p->pp->isend(p->pp, dx_out, act_numel(p), e->o.act_dtype, stage - 1, TAG_GRADIENT);
        p->grad_pending[slot] = true;
    }
}

static void drain(struct pipeline *p) {
    for (int s = 0; s < p->slots; s++) {
        wait_send(p, &p->act_sent[s], &p->act_pending[s]);
        wait_send(p, &p->grad_sent[s], &p->grad_pending[s]);
    }
}

double pipeline_step(struct pipeline *p, float dloss, const struct batch_source *src, int32_t *inputs,
                     int32_t *targets) {
    p->last = (struct schedule_timing){0};
    double t0 = now(), loss = 0.0;
    for (int i = 0; i < 2 * p->m; i++) {
        const struct pipe_op *op = &p->ops[i];
        if (op->kind == PIPE_FORWARD) loss += forward(p, op->micro_batch, dloss, src, inputs, targets);
        else backward(p, op->micro_batch, src->trace);
    }
    drain(p);
    /* the step's pipeline ends when its last stage-0 backward does: a stage
     * that finishes earlier idles until then, and that idle is bubble */
    if (p->pp->size > 1) {
        double t1 = now();
        p->pp->barrier(p->pp);
        p->last.waiting += now() - t1;
    }
    p->last.total = now() - t0;
    return loss;
}

double pipeline_forward_only(struct pipeline *p, int n, const struct batch_source *src, int32_t *inputs,
                             int32_t *targets) {
    int slots = p->slots;
    p->slots = 1; /* micro-batch k in slot 0: nothing is kept for a backward */
    double loss = 0.0;
    for (int k = 0; k < n; k++) loss += forward(p, k, 0.0f, src, inputs, targets);
    drain(p);
    p->slots = slots;
    return loss;
}
