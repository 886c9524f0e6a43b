/* The sort key of a token position for the embedding backwards
 * (token_sort.cuh on the device; model/cuda/v2/embedding_buckets.h's host
 * replay): its token's row in this rank's vocabulary slice [v0, v0 +
 * rows), or `rows` for another rank's token (sorted past every row), and
 * the low bits a radix sort must look at. Plain C on the host,
 * __host__ __device__ under nvcc. */
#ifndef SHARDLAB_CUDA_TOKEN_KEYS_H
#define SHARDLAB_CUDA_TOKEN_KEYS_H

#include <stdint.h>

#ifdef __CUDACC__
#define TOKEN_KEYS_HD static inline __host__ __device__
#else
#define TOKEN_KEYS_HD static inline
#endif

TOKEN_KEYS_HD int32_t token_key(int32_t token, int64_t v0, int64_t rows) {
    int64_t r = (int64_t)token - v0;
    return r >= 0 && r < rows ? (int32_t)r : (int32_t)rows;
}

/* Enough bits for keys 0..rows (2^bits > rows), at most 31 (int32 keys). */
TOKEN_KEYS_HD int token_key_bits(int64_t rows) {
    int bits = 1;
    while (bits < 31 && ((int64_t)1 << bits) <= rows) bits++;
    return bits;
}

#endif
