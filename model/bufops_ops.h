/* The buffer operations' backends behind one table (private to model/),
 * as model/layer_ops.h puts the layer ops: one list of the ops (BUF_OPS),
 * a struct buf_ops of function pointers made from it, one const table per
 * backend:
 *   buf_ops_cpu   host memory, every build (model/cpu/bufops.c)
 *   buf_ops_cuda  device memory, the CUDA build only
 *                 (model/cuda/bufops_device.c)
 * buf_backend (model/dispatch.c) is the one place a call's backend
 * is chosen, by the memory space the call names. A form's type is its
 * host form's, buf_X_cpu below: the public name's (include/bufops.h) less
 * its space (which chose the backend). The device forms are declared again
 * below with that type, so a drift stops the CUDA build, not a run.
 *
 * The backends' forms are declared here, not in include/bufops.h: only
 * model/ calls them. This header takes its types from dtype.h and
 * mem_space.h, not from bufops.h, so the public header and the backends'
 * stay one way round (dispatch.c includes both). C and C++ (the
 * .cu kernels include it for their forms). */
#ifndef SHARDLAB_MODEL_BUFOPS_OPS_H
#define SHARDLAB_MODEL_BUFOPS_OPS_H

#include <stddef.h>

#include "dtype.h"
#include "mem_space.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The backends: the same operations on one space's memory. The host's
 * forms are these; the device's, buf_X_cuda, have their types (below,
 * the CUDA build only). A CUDA failure inside buf_X_cuda (a bad pointer,
 * a lost device) leaves the device unusable: it prints the operation and
 * CUDA's message and exits non-zero, as a failed kernel would. The CUDA
 * results are the CPU's (bf16 bit for bit; the sum of squares in double,
 * in another order). buf_copy_cuda takes any pair of host and device
 * pointers (cudaMemcpyDefault). */
void buf_zero_cpu(void *dst, size_t bytes);
void buf_copy_cpu(void *dst, const void *src, size_t bytes);
void buf_widen_cpu(float *dst, const bf16 *src, size_t n);
void buf_narrow_cpu(bf16 *dst, const float *src, size_t n);
void buf_round_bf16_cpu(float *x, size_t n);
void buf_round_narrow_cpu(bf16 *dst, float *x, size_t n);
void buf_from_fp32_cpu(void *dst, enum dtype dt, const float *src, size_t n);
void buf_to_fp32_cpu(float *dst, const void *src, enum dtype dt, size_t n);
void buf_accumulate_cpu(void *dst, enum dtype dt, const float *src, size_t n);
void buf_add_cpu(void *dst, const void *src, enum dtype dt, size_t n);
double buf_sum_squares_cpu(const void *src, enum dtype dt, size_t n);

/* buf_sumsq_open/run/close's device form (opaque: a struct sumsq_plan) */
void *buf_sumsq_open_cuda(const void *const *data, enum dtype dt, const size_t *n, int nseg);
const double *buf_sumsq_run_cuda(void *plan);
void buf_sumsq_close_cuda(void *plan);

#define BUF_OPS(X)                                                                                           \
    X(buf_zero) X(buf_copy) X(buf_widen) X(buf_narrow) X(buf_round_bf16) X(buf_round_narrow) X(buf_from_fp32) \
    X(buf_to_fp32) X(buf_accumulate) X(buf_add) X(buf_sum_squares)

/* buf_sumsq_open/run/close's device plan: the device's only (the host
 * runs the list's segments through buf_sum_squares, one by one). */
#define BUF_SUMSQ_OPS(X) X(buf_sumsq_open) X(buf_sumsq_run) X(buf_sumsq_close)

#define BUF_OP_TYPE(op) __typeof__(op##_cpu)
#define BUF_SUMSQ_TYPE(op) __typeof__(op##_cuda)

/* A backend: its form of each op; the sumsq members NULL on the host
 * (buf_sumsq_run then sums the segments with the table's buf_sum_squares). */
struct buf_ops {
#define BUF_OP_MEMBER(op) BUF_OP_TYPE(op) *op;
    BUF_OPS(BUF_OP_MEMBER)
#undef BUF_OP_MEMBER
#define BUF_SUMSQ_MEMBER(op) BUF_SUMSQ_TYPE(op) *op;
    BUF_SUMSQ_OPS(BUF_SUMSQ_MEMBER)
#undef BUF_SUMSQ_MEMBER
};

extern const struct buf_ops buf_ops_cpu;
#ifdef SHARDLAB_CUDA /* the device's forms, buf_X_cuda (the .cu files too: nvcc defines it) */
#define BUF_CUDA_FORM(op) BUF_OP_TYPE(op) op##_cuda;
BUF_OPS(BUF_CUDA_FORM)
#undef BUF_CUDA_FORM
extern const struct buf_ops buf_ops_cuda;
#endif

/* The backend that runs `op` on memory of `space`. A device call in the
 * CPU build stops the run, naming op (include/backend.h). */
const struct buf_ops *buf_backend(enum mem_space space, const char *op);

#ifdef __cplusplus
}
#endif

#endif
