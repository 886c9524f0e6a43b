/* The nearest code of an 8-bit map by brute force in double, ties to the
 * even index: what the codec's searches must give (tests of the 8-bit
 * rules). */
#ifndef SHARDLAB_TESTS_QMAP_BRUTE_H
#define SHARDLAB_TESTS_QMAP_BRUTE_H

#include <math.h>
#include <stdint.h>

#include "optim.h"

static inline uint8_t nearest_brute(const float *map, float x) {
    int best = 0;
    double bd = INFINITY;
    for (int j = 0; j < QMAP_SIZE; j++) {
        double d = fabs((double)map[j] - x);
        if (d < bd || (d == bd && j % 2 == 0)) best = j, bd = d;
    }
    return (uint8_t)best;
}

#endif
