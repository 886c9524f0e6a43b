// The bf16 data path's embedding on device memory (include/layers.h:
// embedding_rows_forward_bf16, embedding_rows_backward_bf16; the CPU's
// forms in model/cpu/encoder.c). --gpu_path v2 only; compiled, not run on
// a GPU (docs/GPU.md). The forward widens its rows (exact). The backward
// is bucketed by (token, channel group) without atomics
// (embedding_buckets.h says how and why the bits are the CPU's): keys,
// CUB's stable radix sort of the positions by key, then a block per
// (sorted index, channel group) of which only a bucket's first sums (the
// number of buckets stays on the device: no copy to the host, so the step
// can be captured as a graph). The sort is v1's (../token_sort.cuh).
#include "../cuda_check.h"
#include "../token_sort.cuh"
#include "embedding_buckets.h"
#include "../layers_cuda.h"

namespace {

constexpr unsigned kBlock = 256;

__global__ void emb_fwd_bf16(float *out, const int32_t *inp, const bf16 *wte, int64_t v0, int64_t rows, int64_t BT,
                             int64_t C) {
    CUDA_GRID_STRIDE(i, BT * C) {
        int64_t r = (int64_t)inp[i / C] - v0;
        out[i] = r >= 0 && r < rows ? v2_widen(wte[r * C + i % C]) : 0.0f;  // 0: another rank's row
    }
}

// Block (i, g): if sorted index i starts a bucket, channels g EMB_GROUP ..
// of its row, a thread each; every other block returns at once.
__global__ void emb_bucket_bwd(float *dwte, const bf16 *dout, const int32_t *key, const int32_t *pos, int64_t rows,
                               int64_t BT, int64_t C) {
    const int64_t i0 = blockIdx.x, c = (int64_t)blockIdx.y * EMB_GROUP + threadIdx.x;
    if (c >= C || !emb_bucket_starts(key, i0, rows)) return;
    float *dst = dwte + (int64_t)key[i0] * C + c;
    *dst = emb_bucket_sum(*dst, dout, pos, i0, emb_bucket_end(key, i0, BT), C, c);
}

// dwpe[t, c] += dout[b, t, c] for b in order: a thread per (t, c).
__global__ void emb_positions_bwd(float *dwpe, const bf16 *dout, int64_t B, int64_t T, int64_t C) {
    CUDA_GRID_STRIDE(tc, T * C) {
        float s = dwpe[tc];
        for (int64_t b = 0; b < B; b++) s += v2_widen(dout[b * T * C + tc]);
        dwpe[tc] = s;
    }
}

void bucketed_dwte(float *dwte, const bf16 *dout, const int32_t *inp, int64_t v0, int64_t rows, int64_t BT,
                   int64_t C) {
    const char *what = "embedding_rows_backward_bf16 (buckets)";
    token_sort s = token_sort_open(inp, v0, rows, BT, what);
    const dim3 grid((unsigned)BT, (unsigned)((C + EMB_GROUP - 1) / EMB_GROUP));
    emb_bucket_bwd<<<grid, EMB_GROUP>>>(dwte, dout, s.key_s, s.pos_s, rows, BT, C);
    token_sort_close(s, what);
}

}  // namespace

extern "C" {

void embedding_rows_forward_bf16_cuda(float *out, const int32_t *inp, const bf16 *wte, int64_t v0, int64_t rows,
                                      int64_t BT, int64_t C, struct exec_ctx *fc) {
    (void)fc;  // no FLOPs (layers.h)
    if (BT * C == 0) return;
    emb_fwd_bf16<<<cuda_blocks(BT * C, kBlock), kBlock>>>(out, inp, wte, v0, rows, BT, C);
    cuda_done("embedding_rows_forward_bf16");
}

void embedding_rows_backward_bf16_cuda(float *dwte, float *dwpe, const bf16 *dout, const int32_t *inp, int64_t v0,
                                       int64_t rows, int64_t B, int64_t T, int64_t C, struct exec_ctx *fc) {
    (void)fc;
    if (B * T * C == 0) return;
    // CUB's item count and the keys are int; the grid's y a channel group
    if (B * T > INT32_MAX || rows >= INT32_MAX || (C + EMB_GROUP - 1) / EMB_GROUP > 65535) {
        fprintf(stderr, "error: embedding_rows_backward_bf16: B T %lld tokens, a slice of %lld rows or C %lld past "
                        "the buckets' int range\n", (long long)(B * T), (long long)rows, (long long)C);
        exit(EXIT_FAILURE);
    }
    if (rows > 0) bucketed_dwte(dwte, dout, inp, v0, rows, B * T, C);
    emb_positions_bwd<<<cuda_blocks(T * C, kBlock), kBlock>>>(dwpe, dout, B, T, C);
    cuda_done("embedding_rows_backward_bf16");
}

}  // extern "C"
