/* The point-to-point messages of a pipeline step (include/schedule.h), as
 * a function of the stage's order alone, and the check that both ends of
 * every link post them in one order.
 *
 * Each forward of a rank's chunk c receives its input activation from the
 * previous virtual stage (the previous rank around the pp ring) unless it
 * is the first virtual stage, then sends its output to the next one unless
 * it is the last; each backward receives the output's gradient from the
 * next virtual stage, then sends the input's gradient to the previous one.
 * A message's tag names its kind and the receiving chunk. schedule.c posts
 * exactly these (pipe_op_messages), in this order.
 *
 * Why order matters: MPI matches a receive to a send by (peer, tag), but
 * NCCL has no tags: between one sender and one receiver, the k-th send
 * meets the k-th receive (parallel/comm/cuda/comm_nccl.h). So a schedule
 * runs over NCCL only if, for every ordered pair of ranks (a link: sender
 * -> receiver), the sender's sequence of tags to the receiver equals the
 * receiver's sequence of tags from the sender. The orders are a pure
 * function of (schedule, pp, micro-batches, chunks), so every rank checks
 * every link before the run, without communicating, and all agree. */
#ifndef SHARDLAB_PIPE_MESSAGES_H
#define SHARDLAB_PIPE_MESSAGES_H

#include <stdbool.h>
#include <stddef.h>

#include "pipe_stages.h"
#include "schedule.h"

enum { PIPE_TAG_ACTIVATION = 1, PIPE_TAG_GRADIENT = 2, PIPE_OP_MAX_MSGS = 2 };

/* A tag per receiving chunk; v = 1 keeps 1 (activation) and 2 (gradient). */
static inline int pipe_act_tag(int recv_chunk) { return PIPE_TAG_ACTIVATION + 2 * recv_chunk; }
static inline int pipe_grad_tag(int recv_chunk) { return PIPE_TAG_GRADIENT + 2 * recv_chunk; }

/* One message as the posting rank sees it: to (send) or from peer. */
struct pipe_msg {
    int peer, tag;
    bool send;
};

/* The messages op posts on `stage` of p stages of v chunks, in posting
 * order (a receive before the compute, a send after it): 0 to
 * PIPE_OP_MAX_MSGS of them into out. */
int pipe_op_messages(int p, int v, int stage, struct pipe_op op, struct pipe_msg out[PIPE_OP_MAX_MSGS]);

/* Every stage's order, as a generator: op(ctx, stage, i) for 0 <= i < n
 * (the same n on every stage). */
struct pipe_orders {
    int p, v, n;
    struct pipe_op (*op)(const void *ctx, int stage, int i);
    const void *ctx;
};

/* Checks every link (r -> r + 1 and r -> r - 1 around the ring of p
 * stages) of the orders: 0, or -1 with the link, the message's index on
 * it and the two ends' tags in err. `what` names the orders there. */
int pipe_check_links(const struct pipe_orders *o, const char *what, char *err, size_t err_len);

/* pipe_check_links over one step of schedule k (p stages, m micro-
 * batches, v chunks: schedule_order_v) and over evaluation's forward-only
 * order (pipeline_forward_only: each micro-batch through chunks 0..v-1;
 * its micro-batches post alike, so one is checked). 0, or -1 with the
 * reason in err (also when !schedule_runs). */
int pipe_check_order(enum schedule_kind k, int p, int m, int v, char *err, size_t err_len);

#endif
