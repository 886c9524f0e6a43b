// The plain attention's bf16 forms on the device (include/layers.h:
// attention_forward_bf16, attention_backward_bf16), which
// model/dispatch.c calls on device memory under --gpu_path v2 with
// --attention plain. A first step, stated plainly in docs/GPU.md: the bf16
// inputs are widened into pool temporaries and v1's fp32 kernels
// (model/cuda/attention.cu) run on them; the outputs are narrowed into
// their stores. So the values are v1's on the widened inputs, rounded
// once where stored (the CPU's bf16 forms are "widen, run the fp32 kernel,
// narrow" bit for bit, so the device's stand to the CPU's as v1's fp32
// attention does: tests/cuda/test_attention_cuda.c's bounds), and the
// B NH T^2 probabilities pass through fp32 once more each way: no faster
// than v1. Compiled, not run on a GPU.
// The conversions are bufops.h's device forms (model/cuda/bufops_kernels.cu).
#include "../cuda_check.h"
#include "../../bufops_ops.h"
#include "../layers_cuda.h"

namespace {

float *pool_floats(int64_t n, const char *what) {
    float *p = nullptr;
    cuda_check(cudaMallocAsync((void **)&p, (size_t)(n > 0 ? n : 1) * sizeof *p, 0), what);
    return p;
}

void pool_free(float *p, const char *what) { cuda_check(cudaFreeAsync(p, 0), what); }

float *widened(const bf16 *x, int64_t n, const char *what) {
    float *p = pool_floats(n, what);
    buf_widen_cuda(p, x, (size_t)n);
    return p;
}

// Where v1's kernel writes an act_out: its fp32 buffer, or a pool one
// (a bf16 out, or none).
bool has_f32(struct act_out o) { return o.data && !act_out_is_bf16(o); }
float *fp32_of(struct act_out o, int64_t n, const char *what) {
    return has_f32(o) ? act_out_as_f32(o, what) : pool_floats(n, what);
}

// The fp32 result f into its act_out: narrowed into a bf16 one (f then
// freed), rounded in place where bf16_values asks, or left as it is.
void store(struct act_out o, float *f, int64_t n, const char *what) {
    if (has_f32(o)) {
        if (o.bf16_values) buf_round_bf16_cuda(act_out_as_f32(o, what), (size_t)n);
        return;
    }
    if (o.data) buf_narrow_cuda(act_out_as_bf16(o, what), f, (size_t)n);
    pool_free(f, what);
}

}  // namespace

extern "C" {

void attention_forward_bf16_cuda(struct act_out out, struct act_out att, const bf16 *qkv, float *scratch, int64_t B,
                                 int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc) {
    (void)scratch; /* the CPU's per-thread tiles; v1's kernel takes none in the forward */
    const char *what = "attention_forward_bf16";
    const int64_t n_out = B * T * C, n_att = B * NH * T * T;
    float *q = widened(qkv, 3 * n_out, what), *o = fp32_of(out, n_out, what), *p = fp32_of(att, n_att, what);
    attention_forward_cuda(o, p, q, B, T, C, NH, fc);
    store(out, o, n_out, what);
    store(att, p, n_att, what); /* neither pointer set: not stored, the pool copy freed */
    pool_free(q, what);
}

void attention_backward_bf16_cuda(bf16 *dqkv, const float *dout, const bf16 *qkv, struct operand att, float *scratch,
                                  int64_t B, int64_t T, int64_t C, int64_t NH, struct exec_ctx *fc) {
    const char *what = "attention_backward_bf16";
    const int64_t n_qkv = 3 * B * T * C, n_att = B * NH * T * T;
    float *q = widened(qkv, n_qkv, what), *d = pool_floats(n_qkv, what);
    float *p = operand_is_bf16(att) ? widened(operand_as_bf16(att, what), n_att, what) : nullptr;
    /* scratch: attention_bf16_scratch floats, at least v1's attention_backward_scratch */
    attention_backward_cuda(d, dout, q, p ? p : operand_as_f32(att, what), scratch, B, T, C, NH, fc);
    store(act_out_bf16(dqkv, MEM_DEVICE), d, n_qkv, what);
    if (p) pool_free(p, what);
    pool_free(q, what);
}

}  // extern "C"
