/* The update rules' and the 8-bit codec's backends behind one table
 * (private to optim/), as model/layer_ops.h puts the layer ops: two lists
 * of the ops, a struct optim_ops of function pointers made from them, one
 * const table per backend:
 *   optim_ops_cpu   host memory, every build (optim/optim_ops_cpu.c)
 *   optim_ops_cuda  device memory, the CUDA build only
 *                   (optim/cuda/optim_ops_cuda.c)
 * optim_backend (optim/optim_dispatch.c) is the one place a call's backend
 * is chosen, by its memory space. Each member has its op's own type, so a
 * backend's forms cannot drift from include/optim.h's contract. */
#ifndef SHARDLAB_OPTIM_OPS_H
#define SHARDLAB_OPTIM_OPS_H

#include "optim.h"

/* The update rules: the space travels in fc (fc->space), so a form's type
 * is the public name's. */
#define OPTIM_RULES(X)                                                                                \
    X(adamw_update) X(sgd_update) X(sgd8bit_update) X(lion_update) X(lion8bit_update) X(adamw8bit_update) \
    X(adafactor_apply)

/* Adafactor's statistics and the codec: the public name takes the space
 * first, and a form's type is the public name's less it, which is the host
 * form's (X_cpu, include/optim.h). */
#define OPTIM_SPACE_OPS(X)                                                                                   \
    X(adafactor_square_sums) X(adafactor_ema) X(adafactor_vector_ema) X(adafactor_total)                   \
    X(adafactor_moment_values) X(adafactor_update_squares) X(adamw8bit_dequantize) X(adamw8bit_quantize)

struct optim_ops {
#define OPTIM_RULE_MEMBER(op) __typeof__(op) *op;
    OPTIM_RULES(OPTIM_RULE_MEMBER)
#undef OPTIM_RULE_MEMBER
#define OPTIM_SPACE_MEMBER(op) __typeof__(op##_cpu) *op;
    OPTIM_SPACE_OPS(OPTIM_SPACE_MEMBER)
#undef OPTIM_SPACE_MEMBER
};

extern const struct optim_ops optim_ops_cpu;
#ifdef SHARDLAB_CUDA
extern const struct optim_ops optim_ops_cuda;
#endif

/* The backend that runs `op` on memory of `space`. A device call in the
 * CPU build stops the run, naming op (include/backend.h). */
const struct optim_ops *optim_backend(enum mem_space space, const char *op);

#endif
