/* The block-wise 8-bit codec's pieces that every 8-bit update rule runs
 * per 256-element block (optim/blockwise8.c; Dettmers et al. 2021): the
 * block's gradients in fp32, its states dequantized and quantized, its
 * maximum, the bf16 params written back; and the whole update of a rule
 * with one state (sgd8bit, lion8bit), which differ only in their fp32 step.
 * Private to optim/. */
#ifndef SHARDLAB_BLOCKWISE8_H
#define SHARDLAB_BLOCKWISE8_H

#include "optim.h"

/* One block's gradients into fp32, times the clipping scale. */
void blockwise8_load_grad(const void *grad, enum dtype dt, size_t base, size_t len, float gs, float *g);
/* The updated fp32 weights w[base, base + len) into the bf16 params, if any. */
void blockwise8_write_params(const struct param_writeback *out, size_t base, size_t len, const float *w);
/* Codes for x[i] / absmax; absmax 0: every code zero_code. sign_fix: a
 * signed state's code keeps x's sign (bitsandbytes), moving one code
 * toward x's side. ix NULL: the binary search. */
void blockwise8_quantize(const float *map, const struct qmap_index *ix, float absmax, const float *x, size_t len,
                         bool sign_fix, uint8_t zero_code, uint8_t *q);
void blockwise8_dequantize(const float *map, const struct qmap_index *ix, float absmax, const uint8_t *q, size_t len,
                           float *x);

/* A one-state rule's fp32 step of one block: s holds the dequantized
 * state and becomes the new one, w is updated, g the scaled gradient. */
typedef void (*blockwise8_step)(const void *consts, size_t len, float *w, float *s, const float *g);

/* The whole update of a one-state 8-bit rule over n elements: per block,
 * the gradient, the state dequantized, `step`, the new absmax, the codes
 * (signed map, sign fix) and the params. OpenMP splits the blocks. */
void blockwise8_update_one_state(size_t n, float *w, uint8_t *q, float *absmax, const float *map,
                                 const struct qmap_index *ix, const void *grad, enum dtype grad_dtype,
                                 float grad_scale, const struct param_writeback *out, blockwise8_step step,
                                 const void *consts);

#endif
