/* The CUDA build's two implementations of include/optim.h's update rules
 * and 8-bit state codec, under their own names; the optim.h names
 * themselves (optim_dispatch.c) pick one by where the buffers live.
 *   cpu_*   optim/{adamw,sgd,adamw8bit,adamw8bit_state}.c compiled under
 *           these names (optim_rename.h): host memory
 *   cuda_*  optim_device.c with the kernels of adamw.cu, sgd.cu and
 *           adamw8bit.cu: w, the states, grad and the bf16 params in
 *           device memory. The hyperparameters, the flop_counter, the
 *           8-bit maps and search indexes are host memory (the maps travel
 *           to the kernels by value; the CUDA quantizer needs no index).
 *           The codec's fp32 side (out of dequantize, x of quantize) may
 *           be in either space: checkpoints stage through host memory.
 * Semantics are optim.h's; the CUDA versions aim at the CPU's bits
 * (optim_kernels.h says how). Each cuda_* call returns when its results are
 * in place (it synchronizes); a CUDA failure prints the function and CUDA's
 * reason and exits non-zero. */
#ifndef SHARDLAB_OPTIM_CUDA_H
#define SHARDLAB_OPTIM_CUDA_H

#include "optim.h"

void cpu_adamw_update(const struct adamw_hparams *h, size_t n, float *w, float *m, float *v, const void *grad,
                      enum dtype grad_dtype, const struct param_writeback *out, struct flop_counter *fc);
void cpu_sgd_update(const struct sgd_hparams *h, size_t n, float *w, float *buf, const void *grad,
                    enum dtype grad_dtype, const struct param_writeback *out, struct flop_counter *fc);
void cpu_adamw8bit_update(const struct adamw_hparams *h, size_t n, float *w, uint8_t *q1, uint8_t *q2,
                          float *absmax1, float *absmax2, const float *map_signed, const float *map_unsigned,
                          const struct qmap_index *ix_signed, const struct qmap_index *ix_unsigned, const void *grad,
                          enum dtype grad_dtype, const struct param_writeback *out, struct flop_counter *fc);
void cpu_adamw8bit_dequantize(const float map[QMAP_SIZE], const uint8_t *q, const float *absmax, size_t n,
                              float *out);
void cpu_adamw8bit_quantize(const float map[QMAP_SIZE], const struct qmap_index *ix, const float *x, size_t n,
                            uint8_t *q, float *absmax);

void cuda_adamw_update(const struct adamw_hparams *h, size_t n, float *w, float *m, float *v, const void *grad,
                       enum dtype grad_dtype, const struct param_writeback *out, struct flop_counter *fc);
void cuda_sgd_update(const struct sgd_hparams *h, size_t n, float *w, float *buf, const void *grad,
                     enum dtype grad_dtype, const struct param_writeback *out, struct flop_counter *fc);
void cuda_adamw8bit_update(const struct adamw_hparams *h, size_t n, float *w, uint8_t *q1, uint8_t *q2,
                           float *absmax1, float *absmax2, const float *map_signed, const float *map_unsigned,
                           const void *grad, enum dtype grad_dtype, const struct param_writeback *out,
                           struct flop_counter *fc);
/* q and absmax in device memory; out / x where out_on_device / x_on_device
 * say (host memory goes through a temporary device buffer). */
void cuda_adamw8bit_dequantize(const float map[QMAP_SIZE], const uint8_t *q, const float *absmax, size_t n,
                               float *out, bool out_on_device);
void cuda_adamw8bit_quantize(const float map[QMAP_SIZE], const float *x, bool x_on_device, size_t n, uint8_t *q,
                             float *absmax);

#endif
