/* Collectives over an MPI communicator (parallel/comm/comm_mpi.h). Every call is
 * in place and adds the ring-algorithm byte volume of include/collectives.h
 * to the counters, whatever algorithm MPI picks underneath. Point to point
 * lives in comm_mpi_p2p.c, the non-blocking reduce-scatter's ring in
 * comm_mpi_ring.c; the state they share in mpi_impl.h. */
#include "comm_mpi.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "mpi_impl.h"

/* inout[i] = RNE(in[i] + inout[i]) with the sum taken in fp32. */
static void bf16_sum_op(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const bf16 *a = in;
    bf16 *b = inout;
    for (int i = 0; i < *len; i++) b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

/* The max of collectives.h, independent of the combining order: NaN if
 * either is NaN (MPI_MAX leaves NaN to the order of its comparisons), and
 * +0 over -0. The result is one of the operands, so rounding never enters. */
static float max_f32(float a, float b) {
    if (isnan(a) || isnan(b)) return NAN;
    if (a == b) return signbit(a) ? b : a;
    return a > b ? a : b;
}

static void fp32_max_op(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const float *a = in;
    float *b = inout;
    for (int i = 0; i < *len; i++) b[i] = max_f32(a[i], b[i]);
}

/* Widening is exact and the max is an operand, so the narrowing is too
 * (NaN comes back as bf16's quiet NaN). */
static void bf16_max_op(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const bf16 *a = in;
    bf16 *b = inout;
    for (int i = 0; i < *len; i++) b[i] = f32_to_bf16(max_f32(bf16_to_f32(a[i]), bf16_to_f32(b[i])));
}

static MPI_Op mpi_sum(struct collectives *c, enum dtype dt) {
    return dt == DTYPE_FP32 ? MPI_SUM : impl_of(c)->bf16_sum;
}

static MPI_Op mpi_max(struct collectives *c, enum dtype dt) {
    return dt == DTYPE_FP32 ? impl_of(c)->fp32_max : impl_of(c)->bf16_max;
}

/* Ring volume (N-1)/N x M, times 2 for an all-reduce (THEORY.md 7). */
static void count(struct collectives *c, enum coll_kind k, double factor, double full_bytes, double t0) {
    int n = c->size;
    count_call(c, k, factor * (double)(n - 1) * full_bytes / (double)n, -1, t0);
}

/* A chunk count MPI cannot express is a caller bug: raise it the MPI way
 * (fatal unless the caller installed MPI_ERRORS_RETURN; then the call is
 * skipped and not counted). */
static int fits_int(struct collectives *c, size_t chunk) {
    if (chunk <= INT_MAX) return 1;
    MPI_Comm_call_errhandler(impl_of(c)->comm, MPI_ERR_COUNT);
    return 0;
}

/* In place, split so each call's count fits MPI's int; elementwise, so
 * the split changes nothing. */
static void all_reduce(struct collectives *c, void *buf, size_t n, enum dtype dt, MPI_Op op, enum coll_kind k) {
    double t0 = monotonic_seconds();
    size_t esz = dtype_size(dt);
    for (size_t done = 0; c->size > 1 && done < n;) {
        size_t part = n - done < (size_t)INT_MAX ? n - done : (size_t)INT_MAX;
        MPI_Allreduce(MPI_IN_PLACE, (char *)buf + done * esz, (int)part, mpi_type(c, dt), op, impl_of(c)->comm);
        done += part;
    }
    count(c, k, 2.0, (double)n * (double)esz, t0);
}

static void all_reduce_sum(struct collectives *c, void *buf, size_t n, enum dtype dt) {
    all_reduce(c, buf, n, dt, mpi_sum(c, dt), COLL_ALL_REDUCE);
}

static void all_reduce_max(struct collectives *c, void *buf, size_t n, enum dtype dt) {
    all_reduce(c, buf, n, dt, mpi_max(c, dt), COLL_ALL_REDUCE_MAX);
}

static void reduce_scatter_sum(struct collectives *c, void *buf, size_t chunk, enum dtype dt) {
    double t0 = monotonic_seconds();
    /* In place, MPI reads size x chunk values from buf and writes this
     * rank's reduced chunk to the start of buf: the seam's contract. */
    if (c->size > 1) {
        if (!fits_int(c, chunk)) return;
        MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, (int)chunk, mpi_type(c, dt), mpi_sum(c, dt), impl_of(c)->comm);
    }
    count(c, COLL_REDUCE_SCATTER, 1.0, (double)c->size * (double)chunk * (double)dtype_size(dt), t0);
}

static void all_gather(struct collectives *c, void *buf, size_t chunk, enum dtype dt) {
    double t0 = monotonic_seconds();
    if (c->size > 1) {
        if (!fits_int(c, chunk)) return;
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)chunk, mpi_type(c, dt), impl_of(c)->comm);
    }
    count(c, COLL_ALL_GATHER, 1.0, (double)c->size * (double)chunk * (double)dtype_size(dt), t0);
}

/* ---- non-blocking: the same collectives posted into the request table
 * (comm_mpi_p2p.c), counted when posted with the same ring volumes (the
 * reduce-scatter is the table's own ring, comm_mpi_ring.c). A
 * group of one posts nothing: its request stays MPI_REQUEST_NULL, which
 * MPI_Wait and MPI_Test complete at once. Unlike the blocking all-reduce,
 * the count is not split: one request is one MPI call. */

/* Posts into slot s (its req, or its ring); scratch: the reduce-scatter's. */
typedef int (*nb_post_fn)(struct collectives *c, struct mpi_request_slot *s, void *buf, void *scratch, int count,
                          MPI_Datatype type, enum dtype dt);

static int post_iallreduce(struct collectives *c, struct mpi_request_slot *s, void *buf, void *scratch, int count,
                           MPI_Datatype type, enum dtype dt) {
    (void)scratch;
    return MPI_Iallreduce(MPI_IN_PLACE, buf, count, type, mpi_sum(c, dt), impl_of(c)->comm, &s->req);
}

/* Not MPI's: a ring of point-to-point steps into the caller's scratch
 * (comm_mpi_ring.c says why), kept in the slot. */
static int post_ring_reduce_scatter(struct collectives *c, struct mpi_request_slot *s, void *buf, void *scratch,
                                    int count, MPI_Datatype type, enum dtype dt) {
    return mpi_ring_start(c, &s->ring, buf, scratch, count, type, dtype_size(dt), mpi_sum(c, dt));
}

static int post_iallgather(struct collectives *c, struct mpi_request_slot *s, void *buf, void *scratch, int count,
                           MPI_Datatype type, enum dtype dt) {
    (void)scratch, (void)dt;
    return MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, count, type, impl_of(c)->comm, &s->req);
}

/* count: MPI's count argument; full_bytes and factor: the ring volume. */
static struct coll_request post_collective(struct collectives *c, const char *call, nb_post_fn fn, void *buf,
                                           void *scratch, size_t count, enum dtype dt, enum coll_kind k,
                                           double factor, double full_bytes) {
    double t0 = monotonic_seconds();
    if (!fits_int(c, count)) return (struct coll_request){.slot = -1};
    int slot = mpi_request_claim(c, call);
    if (slot < 0) return (struct coll_request){.slot = -1};
    struct mpi_request_slot *s = &impl_of(c)->requests[slot];
    s->req = MPI_REQUEST_NULL; /* a group of one: nothing to post, complete at once */
    int rc = c->size > 1 ? fn(c, s, buf, scratch, (int)count, mpi_type(c, dt), dt) : MPI_SUCCESS;
    if (rc != MPI_SUCCESS) return mpi_request_abandon(c, slot, call, rc);
    struct coll_request r = mpi_request_commit(c, slot, mpi_type(c, dt), -1, t0);
    count_post(c, r, k, factor * (double)(c->size - 1) * full_bytes / (double)c->size, -1, t0);
    return r;
}

static struct coll_request iall_reduce_sum(struct collectives *c, void *buf, size_t n, enum dtype dt) {
    return post_collective(c, "iall_reduce_sum", post_iallreduce, buf, NULL, n, dt, COLL_ALL_REDUCE, 2.0,
                           (double)n * (double)dtype_size(dt));
}

static struct coll_request ireduce_scatter_sum(struct collectives *c, void *buf, void *scratch, size_t chunk,
                                               enum dtype dt) {
    return post_collective(c, "ireduce_scatter_sum", post_ring_reduce_scatter, buf, scratch, chunk, dt,
                           COLL_REDUCE_SCATTER, 1.0, (double)c->size * (double)chunk * (double)dtype_size(dt));
}

static struct coll_request iall_gather(struct collectives *c, void *buf, size_t chunk, enum dtype dt) {
    return post_collective(c, "iall_gather", post_iallgather, buf, NULL, chunk, dt, COLL_ALL_GATHER, 1.0,
                           (double)c->size * (double)chunk * (double)dtype_size(dt));
}

static void all_reduce_scalars(struct collectives *c, double *values, int n) {
    double t0 = monotonic_seconds();
    if (c->size > 1 && n > 0) MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, MPI_SUM, impl_of(c)->comm);
    count(c, COLL_SCALAR, 2.0, 8.0 * (double)n, t0);
}

/* Synchronisation, not traffic: left out of the counters so that timing
 * fences do not show up as communication. */
static void barrier(struct collectives *c) {
    if (c->size > 1) MPI_Barrier(impl_of(c)->comm);
}

int collectives_init_mpi(struct collectives *c, MPI_Comm comm, char *err, size_t err_len) {
    *c = (struct collectives){0};
    struct mpi_impl *m = malloc(sizeof *m);
    /* Agree before the collective dup: a rank that failed alone must not
     * leave the others waiting in MPI_Comm_dup. */
    int ok = m != NULL;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
    if (!ok) {
        free(m);
        snprintf(err, err_len, "collectives: out of memory for the MPI backend state (on this or another rank)");
        return -1;
    }
    MPI_Comm_dup(comm, &m->comm);
    MPI_Comm_dup(comm, &m->ring_comm);
    m->rings_posted = 0;
    MPI_Comm_rank(m->comm, &c->rank);
    MPI_Comm_size(m->comm, &c->size);
    MPI_Type_contiguous(1, MPI_UINT16_T, &m->bf16_type);
    MPI_Type_commit(&m->bf16_type);
    MPI_Op_create(bf16_sum_op, 1 /* commutative */, &m->bf16_sum);
    MPI_Op_create(bf16_max_op, 1, &m->bf16_max);
    MPI_Op_create(fp32_max_op, 1, &m->fp32_max);
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
    mpi_p2p_install(c);
    return 0;
}

void collectives_free_mpi(struct collectives *c) {
    struct mpi_impl *m = impl_of(c);
    if (!m) return;
    int pending = mpi_p2p_pending(m);
    if (pending > 0)
        fprintf(stderr, "collectives_free_mpi: rank %d of %d frees its table with %d isend/irecv not waited on "
                        "(their buffers may still be in use)\n", c->rank, c->size, pending);
    MPI_Op_free(&m->fp32_max);
    MPI_Op_free(&m->bf16_max);
    MPI_Op_free(&m->bf16_sum);
    MPI_Type_free(&m->bf16_type);
    MPI_Comm_free(&m->ring_comm);
    MPI_Comm_free(&m->comm);
    free(m);
    struct comm_counters kept = c->counters;
    *c = (struct collectives){.rank = c->rank, .size = c->size, .counters = kept};
}
