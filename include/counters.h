/* The execution context every kernel call, update rule and dtype pass
 * receives (struct exec_ctx): where and how it runs (the memory space, the
 * GEMM flavour, the library handles, what the device backend asks of the
 * core) and what it adds to (FLOPs actually issued, split by kind, the
 * wall time inside GEMMs, each kernel kind's time). One instance lives in
 * the run context; kernels get a pointer. */
#ifndef SHARDLAB_COUNTERS_H
#define SHARDLAB_COUNTERS_H

#include <stdbool.h>
#include "clock.h"

#include "mem_space.h"

/* Where a step's kernel time goes, kernel kind by kind (the report's
 * kernel table). The dispatch (model/dispatch.c,
 * optim/optim_dispatch.c) times every layers.h and update-rule call on
 * either memory space: a layers.h call on the device by CUDA events around
 * its kernels (model/kernel_timing.h: it does not synchronize), an update
 * rule and a host call by the clock (they return finished). The dtype
 * conversion passes (include/conversions.h) add their time and the bytes
 * they read and write: the cost of keeping values in two dtypes. */
enum kernel_kind {
    KERNEL_EMBEDDING,      /* token and position rows, forward and backward */
    KERNEL_LAYERNORM_FWD,
    KERNEL_LAYERNORM_BWD,
    KERNEL_MATMUL_FWD,     /* the layers' GEMMs and their biases */
    KERNEL_MATMUL_BWD,
    KERNEL_GEMM,           /* gemm_counted called directly */
    KERNEL_ATTENTION_FWD,  /* plain or flash */
    KERNEL_ATTENTION_BWD,
    KERNEL_GELU,           /* forward and backward */
    KERNEL_RESIDUAL,       /* residual adds and row-parallel bias adds */
    KERNEL_CROSSENTROPY,   /* fused, or the vocabulary-parallel passes */
    KERNEL_OPTIMIZER,      /* the update rules */
    KERNEL_WIDEN,          /* conversion passes: bf16 -> fp32 copies */
    KERNEL_NARROW,         /* fp32 -> bf16 copies (a GEMM's rounded operands included) */
    KERNEL_ROUND,          /* fp32 rounded to bf16 in place, with or without a bf16 copy */
    KERNEL_ACCUMULATE,     /* an fp32 sum added into bf16 (gradients rounded once) */
    KERNEL_RMSNORM,        /* llama's norms, forward and backward */
    KERNEL_ROPE,           /* llama's rotary embeddings, forward and backward */
    KERNEL_SWIGLU,         /* llama's MLP gate, forward and backward */
    KERNEL_NUM_KINDS
};

static inline const char *kernel_kind_name(enum kernel_kind k) {
    static const char *const names[KERNEL_NUM_KINDS] = {
        [KERNEL_EMBEDDING] = "embedding",           [KERNEL_LAYERNORM_FWD] = "layernorm forward",
        [KERNEL_LAYERNORM_BWD] = "layernorm backward", [KERNEL_MATMUL_FWD] = "matmul forward",
        [KERNEL_MATMUL_BWD] = "matmul backward",    [KERNEL_GEMM] = "gemm (direct)",
        [KERNEL_ATTENTION_FWD] = "attention forward", [KERNEL_ATTENTION_BWD] = "attention backward",
        [KERNEL_GELU] = "gelu",                     [KERNEL_RESIDUAL] = "residual, bias add",
        [KERNEL_CROSSENTROPY] = "cross-entropy",    [KERNEL_OPTIMIZER] = "optimizer update",
        [KERNEL_WIDEN] = "widen bf16->fp32",        [KERNEL_NARROW] = "narrow fp32->bf16",
        [KERNEL_ROUND] = "round to bf16",           [KERNEL_ACCUMULATE] = "accumulate into bf16",
        [KERNEL_RMSNORM] = "rmsnorm",               [KERNEL_ROPE] = "rope",
        [KERNEL_SWIGLU] = "swiglu",
    };
    return (unsigned)k < KERNEL_NUM_KINDS ? names[k] : "?";
}

struct kernel_time {
    double seconds, calls;
    double bytes; /* the conversion passes: bytes read plus bytes written */
};

/* What the core asks of the backend that runs the run's device calls,
 * rather than which kernels it has. The GPU backend answers for the
 * kernels the run chose (include/device.h: device_backend_traits); all
 * false is the default way: every CPU run's, and a counter's made on the
 * spot. */
struct backend_traits {
    /* Its GEMMs read bf16 weights and saved bf16 activations as they are,
     * and its embedding lookup the bf16 table: the engine hands the model
     * its bf16 params (parallel/engine.c) and the model runs its bf16 data
     * path (model/gpt_acts.c: acts_direct). The CPU's kernels always do. */
    bool reads_bf16;
    /* The targets go to the device with the batch, before a micro-batch's
     * kernels are queued, not in the head's forward (parallel/engine.c). */
    bool targets_with_batch;
    /* The gradient norm sums its segments in one pass over a table made
     * once (include/bufops.h: buf_sumsq_open; parallel/zero/zero.c). */
    bool one_pass_norm;
    /* An update rule returns with its kernels queued, without a wait per
     * call (optim/cuda/optim_device.c). */
    bool queued_updates;
};

/* The CUDA build's per-run kernel context (model/cuda/kernel_context.h):
 * its cuBLAS handle and GEMM math. Opaque here. */
struct kernel_context;
/* The CPU's: oneDNN's bf16 GEMMs (include/onednn_gemms.h). Opaque here. */
struct onednn_gemms;

struct exec_ctx {
    /* ---- what the calls add to */
    double gemm;         /* 2mnk per GEMM of activations by weights (the layers' matmuls, the LM head) */
    double attention;    /* 2mnk per GEMM of the attention (QK^T, PV and their gradients), as issued:
                          * full T x T squares, the causally masked half included */
    double other;        /* elementwise work: norms, GELU, softmax, biases, optimizer */
    double gemm_seconds; /* time inside sgemm, both kinds (a thread in a parallel region adds its share) */
    /* ---- where and how they run. A context made on the spot ({0}) is the
     * host's, with fp32 sgemm, one call per GEMM and its own handles. */
    /* The GPU's library handles and GEMM math (include/device.h:
     * device_kernels_open). NULL on the CPU, and on a context made on the
     * spot: a GPU kernel then uses fp32 GEMMs and a cuBLAS handle of its
     * own per call. */
    struct kernel_context *kernels;
    /* oneDNN's when the run's layer GEMMs are bf16 on the CPU (--gemm_dtype
     * bf16; include/onednn_gemms.h): the host's matmul_forward/backward
     * then run on oneDNN with bf16 operands. NULL: fp32 sgemm through
     * OpenBLAS. Opened and closed by the trainer. */
    struct onednn_gemms *onednn;
    /* The run's layer GEMMs are bf16 on the CPU through the project's
     * reference (--gemm_kernel reference; model/cpu/matmul.c,
     * matmul_*_mixed_cpu): every operand rounded to bf16, then sgemm in
     * fp32, so the host's fp32-operand GEMMs round as oneDNN's would. */
    bool bf16_reference;
    /* Where the buffers of the calls live, so where they run (mem_space.h;
     * the dispatch picks the backend by it). The trainer sets the run's
     * from the run's space. */
    enum mem_space space;
    /* Whether the host's fp32 GEMMs run in the fixed blocks the team takes
     * (model/cpu/matmul.c), so their bits stay the same on whatever team
     * the run shrinks to (docs/THREADS.md). The trainer sets it for runs of
     * more than one thread; false: one sgemm per call, OpenBLAS's own
     * threading. */
    bool gemm_blocks;
    /* What the run's device backend asks of the core (struct
     * backend_traits, above). The trainer sets it when it opens the GPU's
     * kernels (train/run/run_device.c); all false on the CPU. */
    struct backend_traits device;
    struct kernel_time profile[KERNEL_NUM_KINDS]; /* the dispatch's time per kernel kind */
};

/* A monotonic clock for the profile, in seconds. */
static inline double kernel_clock(void) { return monotonic_seconds(); }

/* One call of kind k, started at t0 (kernel_clock), into fc's profile. */
static inline void kernel_profile_add(struct exec_ctx *fc, enum kernel_kind k, double t0) {
    fc->profile[k].seconds += kernel_clock() - t0;
    fc->profile[k].calls += 1.0;
}

/* Which total a GEMM's FLOPs go to (gemm_counted, layers.h). */
enum gemm_kind { GEMM_LAYER, GEMM_ATTENTION };

static inline double flops_total(const struct exec_ctx *f) { return f->gemm + f->attention + f->other; }

#endif
