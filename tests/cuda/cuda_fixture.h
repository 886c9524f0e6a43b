/* Shared by the CUDA tests: skip a test, with the reason, where this
 * machine has no GPU (the reason comes from the device selector, so tests
 * and `--device cuda` say the same). Header-only: each test is one program. */
#ifndef SHARDLAB_TEST_CUDA_FIXTURE_H
#define SHARDLAB_TEST_CUDA_FIXTURE_H

#include <stdio.h>

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

#endif
