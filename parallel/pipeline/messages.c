/* A pipeline step's point-to-point messages and the posting-order check
 * of its links (include/pipe_messages.h). */
#include "pipe_messages.h"

#include <stdio.h>

/* Chunk c of stage s is virtual stage c p + s (include/schedule.h). */
static bool first_virtual(int p, int stage, int c) { return c * p + stage == 0; }
static bool last_virtual(int p, int v, int stage, int c) { return c * p + stage == p * v - 1; }

int pipe_op_messages(int p, int v, int stage, struct pipe_op op, struct pipe_msg out[PIPE_OP_MAX_MSGS]) {
    int n = 0, c = op.chunk, next = (stage + 1) % p, prev = (stage + p - 1) % p;
    /* around the ring: the last stage's chunk c feeds stage 0's chunk c + 1 */
    int next_chunk = stage == p - 1 ? c + 1 : c, prev_chunk = stage == 0 ? c - 1 : c;
    if (op.kind == PIPE_FORWARD) {
        if (!first_virtual(p, stage, c)) out[n++] = (struct pipe_msg){.peer = prev, .tag = pipe_act_tag(c)};
        if (!last_virtual(p, v, stage, c))
            out[n++] = (struct pipe_msg){.peer = next, .tag = pipe_act_tag(next_chunk), .send = true};
    } else {
        if (!last_virtual(p, v, stage, c)) out[n++] = (struct pipe_msg){.peer = next, .tag = pipe_grad_tag(c)};
        if (!first_virtual(p, stage, c))
            out[n++] = (struct pipe_msg){.peer = prev, .tag = pipe_grad_tag(prev_chunk), .send = true};
    }
    return n;
}

/* Where a walk through one stage's messages stands: op, then message. */
struct cursor {
    int op, msg;
};

/* The tag of `stage`'s next message that is a send to (send) or a receive
 * from (!send) peer, the cursor moved past it; -1 at the order's end. */
static int next_tag(const struct pipe_orders *o, int stage, int peer, bool send, struct cursor *at) {
    for (; at->op < o->n; at->op++, at->msg = 0) {
        struct pipe_msg msgs[PIPE_OP_MAX_MSGS];
        int k = pipe_op_messages(o->p, o->v, stage, o->op(o->ctx, stage, at->op), msgs);
        while (at->msg < k) {
            const struct pipe_msg *g = &msgs[at->msg++];
            if (g->send == send && g->peer == peer) return g->tag;
        }
    }
    return -1;
}

/* "tag 3 (the activation of chunk 1)"; "nothing" past the end */
static const char *describe(int tag, char *buf, size_t len) {
    if (tag < 0) snprintf(buf, len, "nothing (no more messages)");
    else snprintf(buf, len, "tag %d (the %s of chunk %d)", tag, tag % 2 == 1 ? "activation" : "gradient", (tag - 1) / 2);
    return buf;
}

static int check_link(const struct pipe_orders *o, int from, int to, const char *what, char *err, size_t len) {
    struct cursor s = {0, 0}, r = {0, 0};
    for (int i = 0;; i++) {
        int sent = next_tag(o, from, to, true, &s), got = next_tag(o, to, from, false, &r);
        if (sent != got) {
            char a[64], b[64];
            snprintf(err, len, "%s: the link stage %d -> stage %d posts its messages in two orders: message %d is "
                     "sent as %s but received as %s (NCCL has no tags: the k-th send meets the k-th receive, "
                     "include/pipe_messages.h)", what, from, to, i, describe(sent, a, sizeof a),
                     describe(got, b, sizeof b));
            return -1;
        }
        if (sent < 0) return 0;
    }
}

int pipe_check_links(const struct pipe_orders *o, const char *what, char *err, size_t err_len) {
    if (o->p < 2) return 0;
    for (int r = 0; r < o->p; r++) {
        int next = (r + 1) % o->p, prev = (r + o->p - 1) % o->p;
        if (check_link(o, r, next, what, err, err_len) != 0) return -1;
        if (prev != next && check_link(o, r, prev, what, err, err_len) != 0) return -1;
    }
    return 0;
}

struct shape {
    enum schedule_kind k;
    int p, m, v;
};

static struct pipe_op step_op(const void *ctx, int stage, int i) {
    const struct shape *s = ctx;
    return schedule_op(s->k, s->p, stage, s->m, s->v, i);
}

/* pipeline_forward_only: micro-batch i / v through chunk i mod v */
static struct pipe_op forward_only_op(const void *ctx, int stage, int i) {
    const struct shape *s = ctx;
    (void)stage;
    return (struct pipe_op){.micro_batch = i / s->v, .chunk = (short)(i % s->v), .kind = PIPE_FORWARD};
}

int pipe_check_order(enum schedule_kind k, int p, int m, int v, char *err, size_t err_len) {
    if (!schedule_runs(k, p, m, v)) {
        snprintf(err, err_len, "schedule %s does not run pp = %d, grad_accum = %d, virtual_stages = %d",
                 schedule_name(k), p, m, v);
        return -1;
    }
    struct shape s = {k, p, m, v};
    struct pipe_orders step = {.p = p, .v = v, .n = 2 * m * v, .op = step_op, .ctx = &s};
    struct pipe_orders eval = {.p = p, .v = v, .n = v, .op = forward_only_op, .ctx = &s};
    char what[160];
    snprintf(what, sizeof what, "schedule %s (pp %d, grad_accum %d, virtual_stages %d)", schedule_name(k), p, m, v);
    if (pipe_check_links(&step, what, err, err_len) != 0) return -1;
    snprintf(what, sizeof what, "evaluation's forwards (pp %d, virtual_stages %d)", p, v);
    return pipe_check_links(&eval, what, err, err_len);
}
