/* Collectives over NCCL (parallel/comm/cuda/comm_nccl.h). Every call is in place and
 * adds the ring-algorithm volume of include/collectives.h to the counters,
 * exactly as comm_mpi.c does. Point to point lives in comm_nccl_p2p.c. */
#include "comm_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_impl.h"
#include "nccl_max.h"

static int nccl_ok(struct collectives *c, const char *call, ncclResult_t r) {
    return r == ncclSuccess ? 0 : nccl_failed(c, call, ncclGetErrorString(r));
}

static int cuda_ok(struct collectives *c, const char *call, cudaError_t e) {
    return e == cudaSuccess ? 0 : nccl_failed(c, call, cudaGetErrorString(e));
}

/* Ring volume (N-1)/N x M, times 2 for an all-reduce (THEORY.md 7). */
static void count(struct collectives *c, enum coll_kind k, double factor, double full_bytes, double t0) {
    int n = c->size;
    count_call(c, k, factor * (double)(n - 1) * full_bytes / (double)n, -1, t0);
}

/* A blocking call's end: the stream drained. */
static int finish(struct collectives *c, const char *call) {
    return cuda_ok(c, call, cudaStreamSynchronize(nccl_of(c)->stream));
}

static void all_reduce_sum(struct collectives *c, void *buf, size_t n, enum dtype dt) {
    double t0 = monotonic_seconds();
    struct nccl_impl *m = nccl_of(c);
    if (c->size > 1 && n > 0) {
        if (nccl_after_default_stream(c, "all_reduce_sum") != 0) return;
        if (nccl_ok(c, "all_reduce_sum", ncclAllReduce(buf, buf, n, nccl_type(dt), ncclSum, m->nccl, m->stream)))
            return;
        if (finish(c, "all_reduce_sum") != 0) return;
    }
    count(c, COLL_ALL_REDUCE, 2.0, (double)n * (double)dtype_size(dt), t0);
}

/* bf16's keys need 4 bytes a value: a scratch kept with the table. */
static uint32_t *max_scratch(struct collectives *c, size_t n) {
    struct nccl_impl *m = nccl_of(c);
    size_t bytes = n * sizeof(uint32_t);
    if (bytes > m->scratch_bytes) {
        cudaFree(m->scratch);
        m->scratch = NULL;
        m->scratch_bytes = 0;
        if (cuda_ok(c, "all_reduce_max (scratch)", cudaMalloc(&m->scratch, bytes)) != 0) return NULL;
        m->scratch_bytes = bytes;
    }
    return m->scratch;
}

static void all_reduce_max(struct collectives *c, void *buf, size_t n, enum dtype dt) {
    double t0 = monotonic_seconds();
    struct nccl_impl *m = nccl_of(c);
    if (c->size > 1 && n > 0) {
        const char *call = "all_reduce_max";
        if (nccl_after_default_stream(c, call) != 0) return;
        uint32_t *keys = dt == DTYPE_FP32 ? buf : max_scratch(c, n);
        if (!keys) return;
        int rc = dt == DTYPE_FP32 ? nccl_max_to_keys_f32(keys, n, m->stream)
                                  : nccl_max_to_keys_bf16(keys, buf, n, m->stream);
        if (cuda_ok(c, call, (cudaError_t)rc) != 0) return;
        if (nccl_ok(c, call, ncclAllReduce(keys, keys, n, ncclUint32, ncclMax, m->nccl, m->stream)) != 0) return;
        rc = dt == DTYPE_FP32 ? nccl_max_from_keys_f32(keys, n, m->stream)
                              : nccl_max_from_keys_bf16(buf, keys, n, m->stream);
        if (cuda_ok(c, call, (cudaError_t)rc) != 0 || finish(c, call) != 0) return;
    }
    count(c, COLL_ALL_REDUCE_MAX, 2.0, (double)n * (double)dtype_size(dt), t0);
}

/* In place, NCCL's way: rank r's reduced chunk lands at chunk r of buf
 * (recvbuff = sendbuff + r x chunk); the seam wants it at the start. */
static int post_reduce_scatter(struct collectives *c, void *buf, size_t chunk, enum dtype dt, const char *call) {
    struct nccl_impl *m = nccl_of(c);
    size_t bytes = chunk * dtype_size(dt);
    char *mine = (char *)buf + (size_t)c->rank * bytes;
    if (nccl_after_default_stream(c, call) != 0) return -1;
    if (nccl_ok(c, call, ncclReduceScatter(buf, mine, chunk, nccl_type(dt), ncclSum, m->nccl, m->stream)) != 0)
        return -1;
    if (c->rank == 0 || chunk == 0) return 0;
    return cuda_ok(c, call, cudaMemcpyAsync(buf, mine, bytes, cudaMemcpyDeviceToDevice, m->stream));
}

/* In place: chunk r of buf is this rank's (sendbuff = recvbuff + r x chunk). */
static int post_all_gather(struct collectives *c, void *buf, size_t chunk, enum dtype dt, const char *call) {
    struct nccl_impl *m = nccl_of(c);
    char *mine = (char *)buf + (size_t)c->rank * chunk * dtype_size(dt);
    if (nccl_after_default_stream(c, call) != 0) return -1;
    return nccl_ok(c, call, ncclAllGather(mine, buf, chunk, nccl_type(dt), m->nccl, m->stream));
}

static void reduce_scatter_sum(struct collectives *c, void *buf, size_t chunk, enum dtype dt) {
    double t0 = monotonic_seconds();
    if (c->size > 1 && (post_reduce_scatter(c, buf, chunk, dt, "reduce_scatter_sum") != 0 ||
                        finish(c, "reduce_scatter_sum") != 0))
        return;
    count(c, COLL_REDUCE_SCATTER, 1.0, (double)c->size * (double)chunk * (double)dtype_size(dt), t0);
}

static void all_gather(struct collectives *c, void *buf, size_t chunk, enum dtype dt) {
    double t0 = monotonic_seconds();
    if (c->size > 1 && (post_all_gather(c, buf, chunk, dt, "all_gather") != 0 || finish(c, "all_gather") != 0))
        return;
    count(c, COLL_ALL_GATHER, 1.0, (double)c->size * (double)chunk * (double)dtype_size(dt), t0);
}

/* ---- non-blocking: posted on the table's stream, an event recorded after
 * each, counted when posted with the same ring volumes. A group of one
 * posts nothing; its event completes at once. */
static struct coll_request post(struct collectives *c, const char *call, void *buf, size_t count_, enum dtype dt,
                                enum coll_kind k, double factor, double full_bytes) {
    double t0 = monotonic_seconds();
    int slot = nccl_request_claim(c, call);
    if (slot < 0) return (struct coll_request){.slot = -1};
    struct nccl_impl *m = nccl_of(c);
    /* the start event after the stream's wait for the kernels before it
     * (post_reduce_scatter and post_all_gather wait again: nothing new) */
    int rc = c->size > 1 ? nccl_after_default_stream(c, call) : 0;
    if (rc == 0) rc = nccl_request_start(c, slot, m->stream, call);
    if (rc == 0 && c->size > 1) {
        if (k == COLL_ALL_REDUCE)
            rc = nccl_ok(c, call, ncclAllReduce(buf, buf, count_, nccl_type(dt), ncclSum, m->nccl, m->stream));
        else if (k == COLL_REDUCE_SCATTER) rc = post_reduce_scatter(c, buf, count_, dt, call);
        else rc = post_all_gather(c, buf, count_, dt, call);
    }
    if (rc != 0) {
        m->requests[slot].busy = false;
        return (struct coll_request){.slot = -1};
    }
    return nccl_request_commit(c, slot, m->stream, call, k,
                               factor * (double)(c->size - 1) * full_bytes / (double)c->size, -1, t0);
}

static struct coll_request iall_reduce_sum(struct collectives *c, void *buf, size_t n, enum dtype dt) {
    return post(c, "iall_reduce_sum", buf, n, dt, COLL_ALL_REDUCE, 2.0, (double)n * (double)dtype_size(dt));
}

static struct coll_request ireduce_scatter_sum(struct collectives *c, void *buf, void *scratch, size_t chunk,
                                               enum dtype dt) {
    (void)scratch; /* NCCL's reduce-scatter keeps its own staging */
    return post(c, "ireduce_scatter_sum", buf, chunk, dt, COLL_REDUCE_SCATTER, 1.0,
                (double)c->size * (double)chunk * (double)dtype_size(dt));
}

static struct coll_request iall_gather(struct collectives *c, void *buf, size_t chunk, enum dtype dt) {
    return post(c, "iall_gather", buf, chunk, dt, COLL_ALL_GATHER, 1.0,
                (double)c->size * (double)chunk * (double)dtype_size(dt));
}

/* Host doubles, staged through the table's device buffer (grown as needed). */
static void all_reduce_scalars(struct collectives *c, double *values, int n) {
    double t0 = monotonic_seconds();
    struct nccl_impl *m = nccl_of(c);
    const char *call = "all_reduce_scalars";
    if (c->size > 1 && n > 0) {
        if (n > m->scalars_cap) {
            cudaFree(m->scalars);
            m->scalars = NULL;
            m->scalars_cap = 0;
            if (cuda_ok(c, call, cudaMalloc((void **)&m->scalars, (size_t)n * sizeof(double))) != 0) return;
            m->scalars_cap = n;
        }
        size_t bytes = (size_t)n * sizeof(double);
        if (cuda_ok(c, call, cudaMemcpyAsync(m->scalars, values, bytes, cudaMemcpyHostToDevice, m->stream)) ||
            nccl_ok(c, call, ncclAllReduce(m->scalars, m->scalars, (size_t)n, ncclFloat64, ncclSum, m->nccl, m->stream)) ||
            cuda_ok(c, call, cudaMemcpyAsync(values, m->scalars, bytes, cudaMemcpyDeviceToHost, m->stream)) ||
            finish(c, call))
            return;
    }
    count(c, COLL_SCALAR, 2.0, 8.0 * (double)n, t0);
}

/* Synchronisation, not traffic (as comm_mpi.c): this rank's queued work
 * done, then every rank of the group here. */
static void barrier(struct collectives *c) {
    if (cuda_ok(c, "barrier", cudaDeviceSynchronize()) != 0) return;
    if (c->size > 1) MPI_Barrier(nccl_of(c)->comm);
}

/* Every rank reaches each agreement, so a failure on one rank is every
 * rank's -1, and nobody waits in ncclCommInitRank for a rank that left. */
static int agree(MPI_Comm comm, int ok) {
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
    return ok;
}

static void release(struct nccl_impl *m) {
    for (int i = 0; i < COLL_MAX_REQUESTS; i++) {
        if (m->requests[i].done_event) cudaEventDestroy(m->requests[i].done_event);
        if (m->requests[i].start_event) cudaEventDestroy(m->requests[i].start_event);
    }
    if (m->queued) cudaEventDestroy(m->queued);
    if (m->stream) cudaStreamDestroy(m->stream);
    cudaFree(m->scalars);
    cudaFree(m->scratch);
    free(m);
}

int collectives_init_nccl(struct collectives *c, MPI_Comm comm, char *err, size_t err_len) {
    *c = (struct collectives){0};
    struct nccl_impl *m = calloc(1, sizeof *m);
    cudaError_t e = cudaSuccess;
    if (m) e = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
    if (m && e == cudaSuccess) e = cudaEventCreateWithFlags(&m->queued, cudaEventDisableTiming);
    for (int i = 0; m && e == cudaSuccess && i < COLL_MAX_REQUESTS; i++) { /* timing events: the time in flight */
        e = cudaEventCreate(&m->requests[i].start_event);
        if (e == cudaSuccess) e = cudaEventCreate(&m->requests[i].done_event);
    }
    if (!agree(comm, m && e == cudaSuccess)) {
        snprintf(err, err_len, "collectives (NCCL): %s (on this or another rank)",
                 !m ? "out of memory for the backend state" : e != cudaSuccess ? cudaGetErrorString(e)
                                                                               : "another rank failed");
        if (m) release(m);
        return -1;
    }
    MPI_Comm_dup(comm, &m->comm);
    MPI_Comm_rank(m->comm, &c->rank);
    MPI_Comm_size(m->comm, &c->size);
    /* rank 0's id and whether it has one, in one broadcast */
    struct { ncclUniqueId id; int ok; } root = {.ok = 1};
    ncclResult_t r = ncclSuccess;
    if (c->rank == 0 && (r = ncclGetUniqueId(&root.id)) != ncclSuccess) root.ok = 0;
    MPI_Bcast(&root, (int)sizeof root, MPI_BYTE, 0, m->comm);
    if (root.ok) r = ncclCommInitRank(&m->nccl, c->size, root.id, c->rank);
    if (!agree(m->comm, root.ok && r == ncclSuccess)) {
        snprintf(err, err_len, "collectives (NCCL): %s", !root.ok ? "rank 0 could not make the unique id"
                                                          : r != ncclSuccess ? ncclGetErrorString(r)
                                                                             : "another rank failed ncclCommInitRank");
        if (r == ncclSuccess && root.ok) ncclCommDestroy(m->nccl);
        MPI_Comm_free(&m->comm);
        release(m);
        *c = (struct collectives){0};
        return -1;
    }
    c->impl = m;
    c->all_reduce_sum = all_reduce_sum;
    c->all_reduce_max = all_reduce_max;
    c->reduce_scatter_sum = reduce_scatter_sum;
    c->all_gather = all_gather;
    c->all_reduce_scalars = all_reduce_scalars;
    c->barrier = barrier;
    c->iall_reduce_sum = iall_reduce_sum;
    c->ireduce_scatter_sum = ireduce_scatter_sum;
    c->iall_gather = iall_gather;
    nccl_p2p_install(c);
    return 0;
}

void collectives_free_nccl(struct collectives *c) {
    struct nccl_impl *m = nccl_of(c);
    if (!m) return;
    int pending = nccl_p2p_pending(m);
    if (pending > 0)
        fprintf(stderr, "collectives_free_nccl: rank %d of %d frees its table with %d requests not waited on\n",
                c->rank, c->size, pending);
    nccl_links_free(m);
    cudaStreamSynchronize(m->stream);
    ncclCommDestroy(m->nccl);
    MPI_Comm_free(&m->comm);
    release(m);
    struct comm_counters kept = c->counters;
    *c = (struct collectives){.rank = c->rank, .size = c->size, .counters = kept};
}
