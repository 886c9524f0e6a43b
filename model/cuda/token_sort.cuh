// The positions of a batch sorted by their token's row in a vocabulary
// slice, for the embedding backwards that sum each row's positions in
// position order without atomics (encoder.cu's embedding_rows_backward,
// v2/embedding_bf16.cu's bucketed bf16 form) by token_keys.h's key;
// CUB's radix sort is stable, so equal keys keep position order. The buffers come from CUDA's stream-ordered pool
// (cudaMallocAsync), which the tracker does not see: the memory table's
// "device untracked" row holds them. C++ (CUB) only.
#ifndef SHARDLAB_CUDA_TOKEN_SORT_CUH
#define SHARDLAB_CUDA_TOKEN_SORT_CUH

#include <cub/device/device_radix_sort.cuh>
#include <stdint.h>

#include "cuda_check.h"
#include "token_keys.h"

static __global__ void token_sort_keys(int32_t *key, int32_t *pos, const int32_t *inp, int64_t v0, int64_t rows,
                                int64_t BT) {
    CUDA_GRID_STRIDE(i, BT) {
        key[i] = token_key(inp[i], v0, rows);
        pos[i] = (int32_t)i;
    }
}

// BT positions' sorted keys and positions (key_s, pos_s), queued on the
// default stream; token_sort_close frees them, queued after their readers.
struct token_sort {
    int32_t *buf;  // key, pos, sorted key, sorted pos
    void *temp;    // CUB's
    const int32_t *key_s, *pos_s;
};

inline token_sort token_sort_open(const int32_t *inp, int64_t v0, int64_t rows, int64_t BT, const char *what) {
    constexpr unsigned kBlock = 256;
    token_sort s{nullptr, nullptr, nullptr, nullptr};
    cuda_check(cudaMallocAsync((void **)&s.buf, 4 * (size_t)BT * sizeof *s.buf, 0), what);
    int32_t *key = s.buf, *pos = s.buf + BT, *key_s = s.buf + 2 * BT, *pos_s = s.buf + 3 * BT;
    token_sort_keys<<<cuda_blocks(BT, kBlock), kBlock>>>(key, pos, inp, v0, rows, BT);
    size_t temp_bytes = 0;
    const int n = (int)BT, bits = token_key_bits(rows);
    cuda_check(cub::DeviceRadixSort::SortPairs(s.temp, temp_bytes, key, key_s, pos, pos_s, n, 0, bits), what);
    cuda_check(cudaMallocAsync(&s.temp, temp_bytes, 0), what);
    cuda_check(cub::DeviceRadixSort::SortPairs(s.temp, temp_bytes, key, key_s, pos, pos_s, n, 0, bits), what);
    s.key_s = key_s;
    s.pos_s = pos_s;
    return s;
}

inline void token_sort_close(token_sort s, const char *what) {
    cuda_check(cudaFreeAsync(s.temp, 0), what);
    cuda_check(cudaFreeAsync(s.buf, 0), what);
}

#endif
