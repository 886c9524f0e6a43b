/* DDP and the ZeRO stages as the rows of one table (Rajbhandari et al.
 * 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
 * Models", sections 5.1-5.3, whose names P_os, P_g and P_p the columns
 * keep; DDP: Li et al. 2020). A row says what a stage shards over the N
 * data-parallel ranks and how a step moves the parameters and the
 * gradients; parallel/zero/ runs the rows, train/theory/ writes their
 * formulas (16 Psi / N at stage 3), and nothing else asks which stage it
 * is:
 *
 *   row     shards          gradients, during a step        parameters, during a step
 *   DDP     nothing         all_reduce in buckets as the    resident: every rank updates all
 *                           last micro-batch's backward
 *                           ends (Li et al. 2020)
 *   ZeRO-1  P_os            summed in place, reduce_scatter all_gather once, after the update
 *                           once before the update
 *   ZeRO-2  P_os + P_g      each unit's reduce_scatter as   all_gather once, after the update
 *                           its backward ends
 *   ZeRO-3  P_os+P_g+P_p    each unit's reduce_scatter as   each unit's all_gather before its
 *                           its backward ends               forward and its backward, release
 *                                                           after
 *
 * P_os: the optimizer states and the fp32 master copy; P_g: the
 * gradients; P_p: the parameters. */
#ifndef SHARDLAB_ZERO_STAGES_H
#define SHARDLAB_ZERO_STAGES_H

#include <stdbool.h>

enum { ZERO_NUM_STAGES = 4 };

/* How a row reduces the gradients over the data-parallel ranks. */
enum grad_reduction {
    GRADS_ALL_REDUCE_BUCKETS,   /* DDP: whole, every rank keeps the sum */
    GRADS_REDUCE_SCATTER_STEP,  /* ZeRO-1: full gradients, one reduce_scatter per step */
    GRADS_REDUCE_SCATTER_UNIT,  /* ZeRO-2, 3: each unit's, as its backward ends */
};

/* How a row brings every rank the parameters it computes with. */
enum param_gathering {
    PARAMS_RESIDENT,            /* DDP: every rank holds and updates all of them */
    PARAMS_ALL_GATHER_UPDATED,  /* ZeRO-1, 2: each rank updates its slice, then all_gather */
    PARAMS_ALL_GATHER_IN_USE,   /* ZeRO-3: all_gather a unit before use, release after */
};

struct zero_stage {
    const char *name;
    bool shards_optimizer;      /* P_os: optimizer states and the fp32 master copy */
    bool shards_grads;          /* P_g */
    bool shards_params;         /* P_p */
    enum grad_reduction grads;
    enum param_gathering params;
};

/* Row s of the table (0 <= s < ZERO_NUM_STAGES: train/config/config_keys.c checks --zero). */
static inline const struct zero_stage *zero_stage_row(int s) {
    static const struct zero_stage rows[ZERO_NUM_STAGES] = {
        {"DDP", false, false, false, GRADS_ALL_REDUCE_BUCKETS, PARAMS_RESIDENT},
        {"ZeRO-1", true, false, false, GRADS_REDUCE_SCATTER_STEP, PARAMS_ALL_GATHER_UPDATED},
        {"ZeRO-2", true, true, false, GRADS_REDUCE_SCATTER_UNIT, PARAMS_ALL_GATHER_UPDATED},
        {"ZeRO-3", true, true, true, GRADS_REDUCE_SCATTER_UNIT, PARAMS_ALL_GATHER_IN_USE},
    };
    return &rows[s];
}

#endif
