/* The CUDA kernels behind the device build's update rules (adamw.cu,
 * sgd.cu, lion.cu, adamw8bit.cu, onestate8bit.cu, adafactor.cu), with plain C types so that nvcc's C++ and the C
 * host code (optim_device.c) share one set of prototypes. Every pointer is
 * device memory; structs travel by value into the kernels. Each launcher
 * runs on the legacy default stream and returns the launch's cudaError_t
 * as an int (0: launched); optim_device.c waits and checks.
 *
 * The CPU's bits, by design: every scalar the CPU computes once per call
 * (the bias corrections with powf, the decay factor, the zero codes) is
 * computed on the host by the same C expression and passed in; per element
 * the kernels do the CPU's IEEE operations in the CPU's order, compiled
 * with --fmad=false (gcc -std=c17 contracts no FMA either), with IEEE
 * sqrtf and division (nvcc's defaults without fast math); the bf16
 * rounding and the stochastic-rounding noise are dtype.h's and rng.h's
 * integer code ported op for op (optim_device.h). */
#ifndef SHARDLAB_OPTIM_KERNELS_H
#define SHARDLAB_OPTIM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { OPTIM_K_BLOCK = 256 }; /* threads per block; the 8-bit kernels: one block per 256-element block */

/* Where the updated fp32 weights go besides w (optim.h's param_writeback). */
struct cuda_k_writeback {
    uint16_t *params;      /* NULL: none */
    int stochastic;        /* 0: nearest-even */
    uint64_t seed;
    uint64_t noise_index;  /* noise of element i: rng_u32(seed, RNG_STREAM_ROUNDING, noise_index + i) */
};

/* AdamW's per-call constants, as optim/adamw.c computes them. */
struct cuda_k_adam_consts {
    float b1, b2, eps, step_size, isb, decay, grad_scale;
};

struct cuda_k_sgd_consts {
    float lr, momentum, weight_decay, grad_scale;
    int nesterov, first_step;
};

/* Lion's per-call constants (optim/lion.c; decay = lion_decay). */
struct cuda_k_lion_consts {
    float lr, b1, b2, decay, grad_scale;
};

struct cuda_k_map {
    float code[256]; /* QMAP_SIZE */
};

/* grad_bf16: grad holds bf16 values, else fp32. */
int cuda_k_adamw(const struct cuda_k_adam_consts *k, size_t n, float *w, float *m, float *v, const void *grad, int grad_bf16,
                 const struct cuda_k_writeback *out);
int cuda_k_sgd(const struct cuda_k_sgd_consts *k, size_t n, float *w, float *buf, const void *grad, int grad_bf16,
               const struct cuda_k_writeback *out);
/* zero_s / zero_u: qmap_nearest(map, 0) of each map, the codes of a block
 * whose absmax is 0. */
int cuda_k_adamw8bit(const struct cuda_k_adam_consts *k, size_t n, float *w, uint8_t *q1, uint8_t *q2, float *absmax1,
                     float *absmax2, const struct cuda_k_map *map_s, const struct cuda_k_map *map_u, uint8_t zero_s,
                     uint8_t zero_u, const void *grad, int grad_bf16, const struct cuda_k_writeback *out);
int cuda_k_lion(const struct cuda_k_lion_consts *k, size_t n, float *w, float *m, const void *grad, int grad_bf16,
                const struct cuda_k_writeback *out);
/* The one-state 8-bit rules (onestate8bit.cu): the state's codes q and
 * absmax per block, the signed map, zero: qmap_nearest(map, 0). */
int cuda_k_sgd8bit(const struct cuda_k_sgd_consts *k, size_t n, float *w, uint8_t *q, float *absmax,
                   const struct cuda_k_map *map, uint8_t zero, const void *grad, int grad_bf16,
                   const struct cuda_k_writeback *out);
int cuda_k_lion8bit(const struct cuda_k_lion_consts *k, size_t n, float *w, uint8_t *q, float *absmax,
                    const struct cuda_k_map *map, uint8_t zero, const void *grad, int grad_bf16,
                    const struct cuda_k_writeback *out);
/* Adafactor (adafactor.cu): include/optim.h's adafactor_moment with its
 * pointers in device memory (col_total too), and the step's constants:
 * decay = adafactor_decay_factor, clip_scale as the caller computed it. */
struct cuda_k_adafactor_moment {
    const float *rows, *cols, *col_total, *v;
    size_t c0;
    int ncols;
};
struct cuda_k_adafactor_consts {
    float lr, b1, decay, grad_scale, clip_scale;
};
int cuda_k_adafactor_square_sums(size_t n, const void *grad, int grad_bf16, float grad_scale, float eps1, size_t c0,
                                 int ncols, float *rows, float *cols);
int cuda_k_adafactor_ema(size_t n, float *stat, const float *sums, float beta2t);
int cuda_k_adafactor_vector_ema(size_t n, float *v, const void *grad, int grad_bf16, float grad_scale, float eps1,
                                float beta2t);
int cuda_k_adafactor_total(size_t n, const float *src, float *dst, int accumulate);
int cuda_k_adafactor_moment_values(size_t n, const struct cuda_k_adafactor_moment *s, float *out);
/* *sum (device) += the piece's U^2 in double (one block, a fixed tree) */
int cuda_k_adafactor_squares(size_t n, const void *grad, int grad_bf16, float grad_scale,
                             const struct cuda_k_adafactor_moment *s, double *sum);
int cuda_k_adafactor_apply(const struct cuda_k_adafactor_consts *c, size_t n, float *w, float *m, const void *grad,
                           int grad_bf16, const struct cuda_k_adafactor_moment *s, const struct cuda_k_writeback *out);
int cuda_k_dequantize8(const struct cuda_k_map *map, const uint8_t *q, const float *absmax, size_t n, float *out);
int cuda_k_quantize8(const struct cuda_k_map *map, const float *x, size_t n, uint8_t *q, float *absmax);

#ifdef __cplusplus
}
#endif

#endif
