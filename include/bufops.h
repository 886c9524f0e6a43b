/* Buffer operations: everything outside the layer kernels that touches
 * parameter, gradient, activation or optimizer memory goes through these
 * (and the update rules of include/optim.h). Each takes the memory space
 * its buffers live in first (mem_space.h: the caller's, e.g. struct
 * engine's or struct zero's space) and runs on that space's backend table
 * (model/bufops_ops.h, model/dispatch.c): buf_X_cpu
 * (model/cpu/bufops.c) on host memory, buf_X_cuda
 * (model/cuda/bufops_device.c, the CUDA build only) on device memory; the
 * CPU build stops a device call by name. buf_copy on
 * MEM_DEVICE takes any pair of host and device buffers (a transfer);
 * every other operation has all its buffers in the one space. Counts are
 * elements unless a name says bytes; zero of them touch nothing. */
#ifndef SHARDLAB_BUFOPS_H
#define SHARDLAB_BUFOPS_H

#include <stddef.h>

#include "dtype.h"
#include "mem_space.h"

#ifdef __cplusplus
extern "C" {
#endif

void buf_zero(enum mem_space space, void *dst, size_t bytes);
void buf_copy(enum mem_space space, void *dst, const void *src, size_t bytes);

/* dst (fp32) = src (bf16), exact. */
void buf_widen(enum mem_space space, float *dst, const bf16 *src, size_t n);
/* dst (bf16) = src (fp32) rounded to nearest even. */
void buf_narrow(enum mem_space space, bf16 *dst, const float *src, size_t n);
/* x = the fp32 value nearest x that bf16 can hold (in place). */
void buf_round_bf16(enum mem_space space, float *x, size_t n);
/* Both at once: x rounded in place as buf_round_bf16 rounds it, and dst
 * (bf16) = that value (buf_narrow's bits). A saved activation is rounded
 * for the forward and packed for the backward in one pass. */
void buf_round_narrow(enum mem_space space, bf16 *dst, float *x, size_t n);

/* dst (dt) = src (fp32): a copy, or a rounding to bf16. */
void buf_from_fp32(enum mem_space space, void *dst, enum dtype dt, const float *src, size_t n);
/* dst (fp32) = src (dt): a copy, or an exact widening. */
void buf_to_fp32(enum mem_space space, float *dst, const void *src, enum dtype dt, size_t n);

/* dst (dt) += src (fp32), one rounding per element when dt is bf16. */
void buf_accumulate(enum mem_space space, void *dst, enum dtype dt, const float *src, size_t n);
/* dst += src, both in dt (bf16: summed in fp32, rounded once). */
void buf_add(enum mem_space space, void *dst, const void *src, enum dtype dt, size_t n);

/* Sum of squares of n values of dtype dt, accumulated in double. */
double buf_sum_squares(enum mem_space space, const void *src, enum dtype dt, size_t n);

/* A fixed list of segments' sums of squares, made once and run every step
 * (the gradient norm's one pass on a GPU: parallel/zero/zero.c). data[s]:
 * n[s] values of dt. On device memory one pass over a chunk table uploaded
 * at open, and one copy to the host per run (the CUDA backend's;
 * compiled, not run on a GPU); on host memory buf_sum_squares per segment.
 * Open: NULL when out of host memory or the table cannot be built. Run:
 * each segment's sum (nseg doubles on the host, valid until the next run). */
struct sumsq_list;
struct sumsq_list *buf_sumsq_open(enum mem_space space, const void *const *data, enum dtype dt, const size_t *n,
                                  int nseg);
const double *buf_sumsq_run(struct sumsq_list *l);
int buf_sumsq_count(const struct sumsq_list *l); /* its segments */
void buf_sumsq_close(struct sumsq_list *l);

#ifdef __cplusplus
}
#endif

#endif
