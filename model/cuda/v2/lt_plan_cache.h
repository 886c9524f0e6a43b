/* cuBLASLt descriptors and algorithms cached per shape (issue 24, Deliver
 * 2; --gpu_path v2 only, docs/GPU.md). v1 (model/cuda/matmul_lt.cu) makes
 * a matmul descriptor, three layouts and a preference and asks the
 * heuristic for an algorithm on every call: host work on each of a step's
 * ~100 bias GEMMs at 124M, for about ten distinct shapes. v2 keeps, per
 * shape, what cuBLASLt made the first time (matmul_lt_cached.cu), the
 * answer "no algorithm" included, so the fall-back is decided once too.
 *
 * This header is the host logic, plain C shared by the .cu and the CPU
 * test (tests/test_lt_plan_cache.c): the shape key and a fixed table
 * (open addressing, linear probing; a run has a handful of shapes, so a
 * full table is a caller's bug made harmless: lt_cache_slot returns -1 and
 * the call takes v1's per-call way). */
#ifndef SHARDLAB_LT_PLAN_CACHE_H
#define SHARDLAB_LT_PLAN_CACHE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Everything the descriptor, the layouts and the algorithm depend on; the
 * pointers, beta and the bias pointer are the call's. */
struct lt_shape {
    int64_t m, n, k, lda, ldb, ldd;
    int32_t epilogue; /* enum lt_epilogue */
    int32_t trans;    /* bit 0: trans_a, bit 1: trans_b */
    int32_t d_bf16;   /* D (and C) bf16: the bf16 data path's outputs (matmul_mixed.cu); 0: fp32 */
};

/* What a slot holds: the shape, and cuBLASLt's objects as opaque pointers
 * (desc, the three layouts, the algorithm's bytes) for the .cu to fill. */
enum { LT_CACHE_SLOTS = 64, LT_ALGO_BYTES = 64 };
struct lt_plan {
    struct lt_shape shape;
    bool used, found;             /* found: cuBLASLt has an algorithm for it (else the caller's way) */
    void *desc, *first, *second, *out;
    unsigned char algo[LT_ALGO_BYTES]; /* cublasLtMatmulAlgo_t (64 bytes) */
};
struct lt_cache {
    struct lt_plan slot[LT_CACHE_SLOTS];
    int used;
    long long hits, misses;
};

static inline struct lt_shape lt_shape_of(int epilogue, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                          int64_t lda, int64_t ldb, int64_t ldd) {
    struct lt_shape s;
    memset(&s, 0, sizeof s); /* no padding bytes left undefined: the key is compared field by field anyway */
    s.m = m, s.n = n, s.k = k, s.lda = lda, s.ldb = ldb, s.ldd = ldd;
    s.epilogue = epilogue;
    s.trans = (trans_a ? 1 : 0) | (trans_b ? 2 : 0);
    s.d_bf16 = 0; /* v1's fp32 D; a bf16 D sets it after */
    return s;
}

static inline bool lt_shape_equal(const struct lt_shape *a, const struct lt_shape *b) {
    return a->m == b->m && a->n == b->n && a->k == b->k && a->lda == b->lda && a->ldb == b->ldb &&
           a->ldd == b->ldd && a->epilogue == b->epilogue && a->trans == b->trans &&
           a->d_bf16 == b->d_bf16;
}

/* FNV-1a over the key's fields (not its bytes: no padding read). */
static inline uint64_t lt_shape_hash(const struct lt_shape *s) {
    const int64_t v[9] = {s->m, s->n, s->k, s->lda, s->ldb, s->ldd, s->epilogue, s->trans, s->d_bf16};
    uint64_t h = 14695981039346656037ULL;
    for (int i = 0; i < 9; i++)
        for (int b = 0; b < 8; b++) h = (h ^ (((uint64_t)v[i] >> (8 * b)) & 0xff)) * 1099511628211ULL;
    return h;
}

/* The slot of s: its own when cached (*hit true), else the free slot it
 * takes (*hit false, marked used with s: the caller fills it); -1 when
 * the table is full. */
static inline int lt_cache_slot(struct lt_cache *c, const struct lt_shape *s, bool *hit) {
    uint64_t h = lt_shape_hash(s);
    for (int probe = 0; probe < LT_CACHE_SLOTS; probe++) {
        int i = (int)((h + (uint64_t)probe) % LT_CACHE_SLOTS);
        struct lt_plan *p = &c->slot[i];
        if (p->used && lt_shape_equal(&p->shape, s)) {
            *hit = true;
            c->hits++;
            return i;
        }
        if (!p->used) {
            memset(p, 0, sizeof *p);
            p->used = true;
            p->shape = *s;
            c->used++;
            c->misses++;
            *hit = false;
            return i;
        }
    }
    *hit = false;
    return -1;
}

#endif
