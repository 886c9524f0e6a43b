/* The LLaMA 3 reference fixture's format, pinned (tests/fixtures/
 * llama3_tiny.bin, written by bench/llama3_fixture.py, whose header comment
 * is the layout): llm.c's version-3 model file, write_state's state, and
 * the training trailer, each part's sizes following from the model
 * header's config exactly as train_llama3.py sizes the model. The trainer's
 * use of the fixture (issue 38, item 4) comes with the wiring; this keeps
 * the file and the script from drifting apart before then. Run from the
 * repository root, as make test runs every test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define FIXTURE_PATH "tests/fixtures/llama3_tiny.bin"
#define FIXTURE_MAX_BYTES (1 << 20) /* "tens of KB": a larger file is a mistake */

enum {
    LLAMA3_MAGIC = 20240803, LLAMA3_VERSION_FP32 = 3, HEADER_INTS = 256,
    TRAILER_MAGIC = 20241038, TRAILER_VERSION = 1, TRAILER_INTS = 16, TRAILER_FLOATS = 16,
    /* the model header's slots (write_model) */
    H_MAGIC = 0, H_VERSION, H_BLOCK, H_VOCAB, H_LAYERS, H_HEADS, H_KV_HEADS, H_EMBD, H_FFN_MULT, H_MULTIPLE_OF,
    H_NORM_EPS, H_ROPE_THETA, H_SCALED_ROPE,
    /* the state header's (write_state) and the trailer's */
    S_B = 1, S_T = 2, TR_VERSION = 1, TR_STEPS = 2, TR_STREAM = 3, TF_NORM_EPS = 0, TF_FFN_MULT = 1,
    /* write_state's fixed part: the header, then x, y, logits, loss */
    STATE_LOSS_FLOATS = 1,
    EXPECTED_STEPS = 10
};
#define FIXTURE_NORM_EPS 1e-5f

struct fixture {
    unsigned char *bytes;
    size_t n;
};

static struct fixture read_fixture(void) {
    FILE *f = fopen(FIXTURE_PATH, "rb");
    if (!f) fail_msg("%s: cannot open (run the test from the repository root)", FIXTURE_PATH);
    struct fixture fx = {malloc(FIXTURE_MAX_BYTES), 0};
    assert_non_null(fx.bytes);
    fx.n = fread(fx.bytes, 1, FIXTURE_MAX_BYTES, f);
    fclose(f);
    assert_true(fx.n > 0 && fx.n < FIXTURE_MAX_BYTES);
    return fx;
}

static int32_t int_at(const struct fixture *fx, size_t off, size_t i) {
    int32_t v;
    assert_true(off + (i + 1) * sizeof v <= fx->n);
    memcpy(&v, fx->bytes + off + i * sizeof v, sizeof v);
    return v;
}

static float float_at(const struct fixture *fx, size_t off, size_t i) {
    float v;
    assert_true(off + (i + 1) * sizeof v <= fx->n);
    memcpy(&v, fx->bytes + off + i * sizeof v, sizeof v);
    return v;
}

/* The MLP width as the reference's MLP computes it: int(2 * 4C / 3),
 * times ffn_dim_multiplier (int(), as written: an int32 slot), rounded up
 * to multiple_of. */
static int64_t hidden_of(int64_t C, int64_t mult, int64_t multiple_of) {
    int64_t h = 2 * 4 * C / 3;
    h = mult * h;
    return multiple_of * ((h + multiple_of - 1) / multiple_of);
}

/* Parameters in write_tensors' order: wte, per layer ln_1, c_attn at GQA
 * width, c_proj, ln_2, c_fc, c_fc2, c_proj, then ln_f and the untied head. */
static int64_t param_count(const struct fixture *fx) {
    int64_t V = int_at(fx, 0, H_VOCAB), L = int_at(fx, 0, H_LAYERS), NH = int_at(fx, 0, H_HEADS),
            KV = int_at(fx, 0, H_KV_HEADS), C = int_at(fx, 0, H_EMBD), hd = C / NH,
            F = hidden_of(C, int_at(fx, 0, H_FFN_MULT), int_at(fx, 0, H_MULTIPLE_OF));
    int64_t per_layer = C + (NH + 2 * KV) * hd * C + C * C + C + 2 * F * C + C * F;
    return V * C + L * per_layer + C + V * C;
}

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
