/* Reading the LLaMA 3 reference fixture (tests/fixtures/llama3_tiny.bin,
 * bench/llama3_fixture.py's header comment is its layout): the tests that
 * pin its format (test_llama_fixture.c) and run the kernels on it
 * (test_llama_reference.c). Needs <cmocka.h> at the use site. Run from the
 * repository root, as make test runs every test. */
#ifndef SHARDLAB_TESTS_LLAMA_FIXTURE_H
#define SHARDLAB_TESTS_LLAMA_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static inline struct fixture read_fixture(void) {
    FILE *f = fopen(FIXTURE_PATH, "rb");
    if (!f) fail_msg("%s: cannot open (run the test from the repository root)", FIXTURE_PATH);
    struct fixture fx = {malloc(FIXTURE_MAX_BYTES), 0};
    assert_non_null(fx.bytes);
    fx.n = fread(fx.bytes, 1, FIXTURE_MAX_BYTES, f);
    fclose(f);
    assert_true(fx.n > 0 && fx.n < FIXTURE_MAX_BYTES);
    return fx;
}

static inline int32_t int_at(const struct fixture *fx, size_t off, size_t i) {
    int32_t v;
    assert_true(off + (i + 1) * sizeof v <= fx->n);
    memcpy(&v, fx->bytes + off + i * sizeof v, sizeof v);
    return v;
}

static inline float float_at(const struct fixture *fx, size_t off, size_t i) {
    float v;
    assert_true(off + (i + 1) * sizeof v <= fx->n);
    memcpy(&v, fx->bytes + off + i * sizeof v, sizeof v);
    return v;
}

/* The MLP width as the reference's MLP computes it: int(2 * 4C / 3),
 * times ffn_dim_multiplier (int(), as written: an int32 slot), rounded up
 * to multiple_of. */
static inline int64_t hidden_of(int64_t C, int64_t mult, int64_t multiple_of) {
    int64_t h = 2 * 4 * C / 3;
    h = mult * h;
    return multiple_of * ((h + multiple_of - 1) / multiple_of);
}

/* Parameters in write_tensors' order: wte, per layer ln_1, c_attn at GQA
 * width, c_proj, ln_2, c_fc, c_fc2, c_proj, then ln_f and the untied head. */
static inline int64_t param_count(const struct fixture *fx) {
    int64_t V = int_at(fx, 0, H_VOCAB), L = int_at(fx, 0, H_LAYERS), NH = int_at(fx, 0, H_HEADS),
            KV = int_at(fx, 0, H_KV_HEADS), C = int_at(fx, 0, H_EMBD), hd = C / NH,
            F = hidden_of(C, int_at(fx, 0, H_FFN_MULT), int_at(fx, 0, H_MULTIPLE_OF));
    int64_t per_layer = C + (NH + 2 * KV) * hd * C + C * C + C + 2 * F * C + C * F;
    return V * C + L * per_layer + C + V * C;
}

#endif
