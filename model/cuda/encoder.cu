// Token and position embeddings on the device (layers.h; model/cpu/encoder.c).
// The forwards are elementwise: one fp32 add or a copy, the CPU's bits.
// The backwards are a deterministic reduction without atomics: each
// dwte[token, c] and dwpe[t, c] adds its positions' gradients in position
// order, exactly as the CPU's serial loop does, so the gradients are the
// CPU's bits and the same on every run. encoder_backward (which does not
// know the vocabulary size) keeps the plain form, one thread per channel
// walking every position. embedding_rows_backward, the model's, first
// sorts the positions by token (CUB's radix sort is stable: equal tokens
// keep position order), then gives each run of equal tokens a block: the
// work is B T C adds whatever the vocabulary, where a block per vocabulary
// row scanning all B T token ids cost 288 ms a step at GPT-2 124M's B 32
// (Vp 50,304 blocks x 32,768 ids; the kernel table of the H100 run).
#include "cuda_check.h"
#include "layers_cuda.h"
#include "token_sort.cuh"

namespace {

constexpr unsigned kBlock = 256;

__global__ void encoder_fwd(float *out, const int32_t *inp, const float *wte, const float *wpe, int64_t BT,
                            int64_t T, int64_t C) {
    CUDA_GRID_STRIDE(i, BT * C) {
        int64_t bt = i / C, c = i % C;
        out[i] = wte[(int64_t)inp[bt] * C + c] + wpe[(bt % T) * C + c];
    }
}

__global__ void rows_fwd(float *out, const int32_t *inp, const float *wte, int64_t v0, int64_t rows, int64_t BT,
                         int64_t C) {
    CUDA_GRID_STRIDE(i, BT * C) {
        int64_t r = (int64_t)inp[i / C] - v0;
        out[i] = r >= 0 && r < rows ? wte[r * C + i % C] : 0.0f;  // 0: another rank's row
    }
}

__global__ void positions_fwd(float *out, const float *wpe, int64_t BT, int64_t T, int64_t C) {
    CUDA_GRID_STRIDE(i, BT * C) out[i] += wpe[((i / C) % T) * C + i % C];
}

// One thread per channel, positions in order (see the file's comment).
// rows < 0: every token is this rank's (encoder_backward).
__global__ void rows_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t v0, int64_t rows,
                         int64_t BT, int64_t T, int64_t C) {
    CUDA_GRID_STRIDE(c, C) {
        for (int64_t bt = 0; bt < BT; bt++) {
            float d = dout[bt * C + c];
            int64_t r = (int64_t)inp[bt] - v0;
            if (rows < 0 || (r >= 0 && r < rows)) dwte[r * C + c] += d;
            dwpe[(bt % T) * C + c] += d;
        }
    }
}

// Block i starts a run when its sorted key differs from the one before;
// that block adds the run's positions (in position order: the sort is
// stable) into the row, its threads over the channels. Other blocks return.
__global__ void runs_bwd_wte(float *dwte, const float *dout, const int32_t *key, const int32_t *pos, int64_t rows,
                             int64_t BT, int64_t C) {
    const int64_t i0 = blockIdx.x;
    const int32_t row = key[i0];
    if (row == rows || (i0 > 0 && key[i0 - 1] == row)) return;
    int64_t i1 = i0 + 1;
    while (i1 < BT && key[i1] == row) i1++;
    float *dst = dwte + (int64_t)row * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float s = dst[c];
        for (int64_t i = i0; i < i1; i++) s += dout[(int64_t)pos[i] * C + c];
        dst[c] = s;
    }
}

// dwte's part of embedding_rows_backward (see the file's comment;
// token_sort.cuh: the sort and its buffers).
void sorted_bwd_wte(float *dwte, const float *dout, const int32_t *inp, int64_t v0, int64_t rows, int64_t BT,
                    int64_t C) {
    const char *what = "embedding_rows_backward (sort)";
    token_sort s = token_sort_open(inp, v0, rows, BT, what);
    runs_bwd_wte<<<(unsigned)BT, kBlock>>>(dwte, dout, s.key_s, s.pos_s, rows, BT, C);
    token_sort_close(s, what);
}

// dwpe[t, c] += dout[b, t, c] for b in order: one thread per (t, c).
__global__ void positions_bwd(float *dwpe, const float *dout, int64_t B, int64_t T, int64_t C) {
    CUDA_GRID_STRIDE(tc, T * C) {
        float s = dwpe[tc];
        for (int64_t b = 0; b < B; b++) s += dout[b * T * C + tc];
        dwpe[tc] = s;
    }
}

}  // namespace

extern "C" {

void encoder_forward_cuda(float *out, const int32_t *inp, const float *wte, const float *wpe, int64_t B, int64_t T,
                          int64_t C) {
    if (B * T * C == 0) return;
    encoder_fwd<<<cuda_blocks(B * T * C, kBlock), kBlock>>>(out, inp, wte, wpe, B * T, T, C);
    cuda_done("encoder_forward");
}

void encoder_backward_cuda(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t B, int64_t T,
                           int64_t C) {
    if (B * T * C == 0) return;
    rows_bwd<<<cuda_blocks(C, kBlock), kBlock>>>(dwte, dwpe, dout, inp, 0, -1, B * T, T, C);
    cuda_done("encoder_backward");
}

void embedding_rows_forward_cuda(float *out, const int32_t *inp, const float *wte, int64_t v0, int64_t rows,
                                 int64_t BT, int64_t C, struct exec_ctx *fc) {
    (void)fc;  // no FLOPs (layers.h)
    if (BT * C == 0) return;
    rows_fwd<<<cuda_blocks(BT * C, kBlock), kBlock>>>(out, inp, wte, v0, rows, BT, C);
    cuda_done("embedding_rows_forward");
}

void positions_add_cuda(float *out, const float *wpe, int64_t B, int64_t T, int64_t C, struct exec_ctx *fc) {
    (void)fc;
    if (B * T * C == 0) return;
    positions_fwd<<<cuda_blocks(B * T * C, kBlock), kBlock>>>(out, wpe, B * T, T, C);
    cuda_done("positions_add");
}

void embedding_rows_backward_cuda(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t v0,
                                  int64_t rows, int64_t B, int64_t T, int64_t C, struct exec_ctx *fc) {
    (void)fc;
    if (B * T * C == 0) return;
    if (B * T > INT32_MAX || rows >= INT32_MAX) {  // CUB's item count and the keys are int
        fprintf(stderr, "error: embedding_rows_backward: B T %lld tokens or a slice of %lld rows past the sort's int "
                        "range\n", (long long)(B * T), (long long)rows);
        exit(EXIT_FAILURE);
    }
    if (rows > 0) sorted_bwd_wte(dwte, dout, inp, v0, rows, B * T, C);
    positions_bwd<<<cuda_blocks(T * C, kBlock), kBlock>>>(dwpe, dout, B, T, C);
    cuda_done("embedding_rows_backward");
}

}  // extern "C"
