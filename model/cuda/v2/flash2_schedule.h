/* The tile schedule of --gpu_path v2's FlashAttention-2 kernels (Dao 2023;
 * issue 24, Deliver 3; flash2_forward.cu, flash2_backward.cu): which
 * (query block, key tile) pairs and which warps do work under the causal
 * mask, the scratch layout of the backward's per-key-block dQ partials,
 * the shared-memory layouts, and the tensor-core FLOPs the kernels issue.
 * Plain C, `__host__ __device__` under nvcc, so that the kernels and the
 * CPU test (tests/test_flash2_schedule.c, against a brute-force
 * enumeration) use the same functions.
 *
 * Forward: a thread block takes FLASH2_FWD_ROWS = 128 query rows, 8 warps
 * of 16 rows; it walks key tiles of FLASH2_FWD_KEYS = 64 from the first to
 * the last one holding a key <= its last row. A warp whose rows all
 * precede a tile's first key (causal: it would only add zeros) skips that
 * tile; so does a warp whose rows all lie at or past T.
 * Backward: a block takes FLASH2_BWD_KEYS = 128 keys, 8 warps of 16 keys,
 * and walks query tiles of FLASH2_BWD_QUERIES = 64 from the one holding
 * its first key to the last; a warp whose keys all follow a tile's last
 * (valid) query skips that tile's four per-warp products. Masks inside a
 * tile: key j counts for query i iff j <= i (the causal mask) and i < T
 * (the query tail; a key j >= T is then excluded too, as j <= i < T). */
#ifndef SHARDLAB_FLASH2_SCHEDULE_H
#define SHARDLAB_FLASH2_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define FLASH2_HD __host__ __device__ __forceinline__
#else
#define FLASH2_HD static inline
#endif

enum {
    FLASH2_WARPS = 8,         /* warps per block, forward and backward */
    FLASH2_WARP_ROWS = 16,    /* the m of mma m16n8k16: a warp's rows */
    FLASH2_FWD_ROWS = 128,    /* query rows per forward block */
    FLASH2_FWD_KEYS = 64,     /* keys per forward tile */
    FLASH2_BWD_KEYS = 128,    /* keys per backward block */
    FLASH2_BWD_QUERIES = 64,  /* query rows per backward tile */
    FLASH2_PAD = 8,           /* bf16 of padding per shared row (flash_attention_mma.h's Ld) */
    FLASH2_ALIGN_FLOATS = 4,  /* scratch segments start on 16 bytes (cp.async) */
};

FLASH2_HD int64_t flash2_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
FLASH2_HD int64_t flash2_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- forward ---- */

/* Query blocks of one (batch, head). */
FLASH2_HD int64_t flash2_fwd_blocks(int64_t T) { return flash2_ceil_div(T, FLASH2_FWD_ROWS); }

/* Key tiles query block qb walks: those whose first key is <= the block's
 * last valid row. */
FLASH2_HD int64_t flash2_fwd_key_tiles(int64_t qb, int64_t T) {
    const int64_t last = flash2_min((qb + 1) * FLASH2_FWD_ROWS, T) - 1;
    return last / FLASH2_FWD_KEYS + 1;
}

/* Whether warp w of query block qb multiplies key tile kt: some valid row
 * of its 16 is at or past the tile's first key. */
FLASH2_HD int flash2_fwd_warp_active(int64_t qb, int w, int64_t kt, int64_t T) {
    const int64_t r0 = qb * FLASH2_FWD_ROWS + (int64_t)w * FLASH2_WARP_ROWS;
    if (r0 >= T) return 0;
    const int64_t last = flash2_min(r0 + FLASH2_WARP_ROWS, T) - 1;
    return last >= kt * FLASH2_FWD_KEYS;
}

/* Whether that (warp, tile) needs the causal mask: some key of the tile
 * follows the warp's first row. */
FLASH2_HD int flash2_fwd_needs_mask(int64_t qb, int w, int64_t kt) {
    const int64_t r0 = qb * FLASH2_FWD_ROWS + (int64_t)w * FLASH2_WARP_ROWS;
    return (kt + 1) * FLASH2_FWD_KEYS - 1 > r0;
}

/* ---- backward ---- */

/* Key blocks of one (batch, head). */
FLASH2_HD int64_t flash2_bwd_blocks(int64_t T) { return flash2_ceil_div(T, FLASH2_BWD_KEYS); }

/* Query tiles key block kb walks: first .. count - 1 (the tile holding its
 * first key up to the last tile). */
FLASH2_HD int64_t flash2_bwd_first_tile(int64_t kb) { return kb * FLASH2_BWD_KEYS / FLASH2_BWD_QUERIES; }
FLASH2_HD int64_t flash2_bwd_tiles(int64_t T) { return flash2_ceil_div(T, FLASH2_BWD_QUERIES); }

/* Whether warp w of key block kb does query tile qt's four products: its
 * first key is a valid key and precedes (or is) the tile's last valid query. */
FLASH2_HD int flash2_bwd_warp_active(int64_t kb, int w, int64_t qt, int64_t T) {
    const int64_t k0 = kb * FLASH2_BWD_KEYS + (int64_t)w * FLASH2_WARP_ROWS;
    if (k0 >= T) return 0;
    const int64_t last = flash2_min((qt + 1) * FLASH2_BWD_QUERIES, T) - 1;
    return last >= k0;
}

/* The dQ partials: key block kb writes dS K for its queries kb*128 .. T-1
 * (the earlier ones see none of its keys), packed one key block after the
 * other per (batch, head): rows flash2_dq_row(kb, i, T) of
 * flash2_dq_rows(T), hs floats each. Query i's dQ is the sum over kb = 0
 * .. i / 128 in that order (no atomics: the same bits every run). */
FLASH2_HD int64_t flash2_dq_first_row(int64_t kb, int64_t T) {
    return kb * T - FLASH2_BWD_KEYS * (kb * (kb - 1) / 2);
}
FLASH2_HD int64_t flash2_dq_rows(int64_t T) { return flash2_dq_first_row(flash2_bwd_blocks(T), T); }
FLASH2_HD int64_t flash2_dq_row(int64_t kb, int64_t i, int64_t T) {
    return flash2_dq_first_row(kb, T) + i - kb * FLASH2_BWD_KEYS;
}

/* The backward's device scratch, in floats, segments on 16 bytes:
 * D = rowsum(dout * out) (B NH T), dout rounded to bf16 (B T C bf16, the
 * products' operand, loaded with cp.async), the dQ partials (B NH
 * flash2_dq_rows(T) hs). */
struct flash2_scratch {
    size_t D, dout16, dq, total;
};
FLASH2_HD size_t flash2_align(size_t n) { return (n + FLASH2_ALIGN_FLOATS - 1) / FLASH2_ALIGN_FLOATS * FLASH2_ALIGN_FLOATS; }
FLASH2_HD struct flash2_scratch flash2_scratch_layout(int64_t B, int64_t T, int64_t C, int64_t NH) {
    struct flash2_scratch s;
    const size_t heads = (size_t)B * (size_t)NH, hs = (size_t)(C / NH);
    s.D = 0;
    s.dout16 = flash2_align((size_t)(heads * (size_t)T));
    s.dq = s.dout16 + flash2_align(((size_t)B * (size_t)T * (size_t)C + 1) / 2);
    s.total = s.dq + heads * (size_t)flash2_dq_rows(T) * hs;
    return s;
}

/* ---- shared memory, bytes (bf16 rows of hs + FLASH2_PAD) ---- */

FLASH2_HD size_t flash2_row_bytes(int hs) { return (size_t)(hs + FLASH2_PAD) * 2; }
/* Forward: Q (128 rows), then K and V twice (64 rows each, the tile being
 * multiplied and the one loading). */
FLASH2_HD size_t flash2_fwd_smem_k(int hs) { return FLASH2_FWD_ROWS * flash2_row_bytes(hs); }
FLASH2_HD size_t flash2_fwd_smem_v(int hs) { return flash2_fwd_smem_k(hs) + 2 * FLASH2_FWD_KEYS * flash2_row_bytes(hs); }
FLASH2_HD size_t flash2_fwd_smem(int hs) { return flash2_fwd_smem_v(hs) + 2 * FLASH2_FWD_KEYS * flash2_row_bytes(hs); }
/* Backward: K, V (128 rows each), Q and dO twice (64 rows each), dS^T
 * (128 keys x 64 queries, bf16, padded), lse and D twice (64 floats each). */
FLASH2_HD size_t flash2_bwd_smem_v(int hs) { return FLASH2_BWD_KEYS * flash2_row_bytes(hs); }
FLASH2_HD size_t flash2_bwd_smem_q(int hs) { return 2 * FLASH2_BWD_KEYS * flash2_row_bytes(hs); }
FLASH2_HD size_t flash2_bwd_smem_do(int hs) { return flash2_bwd_smem_q(hs) + 2 * FLASH2_BWD_QUERIES * flash2_row_bytes(hs); }
FLASH2_HD size_t flash2_bwd_smem_ds(int hs) { return flash2_bwd_smem_do(hs) + 2 * FLASH2_BWD_QUERIES * flash2_row_bytes(hs); }
FLASH2_HD size_t flash2_bwd_smem_lse(int hs) { return flash2_bwd_smem_ds(hs) + FLASH2_BWD_KEYS * flash2_row_bytes(FLASH2_BWD_QUERIES); }
FLASH2_HD size_t flash2_bwd_smem_d(int hs) { return flash2_bwd_smem_lse(hs) + 2 * FLASH2_BWD_QUERIES * sizeof(float); }
FLASH2_HD size_t flash2_bwd_smem(int hs) { return flash2_bwd_smem_d(hs) + 2 * FLASH2_BWD_QUERIES * sizeof(float); }

/* ---- the work issued, per (batch, head) ---- */

/* Forward: the active (warp, key tile) pairs, each 16 x 64 scores and two
 * 16 x 64 x hs products (S = Q K^T, O += P V). */
FLASH2_HD double flash2_fwd_warp_tiles(int64_t T) {
    double units = 0;
    for (int64_t qb = 0; qb < flash2_fwd_blocks(T); qb++)
        for (int64_t kt = 0; kt < flash2_fwd_key_tiles(qb, T); kt++)
            for (int w = 0; w < FLASH2_WARPS; w++) units += flash2_fwd_warp_active(qb, w, kt, T);
    return units;
}
FLASH2_HD double flash2_fwd_mma_flops(int64_t T, int64_t hs) {
    return flash2_fwd_warp_tiles(T) * 2 * (2.0 * FLASH2_WARP_ROWS * FLASH2_FWD_KEYS * (double)hs);
}

/* Backward: the active (warp, query tile) pairs, each 16 x 64 scores and
 * four 16 x 64 x hs products (S^T, dP^T, dV, dK); and the (key block,
 * query tile) steps, each one 64 x 128 x hs product (dQ). */
FLASH2_HD double flash2_bwd_warp_tiles(int64_t T) {
    double units = 0;
    for (int64_t kb = 0; kb < flash2_bwd_blocks(T); kb++)
        for (int64_t qt = flash2_bwd_first_tile(kb); qt < flash2_bwd_tiles(T); qt++)
            for (int w = 0; w < FLASH2_WARPS; w++) units += flash2_bwd_warp_active(kb, w, qt, T);
    return units;
}
FLASH2_HD double flash2_bwd_steps(int64_t T) {
    double steps = 0;
    for (int64_t kb = 0; kb < flash2_bwd_blocks(T); kb++) steps += (double)(flash2_bwd_tiles(T) - flash2_bwd_first_tile(kb));
    return steps;
}
FLASH2_HD double flash2_bwd_mma_flops(int64_t T, int64_t hs) {
    const double warp_product = 2.0 * FLASH2_WARP_ROWS * FLASH2_BWD_QUERIES * (double)hs;
    return flash2_bwd_warp_tiles(T) * 4 * warp_product +
           flash2_bwd_steps(T) * 2.0 * FLASH2_BWD_QUERIES * FLASH2_BWD_KEYS * (double)hs;
}

#endif
