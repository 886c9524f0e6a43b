// What the device forms of the bf16 data path's kernels (rows_v2.cu,
// matmul_mixed.cu) take of include/layers.h's struct act_out: bf16 or
// plain fp32 (its dtype). fp32 rounded to bf16's values as it is stored is the
// plain attention's (selective recompute's probabilities), which has no
// device form on v2 (config_check_gpu_path refuses it): reaching one here
// is a caller's bug, stopped by name. --gpu_path v2 only.
#ifndef SHARDLAB_V2_ACT_OUT_DEVICE_H
#define SHARDLAB_V2_ACT_OUT_DEVICE_H

#include <stdio.h>
#include <stdlib.h>

#include "layers.h"

static inline void v2_plain_out(struct act_out o, const char *kernel) {
    if (!o.bf16_values) return;
    fprintf(stderr, "error: %s: an fp32 output rounded to bf16's values has no device form (a caller bug)\n", kernel);
    exit(EXIT_FAILURE);
}

#endif
