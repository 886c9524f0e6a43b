/* The one wall clock for spans measured in seconds: CLOCK_MONOTONIC (never
 * steps back when the system time is set). */
#ifndef SHARDLAB_CLOCK_H
#define SHARDLAB_CLOCK_H

#include <time.h>

static inline double monotonic_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#endif
