/* The CPU's forms of include/layers.h's ops (model/cpu/): host memory,
 * every build. Each has its op's type (model/layer_ops.h: LAYER_OP_TYPE),
 * so its contract is the op's; model/cpu/layer_ops_cpu.c puts them in the
 * host's tables. Declared here for that table and for the tests that hold
 * a kernel against another (nothing else calls them: the model calls the
 * ops). */
#ifndef SHARDLAB_MODEL_CPU_LAYERS_CPU_H
#define SHARDLAB_MODEL_CPU_LAYERS_CPU_H

#include "../layer_ops.h"

LAYER_BACKEND_FORMS(cpu)
/* matmul_forward/backward's OpenBLAS form in one slice: the tests'
 * reference GEMM. */
LAYER_OP_TYPE(matmul_forward) matmul_forward_cpu;
LAYER_OP_TYPE(matmul_backward) matmul_backward_cpu;

#endif
