/* The LLaMA 3 reference fixture's format, pinned (tests/fixtures/
 * llama3_tiny.bin, written by bench/llama3_fixture.py, whose header comment
 * is the layout): llm.c's version-3 model file, write_state's state, and
 * the training trailer, each part's sizes following from the model
 * header's config exactly as train_llama3.py sizes the model. The trainer's
 * use of the fixture (issue 38, item 4) comes with the wiring; this keeps
 * the file and the script from drifting apart before then. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "llama_fixture.h"

static void test_model_header(void **state) {
    (void)state;
    struct fixture fx = read_fixture();
    assert_int_equal(int_at(&fx, 0, H_MAGIC), LLAMA3_MAGIC);
    assert_int_equal(int_at(&fx, 0, H_VERSION), LLAMA3_VERSION_FP32);
    int32_t NH = int_at(&fx, 0, H_HEADS), KV = int_at(&fx, 0, H_KV_HEADS), C = int_at(&fx, 0, H_EMBD);
    assert_true(KV > 0 && KV < NH && NH % KV == 0); /* grouped: fewer KV heads than query heads */
    assert_int_equal(C % NH, 0);
    assert_true(int_at(&fx, 0, H_BLOCK) > 0 && int_at(&fx, 0, H_VOCAB) > 0 && int_at(&fx, 0, H_LAYERS) > 0);
    assert_int_equal(int_at(&fx, 0, H_NORM_EPS), 0); /* write_model's int32 slot truncates 1e-5 to 0 */
    assert_true(int_at(&fx, 0, H_ROPE_THETA) > 0);
    assert_int_equal(int_at(&fx, 0, H_SCALED_ROPE), 1);
    free(fx.bytes);
}

/* The three parts' sizes follow from the headers, and add up to the file. */
static void test_sizes_and_trailer(void **state) {
    (void)state;
    struct fixture fx = read_fixture();
    const int64_t P = param_count(&fx), V = int_at(&fx, 0, H_VOCAB);
    const size_t state_off = (HEADER_INTS + (size_t)P) * 4;
    assert_int_equal(int_at(&fx, state_off, 0), LLAMA3_MAGIC);
    const int64_t B = int_at(&fx, state_off, S_B), T = int_at(&fx, state_off, S_T), BT = B * T;
    assert_true(B > 0 && T > 0 && T <= int_at(&fx, 0, H_BLOCK));
    const size_t trailer_off = state_off + (HEADER_INTS + 2 * (size_t)BT + (size_t)(BT * V) + STATE_LOSS_FLOATS +
                                            (size_t)P) * 4;
    assert_int_equal(int_at(&fx, trailer_off, 0), TRAILER_MAGIC);
    assert_int_equal(int_at(&fx, trailer_off, TR_VERSION), TRAILER_VERSION);
    const int32_t steps = int_at(&fx, trailer_off, TR_STEPS), n = int_at(&fx, trailer_off, TR_STREAM);
    assert_int_equal(steps, EXPECTED_STEPS);
    assert_int_equal(n, steps * BT + 1);
    const size_t floats_off = trailer_off + TRAILER_INTS * 4, stream_off = floats_off + TRAILER_FLOATS * 4,
                 losses_off = stream_off + (size_t)n * 4;
    assert_int_equal(fx.n, losses_off + (size_t)steps * 4);
    assert_true(float_at(&fx, floats_off, TF_NORM_EPS) == FIXTURE_NORM_EPS);
    assert_true(float_at(&fx, floats_off, TF_FFN_MULT) == (float)int_at(&fx, 0, H_FFN_MULT)); /* lossless here */
    /* x, y are the stream's first batch; tokens in the vocabulary */
    for (int64_t i = 0; i < BT; i++) {
        assert_int_equal(int_at(&fx, state_off + HEADER_INTS * 4, (size_t)i), int_at(&fx, stream_off, (size_t)i));
        assert_int_equal(int_at(&fx, state_off + (HEADER_INTS + BT) * 4, (size_t)i),
                         int_at(&fx, stream_off, (size_t)i + 1));
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t tok = int_at(&fx, stream_off, (size_t)i);
        assert_true(tok >= 0 && tok < V);
    }
    /* step 0's loss is the state's forward on the same weights and batch */
    const size_t loss_off = state_off + (HEADER_INTS + 2 * (size_t)BT + (size_t)(BT * V)) * 4;
    assert_true(float_at(&fx, losses_off, 0) == float_at(&fx, loss_off, 0));
    free(fx.bytes);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_header),
        cmocka_unit_test(test_sizes_and_trailer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
