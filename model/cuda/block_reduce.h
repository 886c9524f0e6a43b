// Sums and maxima over one thread block of LAYER_BLOCK threads, in a fixed
// tree (shared memory, halving), so a row's result is the same on every
// run; it is not the CPU's left-to-right order, hence the layer tests'
// relative bounds. Every thread of the block must call, and gets the result.
#ifndef SHARDLAB_BLOCK_REDUCE_H
#define SHARDLAB_BLOCK_REDUCE_H

// Threads per block of the row kernels (LayerNorm, cross-entropy): a
// power of two (the tree halves it). Rows longer than it take strides.
#define LAYER_BLOCK 256

__device__ __forceinline__ float block_sum_f32(float v, float *s /* LAYER_BLOCK shared */) {
    s[threadIdx.x] = v;
    __syncthreads();
    for (unsigned w = LAYER_BLOCK / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    float r = s[0];
    __syncthreads();  // s may be reused by the caller's next reduction
    return r;
}

// The max as the CPU takes it (l > m ? l : m): a NaN is never taken.
__device__ __forceinline__ float block_max_f32(float v, float *s) {
    s[threadIdx.x] = v;
    __syncthreads();
    for (unsigned w = LAYER_BLOCK / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) {
            float o = s[threadIdx.x + w];
            s[threadIdx.x] = o > s[threadIdx.x] ? o : s[threadIdx.x];
        }
        __syncthreads();
    }
    float r = s[0];
    __syncthreads();
    return r;
}

#endif
