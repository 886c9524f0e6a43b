// model/cpu/fastmath.h on the device, operation for operation, so the
// exponentials of the softmax and the tanh of GELU give the CPU's bits.
// The files that use it are compiled with --fmad=false (the Makefile), as
// gcc -std=c17 does not contract a*b+c into an FMA either.
#ifndef SHARDLAB_FASTMATH_DEVICE_H
#define SHARDLAB_FASTMATH_DEVICE_H

#include <stdint.h>

__device__ __forceinline__ float dev_fast_expf(float in) {
    float x = in > -87.0f ? in : -87.0f;  // a NaN clamps too (see fastmath.h)
    x = x < 88.0f ? x : 88.0f;
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    const float shifter = 12582912.0f;
    float n = (x * log2e + shifter) - shifter;
    float r = x - n * ln2_hi - n * ln2_lo;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    float scale = __int_as_float(((int32_t)n + 127) << 23);
    return in == in ? p * scale : in;
}

__device__ __forceinline__ float dev_fast_tanhf(float x) { return 1.0f - 2.0f / (1.0f + dev_fast_expf(2.0f * x)); }

#endif
