/* The NCCL backend of the collectives seam (include/collectives.h), for
 * the CUDA build (parallel/comm/cuda/; docs/GPU.md). Buffers are device
 * memory; scalars stay host doubles (staged through the device).
 *
 * One NCCL communicator per table, made over an MPI communicator: its rank
 * 0 makes the unique id (ncclGetUniqueId) and broadcasts it over MPI, then
 * every rank joins (ncclCommInitRank). grid_use_nccl does that for the
 * four groups of a grid (dp, tp, pp, tie).
 *
 * Counting is the MPI backend's, call for call: the ring volume of
 * collectives.h for each collective, whatever NCCL picks underneath; the
 * payload for point to point; a non-blocking call counted when posted;
 * nothing for wait or barrier; nothing for a call that fails. Time: a
 * blocking call's duration; a posted one's from the post to the moment
 * wait or progress saw its CUDA event complete.
 *
 * Where NCCL differs from MPI (stated, not hidden):
 *  - Order. Every NCCL call is a kernel on the table's stream, which
 *    first waits for the work already queued on the legacy default stream
 *    (where the buffer operations run). Blocking calls synchronize the
 *    stream before returning.
 *  - bf16 sums: NCCL adds in fp32 and rounds to bf16 (RNE) at each
 *    combine, like the MPI op, in an order of its own.
 *  - max: NCCL's float max does not give collectives.h's rule (NaN wins,
 *    +0 over -0), so values travel as order-preserving uint32 keys and
 *    NCCL takes their max, which is exact; bf16 is widened to fp32 first
 *    (scratch of 4 bytes a value; the counters still count 2 bytes).
 *  - Point to point: NCCL has no tags. A tag is checked for its range
 *    only, and messages between two ranks match in the order they are
 *    posted, so both ends must post them in one order (the pipeline's
 *    order is checked at start-up: include/pipe_messages.h). NCCL cannot
 *    see a short message either: a receive takes n values on trust. A
 *    send's kernel waits on its stream for the matching receive, so on
 *    one stream a rank's send queued before its receive from a rank that
 *    did the same deadlocks. Hence links (collectives_nccl_add_links, the
 *    pp table's): each direction to each neighbour its own 2-rank
 *    communicator and stream, on which this rank only sends or only
 *    receives; sends and receives to a neighbour go there, and a link's
 *    queue drains in posting order whatever the other direction does.
 *    Without a link (another group, or a peer that is no neighbour, as
 *    the checkpoint's route) point to point shares the table's stream:
 *    blocking calls, one message at a time, are safe there.
 * Errors: caller bugs (bad peer, tag, full request table, stale handle)
 * are reported as in the MPI backend; an NCCL or CUDA failure prints the
 * call and NCCL's message, then raises the group's MPI error handler
 * (fatal by default: every rank exits non-zero). */
#ifndef SHARDLAB_COMM_NCCL_H
#define SHARDLAB_COMM_NCCL_H

#include <mpi.h>
#include <stddef.h>

#include "collectives.h"
#include "grid.h"

/* Fills c with the NCCL table over comm's ranks (on the current CUDA
 * device). Collective over comm. 0, or -1 with a message in err on every
 * rank (then c holds nothing). */
int collectives_init_nccl(struct collectives *c, MPI_Comm comm, char *err, size_t err_len);
/* Destroys the NCCL communicator, stream and events; the counters stay.
 * Collective. */
void collectives_free_nccl(struct collectives *c);

/* Gives table c (a pp group's: a ring) one link per direction to each
 * neighbour, rank r -> r + 1 and r -> r - 1 around the group (2 links
 * when the group has 2 ranks, none below): a 2-rank NCCL communicator
 * split from the table's and a stream of its own (nccl_links.c), which
 * then carries every send to, or receive from, that neighbour. Collective
 * over c; 0, or -1 with a message on every rank (then c has none). */
int collectives_nccl_add_links(struct collectives *c, char *err, size_t err_len);

/* Replaces each of g's four MPI tables by an NCCL table over the same
 * ranks (the trace settings kept, the counters from zero). Collective over
 * the world; 0, or -1 with a message on every rank (then g keeps its MPI
 * tables). Free such a grid with grid_free_nccl, not grid_free. */
int grid_use_nccl(struct grid *g, char err[GRID_ERR_LEN]);
void grid_free_nccl(struct grid *g);

#endif
