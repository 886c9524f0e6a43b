/* The bf16 embedding backward's buckets (model/cuda/v2/embedding_buckets.h,
 * --gpu_path v2's embedding_rows_backward_bf16_cuda), on the CPU: the
 * host's table holds every position once, keys ascending, positions
 * ascending within a key, other ranks' tokens last; buckets start and end
 * exactly at the key changes; and the device's arithmetic replayed on the
 * host (a (bucket, channel) sum a thread, dwpe's (t, c) a thread) equals
 * embedding_rows_backward_bf16_cpu bit for bit, on slices at v0 0 and in
 * the middle, B T off the block sizes, C off EMB_GROUP, a token repeated
 * many times and the dwte, dwpe given non-zero starting values. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../model/cpu/layers_cpu.h"
#include "layers.h"
#include "../model/cuda/v2/embedding_buckets.h"

static uint64_t next(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* The kernels' work, one (bucket, channel) and one (t, c) at a time. */
static void replay(float *dwte, float *dwpe, const bf16 *dout, const int32_t *key, const int32_t *pos, int64_t rows,
                   int64_t B, int64_t T, int64_t C) {
    int64_t BT = B * T;
    for (int64_t i = 0; i < BT; i++) {
        if (!emb_bucket_starts(key, i, rows)) continue;
        int64_t e = emb_bucket_end(key, i, BT);
        for (int64_t c = 0; c < C; c++) {
            float *d = dwte + (int64_t)key[i] * C + c;
            *d = emb_bucket_sum(*d, dout, pos, i, e, C, c);
        }
    }
    for (int64_t tc = 0; tc < T * C; tc++)
        for (int64_t b = 0; b < B; b++) dwpe[tc] += v2_widen(dout[b * T * C + tc]);
}

static void check(int64_t B, int64_t T, int64_t C, int64_t V, int64_t v0, int64_t rows, uint64_t seed) {
    int64_t BT = B * T;
    int32_t *inp = malloc((size_t)BT * sizeof *inp), *key = malloc((size_t)BT * sizeof *key);
    int32_t *pos = malloc((size_t)BT * sizeof *pos);
    int64_t *count = malloc((size_t)(rows + 2) * sizeof *count);
    bf16 *dout = malloc((size_t)(BT * C) * sizeof *dout);
    float *w1 = malloc((size_t)(rows * C + 1) * sizeof *w1), *w2 = malloc((size_t)(rows * C + 1) * sizeof *w2);
    float *p1 = malloc((size_t)(T * C) * sizeof *p1), *p2 = malloc((size_t)(T * C) * sizeof *p2);
    uint64_t s = seed;
    for (int64_t i = 0; i < BT; i++) inp[i] = (int32_t)(next(&s) % 4 == 0 ? 7 % V : next(&s) % V); /* 7: a run */
    for (int64_t i = 0; i < BT * C; i++) dout[i] = f32_to_bf16((float)((double)next(&s) / 2147483648.0 - 0.5));
    for (int64_t i = 0; i < rows * C; i++) w1[i] = w2[i] = (float)((double)next(&s) / 2147483648.0);
    for (int64_t i = 0; i < T * C; i++) p1[i] = p2[i] = (float)((double)next(&s) / 2147483648.0);

    emb_bucket_table(inp, BT, v0, rows, key, pos, count);
    /* every position once; keys ascending; positions ascending within a key */
    unsigned char *seen = calloc((size_t)BT, 1);
    int64_t buckets = 0, covered = 0;
    for (int64_t i = 0; i < BT; i++) {
        assert_true(pos[i] >= 0 && pos[i] < BT && !seen[pos[i]]);
        seen[pos[i]] = 1;
        assert_int_equal(key[i], token_key(inp[pos[i]], v0, rows));
        if (i > 0) assert_true(key[i - 1] < key[i] || (key[i - 1] == key[i] && pos[i - 1] < pos[i]));
        if (emb_bucket_starts(key, i, rows)) {
            int64_t e = emb_bucket_end(key, i, BT);
            assert_true(e == BT || key[e] != key[i]);
            buckets++, covered += e - i;
        }
    }
    int64_t mine = 0;
    for (int64_t i = 0; i < BT; i++) mine += inp[i] >= v0 && inp[i] < v0 + rows;
    assert_int_equal(covered, mine); /* the buckets hold exactly this slice's positions */

    embedding_rows_backward_bf16_cpu(w1, p1, dout, inp, v0, rows, B, T, C, NULL);
    replay(w2, p2, dout, key, pos, rows, B, T, C);
    assert_memory_equal(w1, w2, (size_t)(rows * C) * sizeof *w1);
    assert_memory_equal(p1, p2, (size_t)(T * C) * sizeof *p1);
    printf("  B %lld T %lld C %lld, rows [%lld, %lld) of %lld: %lld buckets over %lld of %lld positions, "
           "dwte and dwpe bit for bit\n", (long long)B, (long long)T, (long long)C, (long long)v0,
           (long long)(v0 + rows), (long long)V, (long long)buckets, (long long)mine, (long long)BT);
    free(seen), free(inp), free(key), free(pos), free(count), free(dout), free(w1), free(w2), free(p1), free(p2);
}

static void test_buckets_whole_vocabulary(void **state) {
    (void)state;
    check(2, 37, 130, 50, 0, 50, 1);
    check(3, 129, 257, 301, 0, 301, 2);
    check(1, 1, 1, 1, 0, 1, 3);
}

static void test_buckets_vocabulary_slice(void **state) {
    (void)state;
    check(2, 37, 130, 50, 13, 20, 4); /* tokens below and above the slice */
    check(4, 65, 96, 97, 48, 49, 5);
    check(2, 33, 64, 40, 20, 1, 6);
}

/* The sort's bits hold every key 0..rows, and no more bits than that. */
static void test_key_bits(void **state) {
    (void)state;
    const int64_t rows[] = {0, 1, 2, 3, 4, 50256, 50257, 65535, 65536, (int64_t)1 << 30};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int b = token_key_bits(rows[i]);
        assert_true(((int64_t)1 << b) > rows[i]);
        assert_true(b == 1 || ((int64_t)1 << (b - 1)) <= rows[i]);
    }
    assert_int_equal(token_key_bits(50304), 16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_whole_vocabulary),
        cmocka_unit_test(test_buckets_vocabulary_slice),
        cmocka_unit_test(test_key_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
