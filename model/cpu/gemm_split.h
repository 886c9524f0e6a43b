/* The fixed blocks a GEMM's output C (m, n) is cut into when the run's
 * team takes it one block at a time: about GEMM_BLOCKS blocks along C's
 * longer side, each a multiple of GEMM_BLOCK_ALIGN rows or columns. The
 * cut depends on the shape alone, never on the team, so each output value
 * is summed by the same kernel in the same order on any number of threads
 * (docs/THREADS.md). Both host GEMM paths use it: the fp32 sgemm blocks
 * (model/cpu/matmul.c, where the numbers behind the constants are) and
 * oneDNN's bf16 primitives (model/cpu/matmul_onednn.c). */
#ifndef SHARDLAB_GEMM_SPLIT_H
#define SHARDLAB_GEMM_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

enum { GEMM_BLOCKS = 16, GEMM_BLOCK_ALIGN = 64 };

struct gemm_split {
    bool by_cols;   /* blocks of C's columns (n >= m), else of its rows */
    int64_t side;   /* the side cut: n or m */
    int64_t size;   /* a block's rows or columns (the last may be shorter) */
    int64_t blocks; /* how many */
};

static inline struct gemm_split gemm_split_of(int64_t m, int64_t n) {
    struct gemm_split s = {.by_cols = n >= m};
    s.side = s.by_cols ? n : m;
    s.size = (s.side + GEMM_BLOCKS - 1) / GEMM_BLOCKS;
    s.size = (s.size + GEMM_BLOCK_ALIGN - 1) / GEMM_BLOCK_ALIGN * GEMM_BLOCK_ALIGN;
    s.blocks = s.side > 0 ? (s.side + s.size - 1) / s.size : 0;
    return s;
}

/* Block j's first row or column and its length. */
static inline int64_t gemm_split_at(struct gemm_split s, int64_t j) { return j * s.size; }
static inline int64_t gemm_split_len(struct gemm_split s, int64_t j) {
    int64_t at = j * s.size;
    return s.side - at < s.size ? s.side - at : s.size;
}

#endif
