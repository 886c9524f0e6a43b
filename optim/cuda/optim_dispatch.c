/* include/optim.h's update rules and 8-bit codec in the CUDA build: each
 * call runs where its buffers live, so --device cpu keeps the CPU build's
 * results and device memory takes the CUDA kernels (optim_cuda.h). Buffers
 * of one call in both spaces are a caller bug, reported by the function's
 * name (exit non-zero), as model/cuda/layers_dispatch.c does. A NULL
 * pointer (no bf16 params) has no say, nor do the hyperparameters, the maps,
 * the search indexes and the flop_counter (host memory always). n == 0
 * touches nothing: the CPU's path counts its zero FLOPs, whatever the
 * pointers (one past an end, say). The updates are timed into the
 * counter's kernel profile (include/counters.h). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "optim_cuda.h"

/* model/cuda/pointer_space.c's question, asked here again: optim/ and
 * model/ are siblings and may not use each other (tests/check_deps.sh). */
static bool on_device(const void *p) {
    struct cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* no device, or not a CUDA pointer: host memory */
        return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static bool on_device_all(const char *op, const void *const *p, size_t n) {
    size_t dev = 0, host = 0;
    for (size_t i = 0; i < n; i++) {
        if (!p[i]) continue;
        if (on_device(p[i])) dev++;
        else host++;
    }
    if (dev && host) {
        fprintf(stderr, "error: %s: %zu of its buffers are in device memory and %zu in host memory (one space per "
                        "call)\n", op, dev, host);
        exit(EXIT_FAILURE);
    }
    return dev > 0;
}

/* ON_DEVICE("name", p, q, ...): whether every non-NULL pointer is device memory. */
#define PTRS(...) ((const void *const[]){__VA_ARGS__})
#define ON_DEVICE(op, ...) on_device_all(op, PTRS(__VA_ARGS__), sizeof PTRS(__VA_ARGS__) / sizeof(const void *))

void adamw_update(const struct adamw_hparams *h, size_t n, float *w, float *m, float *v, const void *grad,
                  enum dtype grad_dtype, const struct param_writeback *out, struct flop_counter *fc) {
    double t0 = kernel_clock(); /* the kernels return with their work done */
    if (n && ON_DEVICE("adamw_update", w, m, v, grad, out->params))
        cuda_adamw_update(h, n, w, m, v, grad, grad_dtype, out, fc);
    else cpu_adamw_update(h, n, w, m, v, grad, grad_dtype, out, fc);
    kernel_profile_add(fc, KERNEL_OPTIMIZER, t0);
}

void sgd_update(const struct sgd_hparams *h, size_t n, float *w, float *buf, const void *grad, enum dtype grad_dtype,
                const struct param_writeback *out, struct flop_counter *fc) {
    double t0 = kernel_clock(); /* the kernels return with their work done */
    if (n && ON_DEVICE("sgd_update", w, buf, grad, out->params))
        cuda_sgd_update(h, n, w, buf, grad, grad_dtype, out, fc);
    else cpu_sgd_update(h, n, w, buf, grad, grad_dtype, out, fc);
    kernel_profile_add(fc, KERNEL_OPTIMIZER, t0);
}

void adamw8bit_update(const struct adamw_hparams *h, size_t n, float *w, uint8_t *q1, uint8_t *q2, float *absmax1,
                      float *absmax2, const float *map_signed, const float *map_unsigned,
                      const struct qmap_index *ix_signed, const struct qmap_index *ix_unsigned, const void *grad,
                      enum dtype grad_dtype, const struct param_writeback *out, struct flop_counter *fc) {
    double t0 = kernel_clock(); /* the kernels return with their work done */
    if (n && ON_DEVICE("adamw8bit_update", w, q1, q2, absmax1, absmax2, grad, out->params))
        cuda_adamw8bit_update(h, n, w, q1, q2, absmax1, absmax2, map_signed, map_unsigned, grad, grad_dtype, out, fc);
    else
        cpu_adamw8bit_update(h, n, w, q1, q2, absmax1, absmax2, map_signed, map_unsigned, ix_signed, ix_unsigned,
                             grad, grad_dtype, out, fc);
    kernel_profile_add(fc, KERNEL_OPTIMIZER, t0);
}

/* The codec runs where the 8-bit states live. Its fp32 side may be host
 * memory when they are on the device (checkpoints stage units through host
 * buffers: train/state.c); with the states on the host it must be too. */
static bool states_on_device(const char *op, const uint8_t *q, const float *absmax, const float *fp32) {
    bool dev = ON_DEVICE(op, q, absmax);
    if (!dev && on_device(fp32)) {
        fprintf(stderr, "error: %s: the 8-bit states are in host memory and the fp32 values in device memory\n", op);
        exit(EXIT_FAILURE);
    }
    return dev;
}

void adamw8bit_dequantize(const float map[QMAP_SIZE], const uint8_t *q, const float *absmax, size_t n, float *out) {
    if (n && states_on_device("adamw8bit_dequantize", q, absmax, out))
        cuda_adamw8bit_dequantize(map, q, absmax, n, out, on_device(out));
    else cpu_adamw8bit_dequantize(map, q, absmax, n, out);
}

void adamw8bit_quantize(const float map[QMAP_SIZE], const struct qmap_index *ix, const float *x, size_t n, uint8_t *q,
                        float *absmax) {
    if (n && states_on_device("adamw8bit_quantize", q, absmax, x))
        cuda_adamw8bit_quantize(map, x, on_device(x), n, q, absmax);
    else cpu_adamw8bit_quantize(map, ix, x, n, q, absmax);
}
