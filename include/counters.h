/* Work counters a step adds to: FLOPs actually issued, split by kind, and
 * the wall time spent inside GEMMs (for the "share of step time in sgemm"
 * figure). One instance lives in the run context; kernels get a pointer. */
#ifndef SHARDLAB_COUNTERS_H
#define SHARDLAB_COUNTERS_H

/* The CUDA build's per-run kernel context (model/cuda/kernel_context.h):
 * its cuBLAS handle and GEMM math. Opaque here. */
struct kernel_context;

struct flop_counter {
    double gemm;         /* 2mnk per GEMM of activations by weights (the layers' matmuls, the LM head) */
    double attention;    /* 2mnk per GEMM of the attention (QK^T, PV and their gradients), as issued:
                          * full T x T squares, the causally masked half included */
    double other;        /* elementwise work: norms, GELU, softmax, biases, optimizer */
    double gemm_seconds; /* time inside sgemm, both kinds (a thread in a parallel region adds its share) */
    /* Not a count. Every kernel already receives the run's counter, and
     * layers.h passes no other context, so the GPU's kernels find the run's
     * library handles and GEMM math through it (include/device.h:
     * device_kernels_open). NULL on the CPU, and wherever a counter is made
     * on the spot: a GPU kernel then uses fp32 GEMMs and a cuBLAS handle of
     * its own per call. */
    struct kernel_context *kernels;
};

/* Which total a GEMM's FLOPs go to (gemm_counted, layers.h). */
enum gemm_kind { GEMM_LAYER, GEMM_ATTENTION };

static inline double flops_total(const struct flop_counter *f) { return f->gemm + f->attention + f->other; }

#endif
