/* The embedding backward's buckets on the bf16 data path (issue 24,
 * Deliver 2; --gpu_path v2 only, compiled, not run on a GPU; docs/GPU.md).
 * dwte[token] sums the gradient rows of every position holding that token.
 * Buckets make that a reduction without atomics: the positions sorted by
 * their key (the token's row in this rank's vocabulary slice) with a
 * stable sort, so each token's positions stay in position order, and one
 * thread block per (bucket, group of EMB_GROUP channels), a thread a
 * channel, adding its bucket's rows in that order onto dwte's value. That
 * is the CPU's order (model/cpu/encoder.c: a serial loop over the
 * positions), so dwte is embedding_rows_backward_bf16_cpu's bits; dwpe
 * likewise (one thread per (t, c), b in order).
 *
 * This header is the logic both sides share (V2_HD: plain C on the host):
 * the key, where a bucket starts and ends, a bucket's sum for one channel,
 * and the host's table (a stable counting sort), which is exactly what the
 * device's stable radix sort gives (a stable sort's output is unique).
 * tests/test_embedding_buckets.c checks the table and replays the sums
 * against the CPU kernel; tests/cuda/test_embedding_bf16_cuda.c the
 * device's. */
#ifndef SHARDLAB_V2_EMBEDDING_BUCKETS_H
#define SHARDLAB_V2_EMBEDDING_BUCKETS_H

#include <stdint.h>

#include "../token_keys.h"
#include "bf16_lanes.h"

/* Channels one block of the backward sums: one a thread. */
#define EMB_GROUP 128

/* Whether sorted index i starts a bucket: a key below rows that differs
 * from the one before. */
V2_HD int emb_bucket_starts(const int32_t *key, int64_t i, int64_t rows) {
    return key[i] != rows && (i == 0 || key[i - 1] != key[i]);
}

/* One past the bucket that starts at sorted index i (BT sorted keys). */
V2_HD int64_t emb_bucket_end(const int32_t *key, int64_t i, int64_t BT) {
    int64_t e = i + 1;
    while (e < BT && key[e] == key[i]) e++;
    return e;
}

/* Channel c of a bucket, sorted indices [i0, i1): acc (dwte's value) plus
 * each position's widened gradient, in position order. */
V2_HD float emb_bucket_sum(float acc, const bf16 *dout, const int32_t *pos, int64_t i0, int64_t i1, int64_t C,
                           int64_t c) {
    for (int64_t i = i0; i < i1; i++) acc += v2_widen(dout[(int64_t)pos[i] * C + c]);
    return acc;
}

#ifndef __CUDACC__
/* The host's table of BT positions (inp their tokens): key[i], pos[i] the
 * i-th in key order, positions ascending within a key. count: rows + 2
 * int64 of scratch. A counting sort, stable by construction. */
static inline void emb_bucket_table(const int32_t *inp, int64_t BT, int64_t v0, int64_t rows, int32_t *key,
                                    int32_t *pos, int64_t *count) {
    for (int64_t k = 0; k < rows + 2; k++) count[k] = 0;
    for (int64_t i = 0; i < BT; i++) count[token_key(inp[i], v0, rows) + 1]++;
    for (int64_t k = 1; k < rows + 2; k++) count[k] += count[k - 1]; /* count[k]: key k's first slot */
    for (int64_t i = 0; i < BT; i++) {
        int32_t k = token_key(inp[i], v0, rows);
        int64_t at = count[k]++;
        key[at] = k;
        pos[at] = (int32_t)i;
    }
}
#endif

#endif
