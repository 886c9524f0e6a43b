// Adafactor's per-piece kernels on device memory (include/optim.h;
// optim/adafactor.c is the reference). Each sum the CPU adds in element
// order is added here in that order too, one thread per sum: a row's G^2 +
// eps1 over its columns, a column's over its rows, sum(C) over the columns;
// so R, C, v, the update, w, m and the bf16 params are the CPU's bits. The
// one exception is the update's squares (the clipping RMS), a sum over a
// whole piece in double: a fixed tree in one block here (deterministic, not
// the CPU's order; relatively within 2 n 2^-53 of it, every term >= 0).
#include "optim_device.h"

namespace {

constexpr unsigned kSquaresThreads = 1024;  // the one block of adafactor_squares_kernel (a power of two)

// run_at's row and column of piece element k (c0: the piece's first
// element in the moment's coordinates).
__device__ __forceinline__ void dev_row_col(size_t c0, size_t m, size_t k, size_t *r, size_t *j) {
    const size_t p = c0 + k;
    *r = p / m;
    *j = p % m;
}

// G^2 + eps1 of piece element k.
__device__ __forceinline__ float dev_square(const void *grad, int grad_bf16, size_t k, float gs, float eps1) {
    const float g = dev_grad(grad, grad_bf16, k, gs);
    return g * g + eps1;
}

// One thread per row the piece touches: rows[r] += its elements, by column.
__global__ void adafactor_row_sums_kernel(size_t n, const void *grad, int grad_bf16, float gs, float eps1, size_t c0,
                                          size_t m, size_t r_first, size_t r_count, float *rows) {
    OPTIM_GRID_STRIDE(i, r_count) {
        const size_t r = r_first + i, lo = r * m > c0 ? r * m - c0 : 0;
        const size_t hi = (r + 1) * m - c0 < n ? (r + 1) * m - c0 : n;
        float row = rows[r];
        for (size_t k = lo; k < hi; k++) row += dev_square(grad, grad_bf16, k, gs, eps1);
        rows[r] = row;
    }
}

// One thread per column: cols[j] += its elements in the piece, by row.
__global__ void adafactor_col_sums_kernel(size_t n, const void *grad, int grad_bf16, float gs, float eps1, size_t c0,
                                          size_t m, size_t r_first, size_t r_count, float *cols) {
    OPTIM_GRID_STRIDE(j, m) {
        float col = cols[j];
        for (size_t r = r_first; r < r_first + r_count; r++) {
            const size_t p = r * m + j;
            if (p >= c0 && p - c0 < n) col += dev_square(grad, grad_bf16, p - c0, gs, eps1);
        }
        cols[j] = col;
    }
}

__global__ void adafactor_ema_kernel(size_t n, float *stat, const float *sums, float beta2t) {
    OPTIM_GRID_STRIDE(i, n) stat[i] = beta2t * stat[i] + (1.0f - beta2t) * sums[i];
}

__global__ void adafactor_vector_ema_kernel(size_t n, float *v, const void *grad, int grad_bf16, float gs, float eps1,
                                            float beta2t) {
    OPTIM_GRID_STRIDE(k, n) v[k] = beta2t * v[k] + (1.0f - beta2t) * dev_square(grad, grad_bf16, k, gs, eps1);
}

// One thread: adafactor_total_cpu's loop.
__global__ void adafactor_total_kernel(size_t n, const float *src, float *dst, int accumulate) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    float sum = accumulate ? *dst : 0.0f;
    for (size_t i = 0; i < n; i++) sum += src[i];
    *dst = sum;
}

// V of piece element k: (R_r / sum C) C_j, the row's share first (update_run).
__device__ __forceinline__ float dev_moment(const cuda_k_adafactor_moment &s, size_t k) {
    if (s.v) return s.v[k];
    size_t r, j;
    dev_row_col(s.c0, (size_t)s.ncols, k, &r, &j);
    const float share = s.rows[r] / *s.col_total;
    return share * s.cols[j];
}

__device__ __forceinline__ float dev_update(const cuda_k_adafactor_moment &s, const void *grad, int grad_bf16,
                                            size_t k, float gs) {
    return dev_grad(grad, grad_bf16, k, gs) / sqrtf(dev_moment(s, k));
}

__global__ void adafactor_moment_kernel(size_t n, const cuda_k_adafactor_moment s, float *out) {
    OPTIM_GRID_STRIDE(k, n) out[k] = dev_moment(s, k);
}

// One block: each thread's strided sum of U^2 in double, then a fixed tree.
__global__ void adafactor_squares_kernel(size_t n, const void *grad, int grad_bf16, float gs,
                                         const cuda_k_adafactor_moment s, double *sum) {
    __shared__ double part[kSquaresThreads];
    double acc = 0.0;
    for (size_t k = threadIdx.x; k < n; k += kSquaresThreads) {
        const float u = dev_update(s, grad, grad_bf16, k, gs);
        acc += (double)u * u;
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned half = kSquaresThreads / 2; half; half >>= 1) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) *sum += part[0];
}

// adafactor_apply_cpu's element: U clipped, the first moment, the decayed step.
__global__ void adafactor_apply_kernel(const cuda_k_adafactor_consts c, size_t n, float *w, float *m,
                                       const void *grad, int grad_bf16, const cuda_k_adafactor_moment s,
                                       const cuda_k_writeback out) {
    OPTIM_GRID_STRIDE(k, n) {
        float step = dev_update(s, grad, grad_bf16, k, c.grad_scale) * c.clip_scale;
        if (m) step = m[k] = c.b1 * m[k] + (1.0f - c.b1) * step;
        const float wk = w[k] * c.decay - c.lr * step;
        w[k] = wk;
        dev_write_param(out, k, wk);
    }
}

}  // namespace

extern "C" int cuda_k_adafactor_square_sums(size_t n, const void *grad, int grad_bf16, float grad_scale, float eps1,
                                            size_t c0, int ncols, float *rows, float *cols) {
    const size_t m = (size_t)ncols, r_first = c0 / m, r_count = (c0 + n - 1) / m - r_first + 1;
    adafactor_row_sums_kernel<<<optim_blocks(r_count), OPTIM_K_BLOCK>>>(n, grad, grad_bf16, grad_scale, eps1, c0, m,
                                                                        r_first, r_count, rows);
    const int err = (int)cudaGetLastError();
    if (err) return err;
    adafactor_col_sums_kernel<<<optim_blocks(m), OPTIM_K_BLOCK>>>(n, grad, grad_bf16, grad_scale, eps1, c0, m, r_first,
                                                                  r_count, cols);
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_adafactor_ema(size_t n, float *stat, const float *sums, float beta2t) {
    adafactor_ema_kernel<<<optim_blocks(n), OPTIM_K_BLOCK>>>(n, stat, sums, beta2t);
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_adafactor_vector_ema(size_t n, float *v, const void *grad, int grad_bf16, float grad_scale,
                                           float eps1, float beta2t) {
    adafactor_vector_ema_kernel<<<optim_blocks(n), OPTIM_K_BLOCK>>>(n, v, grad, grad_bf16, grad_scale, eps1, beta2t);
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_adafactor_total(size_t n, const float *src, float *dst, int accumulate) {
    adafactor_total_kernel<<<1, 1>>>(n, src, dst, accumulate);
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_adafactor_moment_values(size_t n, const struct cuda_k_adafactor_moment *s, float *out) {
    adafactor_moment_kernel<<<optim_blocks(n), OPTIM_K_BLOCK>>>(n, *s, out);
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_adafactor_squares(size_t n, const void *grad, int grad_bf16, float grad_scale,
                                        const struct cuda_k_adafactor_moment *s, double *sum) {
    adafactor_squares_kernel<<<1, kSquaresThreads>>>(n, grad, grad_bf16, grad_scale, *s, sum);
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_adafactor_apply(const struct cuda_k_adafactor_consts *c, size_t n, float *w, float *m,
                                      const void *grad, int grad_bf16, const struct cuda_k_adafactor_moment *s,
                                      const struct cuda_k_writeback *out) {
    adafactor_apply_kernel<<<optim_blocks(n), OPTIM_K_BLOCK>>>(*c, n, w, m, grad, grad_bf16, *s, *out);
    return (int)cudaGetLastError();
}
