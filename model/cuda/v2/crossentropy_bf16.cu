// Cross-entropy on bf16 logits, dlogits in place (crossentropy_bf16.h:
// the math, the order and the bounds). --gpu_path v2 only; compiled, not
// run on a GPU.
#include "../block_reduce.h"
#include "../cuda_check.h"
#include "../kernel_context.h"
#include "crossentropy_bf16.h"

static_assert(V2_CE_THREADS == LAYER_BLOCK, "the host replay's tree is block_reduce.h's");

// A block a row, grid-stride over the rows. The target's logit is read
// before the first tree's barrier, every write after the second's.
__global__ void __launch_bounds__(V2_CE_THREADS)
    crossentropy_v2_rows(bf16 *logits, float *losses, const int32_t *targets, int64_t N, int64_t V, int64_t Vp,
                         float dloss) {
    __shared__ float s[LAYER_BLOCK];
    const int t = threadIdx.x;
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
        bf16 *l = logits + i * Vp;
        const int64_t target = targets[i];
        const float tl = v2_widen(l[target]);
        const float maxv = block_max_f32(ce_lane_max(l, V, t), s);
        const float sum = block_sum_f32(ce_lane_sum(l, V, maxv, t), s);
        if (dloss != 0.0f) ce_lane_write(l, V, Vp, maxv, dloss / sum, target, dloss, t);
        if (t == 0) losses[i] = logf(sum) + maxv - tl;
    }
}

// As many blocks as fit on the GPU at once (no large shared memory: several
// a SM), not one a row: each loops over its rows. A property of the device
// and the kernel, so asked once and kept in the run's kernel context.
static int64_t ce_grid(struct kernel_context *kc) {
    if (kc && kc->ce_v2_grid > 0) return kc->ce_v2_grid;
    int dev = 0, sms = 0, per_sm = 0;
    cuda_check(cudaGetDevice(&dev), "crossentropy_v2: device");
    cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "crossentropy_v2: SMs");
    cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, crossentropy_v2_rows, V2_CE_THREADS, 0),
               "crossentropy_v2: occupancy");
    int64_t grid = (int64_t)sms * (per_sm > 0 ? per_sm : 1);
    if (kc) kc->ce_v2_grid = grid;
    return grid;
}

void crossentropy_v2(struct kernel_context *kc, bf16 *logits, float *losses, const int32_t *targets, int64_t N,
                     int64_t V, int64_t Vp, float dloss) {
    if (N <= 0) return;
    int64_t grid = ce_grid(kc);
    crossentropy_v2_rows<<<(unsigned)(grid < N ? grid : N), V2_CE_THREADS>>>(logits, losses, targets, N, V, Vp, dloss);
    cuda_done("crossentropy_v2");
}
