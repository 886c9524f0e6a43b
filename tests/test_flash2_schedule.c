/* The host logic of --gpu_path v2's FlashAttention-2 kernels
 * (model/cuda/v2/flash2_schedule.h) against brute-force enumeration over
 * every (query i, key j <= i < T) pair, for T on and off the tile sizes:
 *   forward   the pair's (query block, key tile, warp) is walked and active;
 *             every active (warp, tile) holds a causal pair (no wasted
 *             products), every walked tile has an active warp (no wasted
 *             loads), and a tile the mask is skipped on holds only pairs
 *             j <= i;
 *   backward  the same for (key block, query tile, warp);
 *   dQ        the partial rows are a bijection of the (key block, query
 *             >= its first key) pairs onto 0 .. flash2_dq_rows(T) - 1;
 *   scratch   segments on 16 bytes, disjoint, each as long as its tensor;
 *   shared    the layouts' offsets on 16 bytes (cp.async, ldmatrix),
 *             increasing, the sizes by hand, within an H100's 227 KiB;
 *   FLOPs     the issued counts by hand at T = 128, and at least the
 *             causal products everywhere.
 * The kernels themselves (flash2_forward.cu, flash2_backward.cu) are
 * compiled, not run: tests/cuda/test_flash2_cuda.c checks them on a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../model/cuda/v2/flash2_schedule.h"

static const int64_t TS[] = {1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 191, 255, 256, 257, 300, 383, 513};
enum { NT = sizeof TS / sizeof TS[0], H100_SMEM = 227 * 1024 };

static void test_forward_walks_each_causal_pair(void **state) {
    (void)state;
    for (int n = 0; n < NT; n++) {
        const int64_t T = TS[n], nqb = flash2_fwd_blocks(T), nkt = flash2_ceil_div(T, FLASH2_FWD_KEYS);
        /* pairs[(qb * nkt + kt) * W + w]: causal pairs that warp tile holds; masked: pairs j > i, i < T */
        int64_t *pairs = calloc((size_t)(nqb * nkt * FLASH2_WARPS), sizeof *pairs);
        int64_t *masked = calloc((size_t)(nqb * nkt * FLASH2_WARPS), sizeof *masked);
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < nkt * FLASH2_FWD_KEYS; j++) {
                const int64_t qb = i / FLASH2_FWD_ROWS, kt = j / FLASH2_FWD_KEYS;
                const int w = (int)(i % FLASH2_FWD_ROWS / FLASH2_WARP_ROWS);
                const int64_t u = (qb * nkt + kt) * FLASH2_WARPS + w;
                if (j <= i) {
                    assert_true(kt < flash2_fwd_key_tiles(qb, T));
                    assert_true(flash2_fwd_warp_active(qb, w, kt, T));
                    pairs[u]++;
                } else {
                    masked[u]++;
                }
            }
        for (int64_t qb = 0; qb < nqb; qb++)
            for (int64_t kt = 0; kt < nkt; kt++) {
                int any = 0;
                for (int w = 0; w < FLASH2_WARPS; w++) {
                    const int64_t u = (qb * nkt + kt) * FLASH2_WARPS + w;
                    const int walked = kt < flash2_fwd_key_tiles(qb, T), act = walked && flash2_fwd_warp_active(qb, w, kt, T);
                    assert_int_equal(act, pairs[u] > 0);
                    if (act && masked[u] > 0) assert_true(flash2_fwd_needs_mask(qb, w, kt));
                    any |= act;
                }
                assert_int_equal(any, kt < flash2_fwd_key_tiles(qb, T));
            }
        free(pairs);
        free(masked);
    }
}

static void test_backward_walks_each_causal_pair(void **state) {
    (void)state;
    for (int n = 0; n < NT; n++) {
        const int64_t T = TS[n], nkb = flash2_bwd_blocks(T), nqt = flash2_bwd_tiles(T);
        int64_t *pairs = calloc((size_t)(nkb * nqt * FLASH2_WARPS), sizeof *pairs);
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j <= i; j++) {
                const int64_t kb = j / FLASH2_BWD_KEYS, qt = i / FLASH2_BWD_QUERIES;
                const int w = (int)(j % FLASH2_BWD_KEYS / FLASH2_WARP_ROWS);
                assert_true(qt >= flash2_bwd_first_tile(kb) && qt < nqt);
                assert_true(flash2_bwd_warp_active(kb, w, qt, T));
                pairs[(kb * nqt + qt) * FLASH2_WARPS + w]++;
            }
        for (int64_t kb = 0; kb < nkb; kb++)
            for (int64_t qt = 0; qt < nqt; qt++) {
                int any = 0;
                for (int w = 0; w < FLASH2_WARPS; w++) {
                    const int walked = qt >= flash2_bwd_first_tile(kb);
                    const int act = walked && flash2_bwd_warp_active(kb, w, qt, T);
                    assert_int_equal(act, pairs[(kb * nqt + qt) * FLASH2_WARPS + w] > 0);
                    any |= act;
                }
                assert_int_equal(any, qt >= flash2_bwd_first_tile(kb));
            }
        free(pairs);
    }
}

static void test_dq_partials_are_a_bijection(void **state) {
    (void)state;
    for (int n = 0; n < NT; n++) {
        const int64_t T = TS[n], rows = flash2_dq_rows(T);
        unsigned char *seen = calloc((size_t)rows, 1);
        int64_t want = 0;
        for (int64_t kb = 0; kb < flash2_bwd_blocks(T); kb++)
            for (int64_t i = kb * FLASH2_BWD_KEYS; i < T; i++) {
                const int64_t r = flash2_dq_row(kb, i, T);
                assert_true(r >= 0 && r < rows);
                assert_int_equal(seen[r], 0);
                seen[r] = 1;
                want++;
            }
        assert_int_equal(rows, want);
        free(seen);
    }
}

static void test_scratch_layout(void **state) {
    (void)state;
    const int64_t shapes[][4] = {{1, 1, 64, 1}, {3, 17, 192, 3}, {2, 300, 256, 2}, {32, 1024, 768, 12}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3];
        const struct flash2_scratch l = flash2_scratch_layout(B, T, C, NH);
        assert_int_equal(l.D % FLASH2_ALIGN_FLOATS, 0);
        assert_int_equal(l.dout16 % FLASH2_ALIGN_FLOATS, 0);
        assert_int_equal(l.dq % FLASH2_ALIGN_FLOATS, 0);
        assert_true(l.dout16 - l.D >= (size_t)(B * NH * T));                 /* D */
        assert_true(2 * (l.dq - l.dout16) >= (size_t)(B * T * C));           /* dout as bf16 */
        assert_int_equal(l.total - l.dq, (size_t)(B * NH * flash2_dq_rows(T) * (C / NH)));
    }
    /* at T = 1024: 8 key blocks, rows 1024 + 896 + ... + 128 = 4608 = 4.5 T */
    assert_int_equal(flash2_dq_rows(1024), 4608);
}

static void test_shared_memory_layouts(void **state) {
    (void)state;
    const int hss[] = {32, 64, 128};
    for (int k = 0; k < 3; k++) {
        const int hs = hss[k];
        const size_t row = (size_t)(hs + FLASH2_PAD) * 2;
        const size_t fwd[] = {0, flash2_fwd_smem_k(hs), flash2_fwd_smem_v(hs), flash2_fwd_smem(hs)};
        const size_t bwd[] = {0,
                              flash2_bwd_smem_v(hs),
                              flash2_bwd_smem_q(hs),
                              flash2_bwd_smem_do(hs),
                              flash2_bwd_smem_ds(hs),
                              flash2_bwd_smem_lse(hs),
                              flash2_bwd_smem_d(hs),
                              flash2_bwd_smem(hs)};
        for (int i = 1; i < 4; i++) assert_true(fwd[i] > fwd[i - 1] && fwd[i] % 16 == 0);
        for (int i = 1; i < 8; i++) assert_true(bwd[i] > bwd[i - 1] && bwd[i] % 16 == 0);
        assert_int_equal(flash2_fwd_smem(hs), (128 + 4 * 64) * row);
        assert_int_equal(flash2_bwd_smem(hs), (2 * 128 + 4 * 64) * row + 128 * (64 + 8) * 2 + 4 * 64 * sizeof(float));
        assert_true(flash2_bwd_smem(hs) <= H100_SMEM);
    }
    assert_int_equal(flash2_fwd_smem(64), 55296);
}

static void test_issued_flops(void **state) {
    (void)state;
    /* T = 128, forward: tile 0 all 8 warps, tile 1 warps 4..7 (rows >= 64): 12 warp tiles */
    assert_true(flash2_fwd_warp_tiles(128) == 12);
    assert_true(flash2_fwd_mma_flops(128, 64) == 12.0 * 2 * 2 * 16 * 64 * 64);
    /* backward: one key block, query tiles 0 (warps 0..3: keys < 64) and 1 (all 8): 12, 2 steps */
    assert_true(flash2_bwd_warp_tiles(128) == 12);
    assert_true(flash2_bwd_steps(128) == 2);
    assert_true(flash2_bwd_mma_flops(128, 64) == 12.0 * 4 * 2 * 16 * 64 * 64 + 2.0 * 2 * 64 * 128 * 64);
    for (int n = 0; n < NT; n++) {
        const double T = (double)TS[n], causal = T * (T + 1) / 2;
        assert_true(flash2_fwd_warp_tiles(TS[n]) * FLASH2_WARP_ROWS * FLASH2_FWD_KEYS >= causal);
        assert_true(flash2_bwd_warp_tiles(TS[n]) * FLASH2_WARP_ROWS * FLASH2_BWD_QUERIES >= causal);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_walks_each_causal_pair), cmocka_unit_test(test_backward_walks_each_causal_pair),
        cmocka_unit_test(test_dq_partials_are_a_bijection),    cmocka_unit_test(test_scratch_layout),
        cmocka_unit_test(test_shared_memory_layouts),         cmocka_unit_test(test_issued_flops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
