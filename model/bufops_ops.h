/* The buffer operations' backends behind one table (private to model/),
 * as model/layer_ops.h puts the layer ops: one list of the ops (BUF_OPS),
 * a struct buf_ops of function pointers made from it, one const table per
 * backend:
 *   buf_ops_cpu   host memory, every build (model/cpu/bufops.c)
 *   buf_ops_cuda  device memory, the CUDA build only
 *                 (model/cuda/bufops_device.c)
 * buf_backend (model/bufops_dispatch.c) is the one place a call's backend
 * is chosen, by the memory space the call names. A form's type is its
 * host form's, buf_X_cpu of include/bufops.h: the public name's less its
 * space (which chose the backend). The device forms are declared again
 * below with that type, so a drift stops the CUDA build, not a run. */
#ifndef SHARDLAB_MODEL_BUFOPS_OPS_H
#define SHARDLAB_MODEL_BUFOPS_OPS_H

#include "bufops.h"

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
#ifdef SHARDLAB_CUDA
#define BUF_CUDA_FORM(op) BUF_OP_TYPE(op) op##_cuda;
BUF_OPS(BUF_CUDA_FORM)
#undef BUF_CUDA_FORM
extern const struct buf_ops buf_ops_cuda;
#endif

/* The backend that runs `op` on memory of `space`. A device call in the
 * CPU build stops the run, naming op (include/backend.h). */
const struct buf_ops *buf_backend(enum mem_space space, const char *op);

#endif
