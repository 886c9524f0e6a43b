/* The MPI backend of the collectives seam (include/collectives.h).
 * This is the only public header that includes <mpi.h> (parallel/comm/
 * holds the other users): the model and the engine see only struct
 * collectives.
 *
 * fp32 travels as MPI_FLOAT with MPI_SUM. bf16 travels as its own datatype
 * (a uint16_t under a new name, so a stray MPI_SUM on it is an MPI error
 * rather than a silent integer sum of bit patterns) reduced by a user op
 * that widens both operands to fp32, adds, and rounds back to bf16 (RNE).
 * Each pairwise combine rounds, so a sum over N ranks rounds N-1 times in
 * an order MPI chooses; values whose partial sums are exact in bf16 reduce
 * to the same result in any order. The max (fp32 and bf16) is a user op
 * too, for the order-free NaN and signed-zero rule of collectives.h.
 *
 * Point to point runs on the same duplicate communicator (MPI_Send,
 * MPI_Recv, MPI_Isend, MPI_Irecv, MPI_Wait); the errors of collectives.h
 * raise MPI_ERR_RANK, MPI_ERR_TAG, MPI_ERR_COUNT or MPI_ERR_REQUEST on the
 * communicator's error handler, which the duplicate inherits from comm.
 *
 * Counts: a chunk (reduce-scatter, all-gather) must fit an int, MPI's count
 * type; a larger one is reported through the communicator's MPI error
 * handler (fatal by default). So must a point-to-point count. All-reduces
 * of any size are split. */
#ifndef SHARDLAB_COMM_MPI_H
#define SHARDLAB_COMM_MPI_H

#include <mpi.h>
#include <stddef.h>

#include "collectives.h"

/* Fills c with the MPI table over a duplicate of comm (so our traffic never
 * matches the caller's messages); the caller keeps and frees comm itself.
 * Collective over comm. Returns 0, or -1 with a message in err (then c
 * holds no resources and every rank of comm returns -1). */
int collectives_init_mpi(struct collectives *c, MPI_Comm comm, char *err, size_t err_len);

/* Frees the duplicate communicator, the bf16 datatype and the ops.
 * Collective over the group. Wait on every handle first: one still pending
 * is reported on stderr (its transfer is left to MPI). The counters stay readable; a table without MPI state
 * (impl == NULL: never initialised, failed, or the single-rank table) is
 * left alone. */
void collectives_free_mpi(struct collectives *c);

#endif
