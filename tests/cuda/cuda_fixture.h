/* Shared by the CUDA tests: skip a test, with the reason, where this
 * machine has no GPU (the reason comes from the device selector, so tests
 * and `--device cuda` say the same); device buffers poisoned with 0xff
 * bytes and a poisoned guard past their end, which a kernel must leave
 * alone. Header-only: each test is one program. The test includes cmocka
 * first. */
#ifndef SHARDLAB_TEST_CUDA_FIXTURE_H
#define SHARDLAB_TEST_CUDA_FIXTURE_H

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../model/cuda/cuda_device.h"

/* NULL when a GPU is present, else why not. */
static inline const char *no_device(void) {
    static char why[160];
    return cuda_device_count(why, sizeof why) > 0 ? NULL : why;
}

#define SKIP_WITHOUT_DEVICE()                                                   \
    do {                                                                        \
        const char *why_ = no_device();                                         \
        if (why_) {                                                             \
            printf("[  SKIPPED ] %s: %s\n", __func__, why_);                    \
            skip();                                                             \
        }                                                                       \
    } while (0)

enum { GUARD = 64 /* poisoned bytes past each device buffer */ };

/* bytes of 0xff, and GUARD more. */
static inline void *dev_poisoned(size_t bytes) {
    void *p = NULL;
    assert_int_equal(cudaMalloc(&p, bytes + GUARD), cudaSuccess);
    assert_int_equal(cudaMemset(p, 0xff, bytes + GUARD), cudaSuccess);
    return p;
}

/* A poisoned device buffer holding a copy of host's bytes. */
static inline void *dev_from(const void *host, size_t bytes) {
    void *p = dev_poisoned(bytes);
    if (bytes) assert_int_equal(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    return p;
}

/* The device buffer's bytes back on the host (malloc'd; the device buffer
 * freed), its guard checked. */
static inline float *back(void *dev, size_t bytes, const char *what) {
    unsigned char *h = malloc(bytes + GUARD);
    assert_non_null(h);
    assert_int_equal(cudaMemcpy(h, dev, bytes + GUARD, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = bytes; i < bytes + GUARD; i++)
        if (h[i] != 0xff) fail_msg("%s: byte %zu past the end of its %zu-byte output was written", what, i - bytes, bytes);
    cudaFree(dev);
    return (float *)(void *)h;
}

/* How far got is from want, normwise: the largest |gpu - cpu| (NaN, at the
 * first NaN element, when there is one), its element, and the scale, max
 * |cpu| but at least at_least. Each test states its bound against these. */
struct normwise {
    double worst, scale;
    size_t at;
};

static inline struct normwise normwise_diff(const float *want, const float *got, size_t n, double at_least) {
    struct normwise e = {0.0, at_least, 0};
    for (size_t i = 0; i < n; i++) e.scale = fmax(e.scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (isnan(d)) return (struct normwise){NAN, e.scale, i};
        if (d > e.worst) e.worst = d, e.at = i;
    }
    return e;
}

#endif
