/* CUDA-event spans of kernel calls (model/kernel_timing.h). The run's
 * kernel context holds a fixed set of event pairs; each span takes the
 * next pair, and kernel_timing_sync reads them all back and frees them. A
 * span begun with every pair taken first syncs (when no span is open) or,
 * inside an open span, times itself with a synchronize and the clock. */
#include "../kernel_timing.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernel_context.h"

/* The pseudo-kind of a GEMM's span: its time goes to fc->gemm_seconds. */
enum { SPAN_GEMM = KERNEL_NUM_KINDS };

static void check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "error: CUDA %s: %s (error %d)\n", what, cudaGetErrorString(e), (int)e);
    exit(EXIT_FAILURE);
}

static struct kernel_timing *timing_of(const struct exec_ctx *fc) {
    return fc && fc->kernels ? fc->kernels->timing : NULL;
}

struct kernel_span kernel_span_begin(struct exec_ctx *fc, bool on_device) {
    struct kernel_timing *t = on_device ? timing_of(fc) : NULL;
    if (!t) return (struct kernel_span){kernel_clock(), on_device ? KERNEL_SPAN_SYNC : KERNEL_SPAN_CLOCK};
    if (t->used == KERNEL_SPANS) {
        if (t->open > 0) { /* inside a span: the pairs cannot be read back yet */
            check(cudaDeviceSynchronize(), "kernel timing");
            return (struct kernel_span){kernel_clock(), KERNEL_SPAN_SYNC};
        }
        kernel_timing_sync(fc);
    }
    int e = t->used++;
    t->open++;
    check(cudaEventRecord(t->start[e], 0), "kernel timing (start event)");
    return (struct kernel_span){0.0, e};
}

static void end(struct exec_ctx *fc, struct kernel_span s, int kind) {
    if (s.event < 0) {
        if (s.event == KERNEL_SPAN_SYNC) check(cudaDeviceSynchronize(), "kernel timing");
        double dt = kernel_clock() - s.t0;
        if (kind == SPAN_GEMM) fc->gemm_seconds += dt;
        else fc->profile[kind].seconds += dt, fc->profile[kind].calls += 1.0;
        return;
    }
    struct kernel_timing *t = timing_of(fc);
    check(cudaEventRecord(t->stop[s.event], 0), "kernel timing (stop event)");
    t->kind[s.event] = kind;
    t->open--;
}

void kernel_span_end(struct exec_ctx *fc, struct kernel_span s, enum kernel_kind k) { end(fc, s, (int)k); }

void kernel_span_end_gemm(struct exec_ctx *fc, struct kernel_span s) { end(fc, s, SPAN_GEMM); }

void kernel_timing_sync(struct exec_ctx *fc) {
    struct kernel_timing *t = timing_of(fc);
    if (!t) return;
    if (t->open != 0) {
        fprintf(stderr, "error: kernel timing: %d spans still open at a sync (a caller bug)\n", t->open);
        exit(EXIT_FAILURE);
    }
    check(cudaDeviceSynchronize(), "kernel timing (sync)");
    for (int e = 0; e < t->used; e++) {
        float ms = 0.0f;
        check(cudaEventElapsedTime(&ms, t->start[e], t->stop[e]), "kernel timing (elapsed)");
        double s = 1e-3 * (double)ms;
        if (t->kind[e] == SPAN_GEMM) fc->gemm_seconds += s;
        else fc->profile[t->kind[e]].seconds += s, fc->profile[t->kind[e]].calls += 1.0;
    }
    t->used = 0;
}
