/* include/bufops.h's names, in every build: each call runs on the table
 * that buf_backend, below, chooses by the space it names (model/
 * bufops_ops.h): buf_ops_cpu on host memory, buf_ops_cuda on device memory,
 * so --device cpu in the CUDA build keeps the CPU build's results; the CPU
 * build stops a device call by name. A call of zero elements or bytes
 * touches nothing, on either backend: it runs the host's form, whatever
 * the space, as it always has (its pointers may be anywhere). */
#include <stdbool.h>

#include "backend.h"
#include "bufops.h"
#include "bufops_ops.h"

/* The one place a buffer operation's backend is chosen. */
const struct buf_ops *buf_backend(enum mem_space space, const char *op) {
    if (space == MEM_DEVICE) return BACKEND_DEVICE(buf_ops_cuda, op);
    return &buf_ops_cpu;
}

/* The backend of a call of `count` elements or bytes (above: none run on
 * the host's form). */
static const struct buf_ops *ops(enum mem_space space, size_t count, const char *op) {
    return buf_backend(count ? space : MEM_HOST, op);
}

void buf_zero(enum mem_space space, void *dst, size_t bytes) { ops(space, bytes, __func__)->buf_zero(dst, bytes); }

void buf_copy(enum mem_space space, void *dst, const void *src, size_t bytes) {
    ops(space, bytes, __func__)->buf_copy(dst, src, bytes);
}

void buf_widen(enum mem_space space, float *dst, const bf16 *src, size_t n) {
    ops(space, n, __func__)->buf_widen(dst, src, n);
}

void buf_narrow(enum mem_space space, bf16 *dst, const float *src, size_t n) {
    ops(space, n, __func__)->buf_narrow(dst, src, n);
}

void buf_round_bf16(enum mem_space space, float *x, size_t n) { ops(space, n, __func__)->buf_round_bf16(x, n); }

void buf_round_narrow(enum mem_space space, bf16 *dst, float *x, size_t n) {
    ops(space, n, __func__)->buf_round_narrow(dst, x, n);
}

void buf_from_fp32(enum mem_space space, void *dst, enum dtype dt, const float *src, size_t n) {
    ops(space, n, __func__)->buf_from_fp32(dst, dt, src, n);
}

void buf_to_fp32(enum mem_space space, float *dst, const void *src, enum dtype dt, size_t n) {
    ops(space, n, __func__)->buf_to_fp32(dst, src, dt, n);
}

void buf_accumulate(enum mem_space space, void *dst, enum dtype dt, const float *src, size_t n) {
    ops(space, n, __func__)->buf_accumulate(dst, dt, src, n);
}

void buf_add(enum mem_space space, void *dst, const void *src, enum dtype dt, size_t n) {
    ops(space, n, __func__)->buf_add(dst, src, dt, n);
}

double buf_sum_squares(enum mem_space space, const void *src, enum dtype dt, size_t n) {
    return ops(space, n, __func__)->buf_sum_squares(src, dt, n);
}

/* buf_sumsq_open's list: its segments, and on the device the CUDA
 * backend's plan (its buf_sumsq_open). */
struct sumsq_list {
    enum mem_space space;
    int nseg;
    enum dtype dt;
    const void **data;
    size_t *n;
    double *out;
    void *device;
};

void buf_sumsq_close(struct sumsq_list *l) {
    if (!l) return;
    if (l->device) buf_backend(l->space, __func__)->buf_sumsq_close(l->device);
    free(l->data);
    free(l->n);
    free(l->out);
    free(l);
}

struct sumsq_list *buf_sumsq_open(enum mem_space space, const void *const *data, enum dtype dt, const size_t *n,
                                  int nseg) {
    struct sumsq_list *l = nseg >= 0 ? calloc(1, sizeof *l) : NULL;
    if (!l) return NULL;
    size_t k = nseg > 0 ? (size_t)nseg : 1;
    *l = (struct sumsq_list){.space = space, .nseg = nseg, .dt = dt, .data = calloc(k, sizeof *l->data),
                             .n = calloc(k, sizeof *l->n), .out = calloc(k, sizeof *l->out)};
    bool ok = l->data && l->n && l->out;
    for (int s = 0; ok && s < nseg; s++) l->data[s] = data[s], l->n[s] = n[s];
    /* the device's table, uploaded once (its few device buffers are
     * cudaMalloc'd: the memory table's "device untracked" row) */
    if (ok && space == MEM_DEVICE) {
        l->device = buf_backend(space, __func__)->buf_sumsq_open(data, dt, n, nseg);
        ok = l->device != NULL;
    }
    if (ok) return l;
    buf_sumsq_close(l);
    return NULL;
}

int buf_sumsq_count(const struct sumsq_list *l) { return l->nseg; }

const double *buf_sumsq_run(struct sumsq_list *l) {
    const struct buf_ops *b = buf_backend(l->space, __func__);
    if (b->buf_sumsq_run) return b->buf_sumsq_run(l->device);
    for (int s = 0; s < l->nseg; s++) l->out[s] = b->buf_sum_squares(l->data[s], l->dt, l->n[s]);
    return l->out;
}
