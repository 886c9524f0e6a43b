/* Counter-based random numbers: a value is a pure function of (seed, stream,
 * index), so there is no hidden generator state to save for a bit-exact
 * resume, and any rank can draw the numbers of any element range. */
#ifndef SHARDLAB_RNG_H
#define SHARDLAB_RNG_H

#include <stdint.h>

/* SplitMix64's finaliser: a bijective 64-bit mixer with good avalanche. */
static inline uint64_t rng_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rng_u64(uint64_t seed, uint64_t stream, uint64_t index) {
    return rng_mix64(rng_mix64(seed ^ rng_mix64(stream + 0x9e3779b97f4a7c15ull)) + index);
}

static inline uint32_t rng_u32(uint64_t seed, uint64_t stream, uint64_t index) {
    return (uint32_t)(rng_u64(seed, stream, index) >> 32);
}

/* Uniform in [0, 1) with 24 random bits. */
static inline float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return (float)(rng_u32(seed, stream, index) >> 8) * (1.0f / 16777216.0f);
}

/* Streams keep independent uses of one seed apart. */
enum rng_stream {
    RNG_STREAM_INIT = 1,       /* parameter initialisation */
    RNG_STREAM_ROUNDING = 2,   /* stochastic rounding of bf16 params */
    RNG_STREAM_SHUFFLE = 3,    /* batch order */
    RNG_STREAM_SAMPLE = 4      /* text generation */
};

#endif
