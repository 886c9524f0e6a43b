// The launchers of flash attention's kernels (flash_forward.cu,
// flash_backward.cu), called by the public entry points in
// flash_attention.cu once the shape has been checked. HS is the head size
// (32, 64 or 128: each file instantiates those three); B NH, T as
// flash_attention.h's; vec says that every float pointer passed is 16-byte
// aligned (so that the kernels may load float4 and store float2).
// Each launcher returns once its kernels are queued; the caller syncs.
#ifndef SHARDLAB_FLASH_ATTENTION_KERNELS_H
#define SHARDLAB_FLASH_ATTENTION_KERNELS_H

namespace flash {

template <int HS>
void launch_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, bool vec);

// D: B NH T floats of device scratch (D = rowsum(dout * out)).
template <int HS>
void launch_backward(float *dqkv, float *D, const float *dout, const float *qkv, const float *out, const float *lse,
                     int B, int T, int NH, bool vec);

}  // namespace flash

#endif
