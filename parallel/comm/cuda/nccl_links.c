/* A pp table's one-direction links (comm_nccl.h: collectives_nccl_add_links).
 *
 * Why: every NCCL call is a kernel on a stream, and a send's kernel waits
 * there for the matching receive. On the table's one stream, rank i's
 * isend(activation -> i + 1) queued before its recv(gradient <- i + 1)
 * blocks that receive, while rank i + 1 queued isend(gradient -> i) before
 * recv(activation <- i): neither send completes. A link is one direction
 * between two ranks with its own 2-rank communicator and stream, so the
 * sender's stream holds only sends to that receiver and the receiver's
 * only receives from that sender: both queues drain in the order posted,
 * which is MPI's non-overtaking order when both ends post the same
 * sequence (include/pipe_messages.h checks that the pipeline does). */
#include <stdio.h>

#include "comm_nccl.h"
#include "nccl_impl.h"

/* The ordered pairs every rank of a ring of p uses, in one global order:
 * r -> r + 1 for each r, then r -> r - 1 (the same pairs when p = 2).
 * Pair i into *from, *to; the number of pairs. */
static int ring_pairs(int p, int i, int *from, int *to) {
    int n = p < 2 ? 0 : p == 2 ? 2 : 2 * p;
    if (i < n) {
        *from = i % p;
        *to = i < p ? (*from + 1) % p : (*from + p - 1) % p;
    }
    return n;
}

/* Collective over the table: every rank splits the table's communicator
 * once per pair, in the same order; a rank outside the pair passes
 * NCCL_SPLIT_NOCOLOR and gets no communicator. The sender is rank 0 of
 * each (key 0). */
static int split_links(struct collectives *c, char *err, size_t err_len) {
    struct nccl_impl *m = nccl_of(c);
    int from = 0, to = 0, failed = 0, n = ring_pairs(c->size, 0, &from, &to);
    for (int i = 0; i < n; i++) {
        ring_pairs(c->size, i, &from, &to);
        bool member = c->rank == from || c->rank == to;
        ncclComm_t made = NULL;
        ncclResult_t r = ncclCommSplit(m->nccl, member ? 0 : NCCL_SPLIT_NOCOLOR, c->rank == from ? 0 : 1, &made, NULL);
        if (r != ncclSuccess && !failed) {
            snprintf(err, err_len, "NCCL link %d -> %d: ncclCommSplit: %s", from, to, ncclGetErrorString(r));
            failed = 1;
        }
        if (r != ncclSuccess || !member) continue;
        struct nccl_link *l = &m->links[m->n_links++];
        *l = (struct nccl_link){.peer = c->rank == from ? to : from, .send = c->rank == from,
                                .link_peer = c->rank == from ? 1 : 0, .nccl = made};
        cudaError_t e = cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking);
        if (e != cudaSuccess && !failed) {
            snprintf(err, err_len, "NCCL link %d -> %d: its stream: %s", from, to, cudaGetErrorString(e));
            failed = 1;
        }
    }
    return failed ? -1 : 0;
}

int collectives_nccl_add_links(struct collectives *c, char *err, size_t err_len) {
    struct nccl_impl *m = nccl_of(c);
    err[0] = '\0';
    int ok = split_links(c, err, err_len) == 0;
    /* every rank of the table the same answer (a failed split is local) */
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, m->comm);
    if (ok) return 0;
    nccl_links_free(m);
    if (!err[0]) snprintf(err, err_len, "NCCL links: another rank of the group failed to make its links");
    return -1;
}

const struct nccl_link *nccl_link_to(const struct nccl_impl *m, int peer, bool send) {
    for (int i = 0; i < m->n_links; i++)
        if (m->links[i].peer == peer && m->links[i].send == send) return &m->links[i];
    return NULL;
}

void nccl_links_free(struct nccl_impl *m) {
    for (int i = 0; i < m->n_links; i++) {
        struct nccl_link *l = &m->links[i];
        if (l->stream) {
            cudaStreamSynchronize(l->stream);
            cudaStreamDestroy(l->stream);
        }
        if (l->nccl) ncclCommDestroy(l->nccl);
    }
    m->n_links = 0;
}
