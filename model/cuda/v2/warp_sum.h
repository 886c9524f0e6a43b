// The device side of tests/device_replays.h's v2_warp_sum_tree: a warp's butterfly,
// every lane adding its partner's value to its own at offsets 16..1, so
// every lane ends with the host replay's bits.
#ifndef SHARDLAB_V2_WARP_SUM_H
#define SHARDLAB_V2_WARP_SUM_H

#include "bf16_lanes.h"

__device__ __forceinline__ float v2_warp_sum(float v) {
    for (int o = V2_WARP / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Warps of the row kernels' blocks: a row a warp.
#define V2_ROW_WARPS 8

#endif
