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
/* The layer GEMMs with fc->onednn's context (include/onednn_gemms.h,
 * model/cpu/matmul_onednn.c): out = inp . W^T (+ bias); dinp = dout . W,
 * dweight += dout^T . inp, dbias += the column sums of the rounded dout.
 * An operand given as fp32 is rounded here (into the context's scratch),
 * one given as bf16 is used as it is (the model's saved activation or
 * activation gradient, the engine's bf16 params). An output (out, dinp)
 * is fp32, or bf16 (its act_out dtype): the primitive's destination is then
 * bf16, with the bias (if any) added in the primitive in fp32 before its
 * one rounding. oneDNN's sizes are 64-bit: no slices. FLOPs and time as
 * gemm_counted's (fc->gemm, fc->gemm_seconds), N*OC to fc->other per
 * bias. Declared here, beside the host table that holds them, so that the
 * oneDNN context's header needs no layer types. */
LAYER_OP_TYPE(matmul_forward_mixed) matmul_forward_onednn;
LAYER_OP_TYPE(matmul_backward_mixed) matmul_backward_onednn;

#endif
