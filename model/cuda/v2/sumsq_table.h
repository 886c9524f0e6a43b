/* The gradient norm's sums of squares over a rank's segments in one pass
 * (issue 24, Deliver 2; --gpu_path v2 only, docs/GPU.md): v1 asks each
 * segment's sum in its own call and copies each to the host (about 196
 * device-to-host copies a step at 124M). v2 cuts every segment into
 * chunks of at most `chunk` elements, each chunk one thread block's
 * (sumsq_segments.cu): one launch over the chunk table writes a partial
 * per chunk, a second adds each segment's partials in chunk order (so the
 * result is the same every run), and one copy brings the per-segment sums
 * to the host, where the norm's rules (tp-replicated tensors counted once,
 * the sums over dp, tp and pp) stay as they are.
 *
 * This header is the host logic, plain C shared by the kernel's file and
 * the CPU test (tests/test_sumsq_table.c): the table, and the reference of
 * the device's two-level sum in the same chunk order. */
#ifndef SHARDLAB_SUMSQ_TABLE_H
#define SHARDLAB_SUMSQ_TABLE_H

#include <stdint.h>

/* One chunk: elements [begin, end) of segment `segment`. */
struct sumsq_chunk {
    int64_t begin, end;
    int32_t segment;
};

/* Elements a chunk holds at most: 64 per thread of a 256-thread block,
 * enough that the partials stay a few thousand at 124M's 124M elements. */
#define SUMSQ_CHUNK ((int64_t)16384)

/* The chunks n[0..nseg) elements make (an empty segment none). */
static inline int64_t sumsq_chunk_count(const int64_t *n, int nseg, int64_t chunk) {
    int64_t c = 0;
    for (int s = 0; s < nseg; s++) c += (n[s] + chunk - 1) / chunk;
    return c;
}

/* Fills out (cap chunks) and first[0..nseg] (segment s's chunks are
 * first[s] .. first[s + 1] - 1); returns the chunks, or -1 when cap is
 * short or a size is negative. Chunks follow the segments' order and each
 * element's, and none crosses a segment's end. */
static inline int64_t sumsq_chunk_table(const int64_t *n, int nseg, int64_t chunk, struct sumsq_chunk *out,
                                        int64_t cap, int64_t *first) {
    int64_t c = 0;
    for (int s = 0; s < nseg; s++) {
        first[s] = c;
        if (n[s] < 0) return -1;
        for (int64_t b = 0; b < n[s]; b += chunk) {
            if (c == cap) return -1;
            out[c].segment = s;
            out[c].begin = b;
            out[c].end = b + chunk < n[s] ? b + chunk : n[s];
            c++;
        }
    }
    first[nseg] = c;
    return c;
}

/* Segment s's sum from the chunks' partials, in chunk order, in double:
 * what the second kernel does for each segment. */
static inline double sumsq_segment_total(const float *partials, const int64_t *first, int s) {
    double t = 0.0;
    for (int64_t c = first[s]; c < first[s + 1]; c++) t += (double)partials[c];
    return t;
}

/* Threads a chunk's block runs (block_reduce.h's LAYER_BLOCK). */
#define SUMSQ_THREADS 256

/* A chunk's partial exactly as sumsq_chunks_kernel computes it, for fp32
 * data (x is the segment): thread t adds the squares of elements begin + t,
 * begin + t + SUMSQ_THREADS, ... in fp32 without contraction (the kernel is
 * built with --fmad=false), then the block halves its 256 values in a
 * fixed tree. The device's partials must equal these bit for bit. */
static inline float sumsq_chunk_reference(const float *x, struct sumsq_chunk c) {
    float s[SUMSQ_THREADS];
    for (int t = 0; t < SUMSQ_THREADS; t++) {
        float acc = 0.0f;
        for (int64_t i = c.begin + t; i < c.end; i += SUMSQ_THREADS) {
            float sq = x[i] * x[i];
            acc += sq;
        }
        s[t] = acc;
    }
    for (int w = SUMSQ_THREADS / 2; w > 0; w /= 2)
        for (int t = 0; t < w; t++) s[t] += s[t + w];
    return s[0];
}

#endif
