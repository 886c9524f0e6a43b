/* SwiGLU's elementwise part (Shazeer 2020, "GLU Variants Improve
 * Transformer"), as LLaMA 3's MLP uses it (llm.c's train_llama3.py):
 * out = silu(gate) * up, where up = x c_fc and gate = x c_fc2 are the two
 * column GEMMs (matmul_*), and silu(g) = g sigmoid(g) (Swish with beta 1,
 * Ramachandran et al. 2017). All in fp32; each kernel written once over
 * its element types (act_io.h), the bf16 forms equal "widen, fp32 kernel,
 * narrow" bit for bit (include/layers.h states their rounding points). */
#include <math.h>

#include "act_io.h"
#include "fastmath.h"
#include "layers_cpu.h"
#include "llama_layers.h"

/* The exponential is fastmath.h's (about 2 ulp, branch-free): libm's expf
 * keeps the loops scalar, and SwiGLU's were a tenth of a small LLaMA's step. */
static inline float sigmoid_of(float g) { return 1.0f / (1.0f + fast_expf(-g)); }

#define SWIGLU_FORWARD(name, OUT_T, IN_T)                                                                        \
    void name(OUT_T *out, const IN_T *up, const IN_T *gate, int64_t n, struct exec_ctx *fc) {                \
        _Pragma("omp parallel for") for (int64_t i = 0; i < n; i++) {                                            \
            float g = ACT_LD(gate, i);                                                                           \
            ACT_ST(out, i, g * sigmoid_of(g) * ACT_LD(up, i));                                                   \
        }                                                                                                        \
        fc->other += (double)SWIGLU_FLOPS_FWD * n;                                                               \
    }

SWIGLU_FORWARD(swiglu_forward_cpu, float, float)
SWIGLU_FORWARD(swiglu_forward_bf16_cpu, bf16, bf16)

/* d up = dout silu(g);  d gate = dout up silu'(g), with
 * silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))). Both overwritten; they
 * may alias up and gate (each element is read before it is written). */
#define SWIGLU_BACKWARD(name, IN_T, D_T)                                                                         \
    void name(D_T *dup, D_T *dgate, const D_T *dout, const IN_T *up, const IN_T *gate, int64_t n,                \
              struct exec_ctx *fc) {                                                                         \
        _Pragma("omp parallel for") for (int64_t i = 0; i < n; i++) {                                            \
            float g = ACT_LD(gate, i), u = ACT_LD(up, i), dy = ACT_LD(dout, i), sg = sigmoid_of(g);              \
            ACT_ST(dup, i, dy * (g * sg));                                                                       \
            ACT_ST(dgate, i, dy * u * (sg * (1.0f + g * (1.0f - sg))));                                          \
        }                                                                                                        \
        fc->other += (double)SWIGLU_FLOPS_BWD * n;                                                               \
    }

SWIGLU_BACKWARD(swiglu_backward_cpu, float, float)
SWIGLU_BACKWARD(swiglu_backward_bf16_cpu, bf16, float)
SWIGLU_BACKWARD(swiglu_backward_bf16_grads_cpu, bf16, bf16)
