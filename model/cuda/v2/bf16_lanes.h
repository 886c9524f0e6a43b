/* The per-element and per-lane arithmetic of --gpu_path v2's bf16 kernels
 * (issue 24, Deliver 2), written once for the device and the host: each
 * kernel's work is split into what one lane (a thread of a warp or block)
 * does with its strided elements, written as V2_HD functions here and in
 * the kernels' headers, and the fixed trees that combine the lanes. On the
 * device the trees are shuffles or shared memory; on the host the tests
 * replay them in the same order (tests/device_replays.h's *_tree), so a C
 * test can run a kernel's exact arithmetic on the CPU (tests/test_bf16_rows.c: against
 * the CPU bf16 kernels) and a CUDA test can ask the device for the same
 * bits (tests/cuda/test_bf16_rows_cuda.c).
 *
 * Conversions and exponentials are the CPU's: bf16 widened exactly,
 * rounded to nearest even (dtype.h's f32_to_bf16, __float2bfloat16_rn on
 * the device: the v1 kernels rely on the same equality), fastmath.h's
 * exp (fastmath_device.h on the device, operation for operation). The .cu
 * files are compiled with --fmad=false (the Makefile), as gcc -std=c17
 * does not contract a*b+c either. Plain C and CUDA C++ alike. */
#ifndef SHARDLAB_V2_BF16_LANES_H
#define SHARDLAB_V2_BF16_LANES_H

#include <math.h>
#include <stdint.h>

#include "../../../include/dtype.h"
#include "../../cpu/fastmath.h"

#ifdef __CUDACC__
#include <cuda_bf16.h>

#include "../fastmath_device.h"
#define V2_HD static inline __host__ __device__
#else
#define V2_HD static inline
#endif

/* Lanes of a warp: the row kernels give a row to a warp. */
#define V2_WARP 32

V2_HD float v2_widen(bf16 h) {
#ifdef __CUDA_ARCH__
    return __uint_as_float((unsigned)h << 16);
#else
    return bf16_to_f32(h);
#endif
}

V2_HD bf16 v2_round(float v) {
#ifdef __CUDA_ARCH__
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
#else
    return f32_to_bf16(v);
#endif
}

V2_HD float v2_expf(float x) {
#ifdef __CUDA_ARCH__
    return dev_fast_expf(x);
#else
    return fast_expf(x);
#endif
}

/* fastmath.h's tanh on either side. */
V2_HD float v2_tanhf(float x) { return 1.0f - 2.0f / (1.0f + v2_expf(2.0f * x)); }

/* Element i of an operand given as fp32 (f) or bf16 (h, f NULL): the
 * kernels take either for an input the data flow may hand them in both. */
V2_HD float v2_load(const float *f, const bf16 *h, int64_t i) { return f ? f[i] : v2_widen(h[i]); }

#endif
