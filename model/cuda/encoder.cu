// Token and position embeddings on the device (layers.h; model/cpu/encoder.c).
// The forwards are elementwise: one fp32 add or a copy, the CPU's bits.
// The backwards are a deterministic reduction without atomics: each
// thread owns one channel c and walks the B*T positions in order, adding
// into dwte[token, c] and dwpe[t, c] exactly as the CPU's serial loop
// does, so the gradients are the CPU's bits and the same on every run.
// encoder_backward (which does not know the vocabulary size) keeps that
// form, C threads only; embedding_rows_backward, the model's, gives every
// row of its slice a block and the positions their own kernel (below),
// in the same orders.
#include "cuda_check.h"
#include "layers_cuda.h"

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

// embedding_rows_backward's dwte: one block per row of this rank's slice,
// which walks the positions in order (a tile of kBlock at a time: each
// thread tests one position, then the block adds the tile's matches in
// position order, its threads over the channels). Each dwte[row, c] thus
// sums its positions in the CPU's order, the CPU's bits, with every row in
// parallel; a row no token hits only scans.
__global__ void rows_bwd_wte(float *dwte, const float *dout, const int32_t *inp, int64_t v0, int64_t BT, int64_t C) {
    __shared__ bool hit[kBlock];
    const int64_t row = blockIdx.x;
    float *dst = dwte + row * C;
    for (int64_t t0 = 0; t0 < BT; t0 += kBlock) {
        int64_t i = t0 + threadIdx.x;
        hit[threadIdx.x] = i < BT && (int64_t)inp[i] - v0 == row;
        __syncthreads();
        for (int64_t j = 0; j < kBlock && t0 + j < BT; j++)
            if (hit[j])
                for (int64_t c = threadIdx.x; c < C; c += kBlock) dst[c] += dout[(t0 + j) * C + c];
        __syncthreads();
    }
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

void cuda_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int64_t B, int64_t T,
                          int64_t C) {
    if (B * T * C == 0) return;
    encoder_fwd<<<cuda_blocks(B * T * C, kBlock), kBlock>>>(out, inp, wte, wpe, B * T, T, C);
    cuda_done("encoder_forward");
}

void cuda_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t B, int64_t T,
                           int64_t C) {
    if (B * T * C == 0) return;
    rows_bwd<<<cuda_blocks(C, kBlock), kBlock>>>(dwte, dwpe, dout, inp, 0, -1, B * T, T, C);
    cuda_done("encoder_backward");
}

void cuda_embedding_rows_forward(float *out, const int32_t *inp, const float *wte, int64_t v0, int64_t rows,
                                 int64_t BT, int64_t C) {
    if (BT * C == 0) return;
    rows_fwd<<<cuda_blocks(BT * C, kBlock), kBlock>>>(out, inp, wte, v0, rows, BT, C);
    cuda_done("embedding_rows_forward");
}

void cuda_positions_add(float *out, const float *wpe, int64_t B, int64_t T, int64_t C) {
    if (B * T * C == 0) return;
    positions_fwd<<<cuda_blocks(B * T * C, kBlock), kBlock>>>(out, wpe, B * T, T, C);
    cuda_done("positions_add");
}

void cuda_embedding_rows_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int64_t v0,
                                  int64_t rows, int64_t B, int64_t T, int64_t C) {
    if (B * T * C == 0) return;
    if (rows > 0) rows_bwd_wte<<<(unsigned)rows, kBlock>>>(dwte, dout, inp, v0, B * T, C);
    positions_bwd<<<cuda_blocks(T * C, kBlock), kBlock>>>(dwpe, dout, B, T, C);
    cuda_done("embedding_rows_backward");
}

}  // extern "C"
