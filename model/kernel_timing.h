/* Timing the kernel calls of the CUDA build with CUDA events
 * (model/cuda/kernel_timing.c; model/dispatch.c and the GEMMs of
 * model/cuda/).
 *
 * A device call does not synchronize: it queues its kernels on the default
 * stream and returns, so the GPU runs the step's kernels back to back while
 * the host queues the next ones. Its time is therefore not a host clock's:
 * a span records a CUDA event before and after the call's kernels, and
 * kernel_timing_sync (the trainer calls it through device_kernels_sync at
 * the step's phase ends) waits for the device and adds each span's
 * event-to-event time into the run's exec_ctx: profile[kind] (the
 * kernel table) or gemm_seconds (a GEMM inside a call: spans nest). A span
 * of the host path is the host clock, as before. Without a run's kernel
 * context (a test's counter made on the spot) a device span synchronizes
 * at its end and reads the clock. Errors: a launch error is reported by
 * the call that made it; a kernel that fails while running is reported by
 * the next call that waits (CUDA_LAUNCH_BLOCKING=1 makes every launch wait,
 * to name it). */
#ifndef SHARDLAB_KERNEL_TIMING_H
#define SHARDLAB_KERNEL_TIMING_H

#include <stdbool.h>

#include "counters.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kernel_span {
    double t0; /* the host clock at the start (host spans, and device spans without events) */
    int event; /* the span's event pair in the run's context; KERNEL_SPAN_CLOCK or KERNEL_SPAN_SYNC */
};
enum { KERNEL_SPAN_CLOCK = -1, KERNEL_SPAN_SYNC = -2 };

#ifdef SHARDLAB_CUDA
/* Starts a span of one call: on_device, the call's kernels go to the GPU. */
struct kernel_span kernel_span_begin(struct exec_ctx *fc, bool on_device);
/* Ends it as a call of kind k (fc->profile[k]), or with gemm true as GEMM
 * time (fc->gemm_seconds). */
void kernel_span_end(struct exec_ctx *fc, struct kernel_span s, enum kernel_kind k);
void kernel_span_end_gemm(struct exec_ctx *fc, struct kernel_span s);
/* Waits for the device and folds every ended span into fc. Every span
 * must have ended. A no-op without a run's kernel context. */
void kernel_timing_sync(struct exec_ctx *fc);
#else
/* The CPU build: every call returns finished, so a span is the clock
 * (two reads of a monotonic clock per call: tens of nanoseconds against
 * kernels of microseconds or more). */
static inline struct kernel_span kernel_span_begin(struct exec_ctx *fc, bool on_device) {
    (void)fc, (void)on_device;
    return (struct kernel_span){kernel_clock(), KERNEL_SPAN_CLOCK};
}
static inline void kernel_span_end(struct exec_ctx *fc, struct kernel_span s, enum kernel_kind k) {
    kernel_profile_add(fc, k, s.t0);
}
#endif

#ifdef __cplusplus
}
#endif

#endif
