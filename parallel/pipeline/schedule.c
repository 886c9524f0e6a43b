/* Running a schedule's order over the pp group (include/schedule.h; the
 * orders are in order.c). */
#include "schedule.h"

#include "clock.h"
#include "pipe_messages.h"

int pipeline_init(struct pipeline *p, struct engine *e, struct collectives *pp, enum schedule_kind kind, int m,
                  struct mem_tracker *mem) {
    int v = e->lay.rank.n_chunks;
    *p = (struct pipeline){.e = e, .pp = pp, .kind = kind, .m = m, .v = v};
    if (!schedule_runs(kind, pp->size, m, v)) return -1;
    p->ops = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, "pipeline schedule", 2 * (size_t)m * (size_t)v * sizeof *p->ops);
    if (!p->ops) return -1;
    schedule_order_v(kind, pp->size, pp->rank, m, v, p->ops);
    return 0;
}

void pipeline_free(struct pipeline *p, struct mem_tracker *mem) { mem_free(mem, p->ops); }

/* An op's receive and send (include/pipe_messages.h: which, from and to
 * whom, and the tags), so that what runs is what pipe_check_order checked:
 * chunk c of this rank is virtual stage c p + s; the first has no
 * receive going forward (and no send going back), the last the reverse. */
struct op_messages {
    const struct pipe_msg *in, *out; /* NULL: none */
    struct pipe_msg msg[PIPE_OP_MAX_MSGS];
};

static void op_messages(const struct pipeline *p, int c, enum pipe_op_kind kind, struct op_messages *m) {
    m->in = m->out = NULL;
    if (p->pp->size == 1 && p->v == 1) return; /* one stage of one chunk: nothing crosses */
    struct pipe_op op = {.chunk = (short)c, .kind = (unsigned char)kind};
    int n = pipe_op_messages(p->pp->size, p->v, p->pp->rank, op, m->msg);
    for (int i = 0; i < n; i++) {
        if (m->msg[i].send) m->out = &m->msg[i];
        else m->in = &m->msg[i];
    }
}

static int slot_of(const struct pipeline *p, int c, int k) { return engine_chunk_slot(p->e, c, p->one_slot ? 0 : k); }

/* B T C, or this tp rank's B (T/tp) C with sequence parallelism */
static size_t act_numel(const struct pipeline *p) { return engine_stage_numel(p->e); }

/* Waits for a pending send; the time counts as waiting. */
static void wait_send(struct pipeline *p, struct coll_request *r, bool *pending) {
    if (!*pending) return;
    double t0 = monotonic_seconds();
    p->pp->wait(p->pp, *r);
    p->last.waiting += monotonic_seconds() - t0;
    *pending = false;
}

static void receive(struct pipeline *p, void *buf, int peer, int tag) {
    double t0 = monotonic_seconds();
    p->pp->recv(p->pp, buf, act_numel(p), p->e->o.act_dtype, peer, tag);
    p->last.waiting += monotonic_seconds() - t0;
}

/* Every rank draws every micro-batch once, in order: the last stage when
 * its last chunk (the head's) needs the targets, the others at chunk 0 (the
 * embedding's inputs on the first). The interleaved order runs the chunks
 * of one micro-batch far apart, and the (B,T) buffers hold one. */
static int draw_chunk(const struct pipeline *p) {
    const struct rank_desc *r = &p->e->lay.rank;
    return r->has_head && !r->has_embed ? p->v - 1 : 0;
}

static double forward(struct pipeline *p, int c, int k, float dloss, const struct batch_source *src,
                      int32_t *inputs, int32_t *targets) {
    struct engine *e = p->e;
    int slot = slot_of(p, c, k);
    struct op_messages m;
    op_messages(p, c, PIPE_FORWARD, &m);
    if (c == draw_chunk(p)) engine_next_batch(e, src, inputs, targets);
    /* the slot's sends of its previous micro-batch left before the receive
     * or the forward overwrites them. Evaluation (one_slot) reuses a slot
     * with its activation's send still in flight: the data must have left
     * (MPI's eager sends copied it at the post; NCCL and synchronous sends
     * read it when matched) */
    wait_send(p, &p->grad_sent[slot], &p->grad_pending[slot]);
    wait_send(p, &p->act_sent[slot], &p->act_pending[slot]);
    if (m.in) receive(p, engine_stage_input(e, slot), m.in->peer, m.in->tag);
    struct mb_input in = {.inputs = inputs, .targets = targets};
    double t0 = monotonic_seconds();
    double loss = engine_micro_batch_forward(e, src, k, c, slot, &in, dloss);
    p->last.busy += monotonic_seconds() - t0;
    if (m.out) {
        wait_send(p, &p->act_sent[slot], &p->act_pending[slot]);
        p->act_sent[slot] = p->pp->isend(p->pp, engine_stage_output(e, slot), act_numel(p), e->o.act_dtype,
                                         m.out->peer, m.out->tag);
        p->act_pending[slot] = true;
    }
    return loss;
}

static void backward(struct pipeline *p, int c, int k, const struct batch_source *src) {
    struct engine *e = p->e;
    int slot = slot_of(p, c, k);
    struct op_messages m;
    op_messages(p, c, PIPE_BACKWARD, &m);
    void *dx_in = NULL, *dx_out = m.out ? engine_stage_input(e, slot) : NULL;
    if (m.in) { /* the gradient arrives where the sent activation was */
        wait_send(p, &p->act_sent[slot], &p->act_pending[slot]);
        dx_in = engine_stage_output(e, slot);
        receive(p, dx_in, m.in->peer, m.in->tag);
    }
    double t0 = monotonic_seconds();
    engine_micro_batch_backward(e, src, k, c, slot, dx_in, dx_out);
    p->last.busy += monotonic_seconds() - t0;
    if (dx_out) {
        p->grad_sent[slot] = p->pp->isend(p->pp, dx_out, act_numel(p), e->o.act_dtype, m.out->peer, m.out->tag);
        p->grad_pending[slot] = true;
    }
}

static void drain(struct pipeline *p) {
    for (int s = 0; s < p->e->model.n_slots; s++) {
        wait_send(p, &p->act_sent[s], &p->act_pending[s]);
        wait_send(p, &p->grad_sent[s], &p->grad_pending[s]);
    }
}

double pipeline_step(struct pipeline *p, float dloss, const struct batch_source *src, int32_t *inputs,
                     int32_t *targets) {
    p->last = (struct schedule_timing){0};
    double t0 = monotonic_seconds(), loss = 0.0;
    for (int i = 0; i < 2 * p->m * p->v; i++) {
        const struct pipe_op *op = &p->ops[i];
        if (op->kind == PIPE_FORWARD) loss += forward(p, op->chunk, op->micro_batch, dloss, src, inputs, targets);
        else backward(p, op->chunk, op->micro_batch, src);
    }
    drain(p);
    /* the step's pipeline ends when its last stage-0 backward does: a stage
     * that finishes earlier idles until then, and that idle is bubble */
    if (p->pp->size > 1) {
        double t1 = monotonic_seconds();
        p->pp->barrier(p->pp);
        p->last.waiting += monotonic_seconds() - t1;
    }
    p->last.total = monotonic_seconds() - t0;
    return loss;
}

double pipeline_forward_only(struct pipeline *p, int n, const struct batch_source *src, int32_t *inputs,
                             int32_t *targets) {
    p->one_slot = true; /* nothing is kept for a backward */
    double loss = 0.0;
    for (int k = 0; k < n; k++)
        for (int c = 0; c < p->v; c++) loss += forward(p, c, k, 0.0f, src, inputs, targets);
    drain(p);
    p->one_slot = false;
    return loss;
}
