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
 *    posted, so both sides must post them in one order. NCCL cannot see a
 *    short message either: a receive takes n values on trust. And a send
 *    waits on its stream for the matching receive, so two ranks that each
 *    post a send before their receive to the other can deadlock past
 *    NCCL's buffering: the pipeline schedule must pair them (ncclGroup)
 *    before it runs on NCCL (not done: docs/GPU.md).
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

/* Replaces each of g's four MPI tables by an NCCL table over the same
 * ranks (the trace settings kept, the counters from zero). Collective over
 * the world; 0, or -1 with a message on every rank (then g keeps its MPI
 * tables). Free such a grid with grid_free_nccl, not grid_free. */
int grid_use_nccl(struct grid *g, char err[GRID_ERR_LEN]);
void grid_free_nccl(struct grid *g);

#endif
