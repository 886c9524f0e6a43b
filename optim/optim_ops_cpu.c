/* The host's table of the update rules and the 8-bit codec
 * (optim/optim_ops.h): the X_cpu forms of optim/{adamw,sgd,lion,adamw8bit,
 * sgd8bit,lion8bit,adamw8bit_state,adafactor}.c, each with its op's type. */
#include "optim_ops.h"

const struct optim_ops optim_ops_cpu = {
#define OPTIM_CPU_FORM(op) .op = op##_cpu,
    OPTIM_RULES(OPTIM_CPU_FORM) OPTIM_SPACE_OPS(OPTIM_CPU_FORM)
#undef OPTIM_CPU_FORM
};
