// Token and position embeddings on the device (layers.h; model/cpu/encoder.c).
// The forwards are elementwise: one fp32 add or a copy, the CPU's bits.
// The backwards are a deterministic reduction without atomics: each
// thread owns one channel c and walks the B*T positions in order, adding
// into dwte[token, c] and dwpe[t, c] exactly as the CPU's serial loop
// does, so the gradients are the CPU's bits and the same on every run.
// Its parallelism is only C threads; a sorted, segmented reduction over
// the tokens is the faster form, for the speed step (docs/GPU.md).
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
    rows_bwd<<<cuda_blocks(C, kBlock), kBlock>>>(dwte, dwpe, dout, inp, v0, rows < 0 ? 0 : rows, B * T, T, C);
    cuda_done("embedding_rows_backward");
}

}  // extern "C"
