/* include/bufops.h's names, in every build: each call runs on the backend
 * of the space it names (include/backend.h): buf_X_cpu on host memory,
 * buf_X_cuda on device memory, so --device cpu in the CUDA build keeps the
 * CPU build's results; the CPU build stops a device call by name. A call
 * of zero elements or bytes touches nothing, on either backend. */
#include <stdbool.h>

#include "backend.h"
#include "bufops.h"

void buf_zero(enum mem_space space, void *dst, size_t bytes) {
    if (bytes && space == MEM_DEVICE) ON_DEVICE(buf_zero_cuda(dst, bytes));
    else buf_zero_cpu(dst, bytes);
}

void buf_copy(enum mem_space space, void *dst, const void *src, size_t bytes) {
    if (bytes && space == MEM_DEVICE) ON_DEVICE(buf_copy_cuda(dst, src, bytes));
    else buf_copy_cpu(dst, src, bytes);
}

void buf_widen(enum mem_space space, float *dst, const bf16 *src, size_t n) {
    if (n && space == MEM_DEVICE) ON_DEVICE(buf_widen_cuda(dst, src, n));
    else buf_widen_cpu(dst, src, n);
}

void buf_narrow(enum mem_space space, bf16 *dst, const float *src, size_t n) {
    if (n && space == MEM_DEVICE) ON_DEVICE(buf_narrow_cuda(dst, src, n));
    else buf_narrow_cpu(dst, src, n);
}

void buf_round_bf16(enum mem_space space, float *x, size_t n) {
    if (n && space == MEM_DEVICE) ON_DEVICE(buf_round_bf16_cuda(x, n));
    else buf_round_bf16_cpu(x, n);
}

void buf_round_narrow(enum mem_space space, bf16 *dst, float *x, size_t n) {
    if (n && space == MEM_DEVICE) ON_DEVICE(buf_round_narrow_cuda(dst, x, n));
    else buf_round_narrow_cpu(dst, x, n);
}

void buf_from_fp32(enum mem_space space, void *dst, enum dtype dt, const float *src, size_t n) {
    if (n && space == MEM_DEVICE) ON_DEVICE(buf_from_fp32_cuda(dst, dt, src, n));
    else buf_from_fp32_cpu(dst, dt, src, n);
}

void buf_to_fp32(enum mem_space space, float *dst, const void *src, enum dtype dt, size_t n) {
    if (n && space == MEM_DEVICE) ON_DEVICE(buf_to_fp32_cuda(dst, src, dt, n));
    else buf_to_fp32_cpu(dst, src, dt, n);
}

void buf_accumulate(enum mem_space space, void *dst, enum dtype dt, const float *src, size_t n) {
    if (n && space == MEM_DEVICE) ON_DEVICE(buf_accumulate_cuda(dst, dt, src, n));
    else buf_accumulate_cpu(dst, dt, src, n);
}

void buf_add(enum mem_space space, void *dst, const void *src, enum dtype dt, size_t n) {
    if (n && space == MEM_DEVICE) ON_DEVICE(buf_add_cuda(dst, src, dt, n));
    else buf_add_cpu(dst, src, dt, n);
}

double buf_sum_squares(enum mem_space space, const void *src, enum dtype dt, size_t n) {
    double s;
    if (n && space == MEM_DEVICE) ON_DEVICE(s = buf_sum_squares_cuda(src, dt, n));
    else s = buf_sum_squares_cpu(src, dt, n);
    return s;
}

/* buf_sumsq_open's list: on the host its segments, summed one by one; on
 * the device the CUDA backend's plan (buf_sumsq_open_cuda). */
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
    if (l->device) ON_DEVICE(buf_sumsq_close_cuda(l->device));
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
        ON_DEVICE(l->device = buf_sumsq_open_cuda(data, dt, n, nseg));
        ok = l->device != NULL;
    }
    if (ok) return l;
    buf_sumsq_close(l);
    return NULL;
}

int buf_sumsq_count(const struct sumsq_list *l) { return l->nseg; }

const double *buf_sumsq_run(struct sumsq_list *l) {
    if (l->space == MEM_DEVICE) {
        const double *d = NULL;
        ON_DEVICE(d = buf_sumsq_run_cuda(l->device));
        return d;
    }
    for (int s = 0; s < l->nseg; s++) l->out[s] = buf_sum_squares_cpu(l->data[s], l->dt, l->n[s]);
    return l->out;
}
