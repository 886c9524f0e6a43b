/* The host logic of --gpu_path v2's cuBLASLt plans cached per shape
 * (model/cuda/v2/lt_plan_cache.h): a shape's second call finds the slot
 * its first call took; every field of the key tells shapes apart (each
 * one changed alone is a new slot); colliding hashes probe to free slots
 * and still find their own; a full table gives -1 (the call then takes
 * v1's per-call way) and never overwrites a slot. The cuBLASLt side
 * (model/cuda/v2/matmul_lt_cached.cu) is compiled, not run: on a GPU,
 * tests/cuda/test_v2_flow_cuda.c runs it under the mixed GEMMs
 * (model/cuda/v2/matmul_mixed.cu: an aligned shape's second call finds
 * its cached plan) against the CPU's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "../model/cuda/v2/lt_plan_cache.h"

static void test_second_call_hits(void **state) {
    (void)state;
    struct lt_cache *c = calloc(1, sizeof *c);
    struct lt_shape s = lt_shape_of(0, false, true, 8192, 2304, 768, 768, 768, 2304);
    bool hit = true;
    int i = lt_cache_slot(c, &s, &hit);
    assert_true(i >= 0 && !hit);
    assert_int_equal(c->used, 1);
    int j = lt_cache_slot(c, &s, &hit);
    assert_int_equal(j, i);
    assert_true(hit);
    assert_int_equal(c->hits, 1);
    assert_int_equal(c->misses, 1);
    free(c);
}

/* Each field alone changed: a shape of its own. */
static void test_every_field_in_the_key(void **state) {
    (void)state;
    struct lt_cache *c = calloc(1, sizeof *c);
    const struct lt_shape base = lt_shape_of(0, false, false, 64, 96, 128, 128, 96, 96);
    struct lt_shape v[] = {base,
                           lt_shape_of(1, false, false, 64, 96, 128, 128, 96, 96),
                           lt_shape_of(0, true, false, 64, 96, 128, 128, 96, 96),
                           lt_shape_of(0, false, true, 64, 96, 128, 128, 96, 96),
                           lt_shape_of(0, false, false, 72, 96, 128, 128, 96, 96),
                           lt_shape_of(0, false, false, 64, 104, 128, 128, 96, 96),
                           lt_shape_of(0, false, false, 64, 96, 136, 128, 96, 96),
                           lt_shape_of(0, false, false, 64, 96, 128, 136, 96, 96),
                           lt_shape_of(0, false, false, 64, 96, 128, 128, 104, 96),
                           lt_shape_of(0, false, false, 64, 96, 128, 128, 96, 104),
                           base};
    int n = (int)(sizeof v / sizeof v[0]), slot[16];
    v[n - 1] = base; /* the output's dtype: the one field lt_shape_of leaves to the caller */
    v[n - 1].d_bf16 = 1;
    bool hit;
    for (int i = 0; i < n; i++) {
        slot[i] = lt_cache_slot(c, &v[i], &hit);
        assert_false(hit);
        for (int j = 0; j < i; j++) assert_int_not_equal(slot[i], slot[j]);
    }
    for (int i = 0; i < n; i++) {
        assert_int_equal(lt_cache_slot(c, &v[i], &hit), slot[i]);
        assert_true(hit);
    }
    assert_int_equal(c->used, n);
    free(c);
}

/* LT_CACHE_SLOTS shapes fill it (every one found again after, whatever
 * their hashes collide on); one more gets -1 and changes nothing. */
static void test_full_table(void **state) {
    (void)state;
    struct lt_cache *c = calloc(1, sizeof *c);
    bool hit;
    for (int i = 0; i < LT_CACHE_SLOTS; i++) {
        struct lt_shape s = lt_shape_of(0, false, false, 8 * (i + 1), 64, 64, 64, 64, 64);
        assert_true(lt_cache_slot(c, &s, &hit) >= 0);
        assert_false(hit);
    }
    struct lt_shape more = lt_shape_of(0, false, false, 8 * (LT_CACHE_SLOTS + 1), 64, 64, 64, 64, 64);
    assert_int_equal(lt_cache_slot(c, &more, &hit), -1);
    assert_false(hit);
    assert_int_equal(c->used, LT_CACHE_SLOTS);
    for (int i = 0; i < LT_CACHE_SLOTS; i++) {
        struct lt_shape s = lt_shape_of(0, false, false, 8 * (i + 1), 64, 64, 64, 64, 64);
        int k = lt_cache_slot(c, &s, &hit);
        assert_true(k >= 0 && hit);
        assert_true(lt_shape_equal(&c->slot[k].shape, &s));
    }
    free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_call_hits),
        cmocka_unit_test(test_every_field_in_the_key),
        cmocka_unit_test(test_full_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
