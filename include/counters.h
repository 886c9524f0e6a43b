/* Work counters a step adds to: FLOPs actually issued, split by kind, and
 * the wall time spent inside GEMMs (for the "share of step time in sgemm"
 * figure). One instance lives in the run context; kernels get a pointer. */
#ifndef SHARDLAB_COUNTERS_H
#define SHARDLAB_COUNTERS_H

struct flop_counter {
    double gemm;       /* 2mnk per GEMM */
    double attention;  /* QK^T and attention x V (causal: only the kept half) */
    double other;      /* elementwise work: norms, GELU, softmax, biases, optimizer */
    double gemm_seconds;
};

static inline double flops_total(const struct flop_counter *f) { return f->gemm + f->attention + f->other; }

#endif
