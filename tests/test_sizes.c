/* Sizes in 64 bits. The theory for the LLaMA-3-405B shape at B 8, T 8192,
 * where counts such as B T 4C (2^32) pass 2^31, against the same counts
 * worked out here in exact uint64_t arithmetic from the papers' formulas;
 * config_validate's size limits at their boundary; the GEMM slicing that
 * lets N rows beyond sgemm's int range through, forced onto small slices
 * and compared bit for bit with one call (a real N past 2^31 needs tens of
 * GB, too much for a unit test); and the shard format's token count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../train/theory/accounting.h"
#include "../train/config/config.h"
#include "data.h"
#include "shard_write.h"
#include "layers.h"
#include "../train/theory/theory.h"

/* LLaMA-3 405B (configs/llama3-405b.conf) at micro-batch 8. */
enum { L405 = 126, C405 = 16384, NH405 = 128, NKV405 = 8, F405 = 53248, V405 = 128256, T405 = 8192, B405 = 8 };

static void llama405b(struct config *c) {
    config_defaults(c);
    c->arch = ARCH_LLAMA;
    c->n_layer = L405;
    c->d_model = C405;
    c->n_head = NH405;
    c->n_kv_head = NKV405;
    c->ffn_dim = F405;
    c->vocab_size = V405;
    c->seq_len = T405;
    c->micro_batch = B405;
}

/* The same dimensions as the GPT-2 blocks this trainer runs. */
static void gpt2_405b_dims(struct config *c, int vocab) {
    llama405b(c);
    c->arch = ARCH_GPT2;
    c->n_kv_head = 0;
    c->ffn_dim = 0;
    c->vocab_size = vocab;
}

/* Exact integers: every expected value below is < 2^63; the theory's
 * doubles must equal them once converted (all of them are exactly
 * representable: few significant bits). */
static void assert_exact(double got, uint64_t want) {
    if (got != (double)want) fail_msg("got %.17g, want %llu", got, (unsigned long long)want);
}

/* Parameters, THEORY.md 4.5 for LLaMA: per layer W_q, W_o (h x h), W_k,
 * W_v (h x n_kv d_h), gate/up/down (3 h F), two RMSNorm gains; untied
 * embedding and head (2 V h); the final norm. Also Hugging Face's count
 * for Llama-3.1-405B, 405,853,388,800. */
static void test_405b_parameters(void **state) {
    (void)state;
    struct config c;
    llama405b(&c);
    struct theory_model m;
    theory_model_from_config(&m, &c);
    const uint64_t h = C405, dh = C405 / NH405, kv = (uint64_t)NKV405 * dh;
    const uint64_t per_layer = 2 * h * h + 2 * h * kv + 3 * h * F405 + 2 * h;
    const uint64_t psi = L405 * per_layer + h + 2 * (uint64_t)V405 * h;
    assert_int_equal(psi, 405853388800ULL);
    struct theory_params p = theory_param_count(&m);
    assert_exact(p.total, psi);
    assert_exact(p.ffn, (uint64_t)L405 * 3 * h * F405);
    assert_exact(p.embedding, 2 * (uint64_t)V405 * h);
}

/* Korthikanti Table 2 generalised (THEORY.md 3): s b h (14 + 4 n_kv/a +
 * 6F/h + 5 a s/h), here with h/a = d_h an integer:
 * s b (14 h + 4 n_kv d_h + 6 F + 5 a s); selective drops 5 a s^2 b;
 * full keeps 2 s b h. */
static void test_405b_korthikanti_layer(void **state) {
    (void)state;
    struct config c;
    llama405b(&c);
    struct theory_model m;
    theory_model_from_config(&m, &c);
    const uint64_t s = T405, b = B405, h = C405, dh = C405 / NH405;
    const uint64_t kept = 14 * h + 4 * (uint64_t)NKV405 * dh + 6 * (uint64_t)F405;
    const uint64_t scores = 5 * (uint64_t)NH405 * s;
    assert_exact(theory_activation_layer_bytes(&m, B405, 1, false, RECOMPUTE_NONE), s * b * (kept + scores));
    assert_exact(theory_activation_layer_bytes(&m, B405, 1, false, RECOMPUTE_SELECTIVE), s * b * kept);
    assert_exact(theory_activation_layer_bytes(&m, B405, 1, false, RECOMPUTE_FULL), 2 * s * b * h);
}

/* The trainer's own activation formula (model/gpt.c's tensors, bf16):
 * per layer (16 C e + NH T e) B T + 4 fp32 stats per token; head: two
 * C-wide tensors (e), two stats, fp32 logits over Vp, fp32 losses and two
 * int32 ids per token. V 128256 is a multiple of 128, so Vp = V. */
static void test_405b_trainer_activations(void **state) {
    (void)state;
    struct config c;
    gpt2_405b_dims(&c, V405);
    c.act_dtype = DTYPE_BF16;
    c.recompute = RECOMPUTE_NONE;
    const uint64_t BT = (uint64_t)B405 * T405, C = C405, e = 2;
    const uint64_t per_layer = (16 * C * e + (uint64_t)NH405 * T405 * e) * BT + 16 * BT;
    const uint64_t head = (2 * C * e + 8 + 4 * (uint64_t)V405 + 4 + 8) * BT;
    struct activation_theory a = theory_trainer_activations(&c, rank_place_dp(1, 0));
    assert_exact(a.per_layer, per_layer);
    assert_exact(a.layers, L405 * per_layer);
    assert_exact(a.head, head);
    assert_exact(a.total, L405 * per_layer + head);
}

/* FLOPs per step, GPT-2 blocks: GEMMs 6 tokens (12 L C^2 + Vp C);
 * attention GEMMs issued over full T x T squares 12 L B C T^2; model
 * FLOPs tokens (6 N + 6 L C T), whose attention term is half of those
 * with N = V C + L (12 C^2 + 13 C) + 2 C (wpe is a lookup). */
static void test_405b_trainer_flops(void **state) {
    (void)state;
    struct config c;
    gpt2_405b_dims(&c, V405);
    c.grad_accum = 3;
    c.recompute = RECOMPUTE_NONE;
    const uint64_t L = L405, C = C405, T = T405, B = B405, k = 3, V = V405;
    const uint64_t tokens = B * T * k;
    const uint64_t n_gemm = V * C + L * (12 * C * C + 13 * C) + 2 * C;
    struct flop_theory f = theory_trainer_flops(&c, rank_place_dp(1, 0));
    assert_exact(f.tokens, tokens);
    assert_exact(f.gemm, 6 * tokens * (12 * L * C * C + V * C));
    assert_exact(f.attention, 12 * L * B * C * T * T * k);
    assert_exact(f.attention_model, tokens * 6 * L * C * T);
    assert_exact(2 * f.attention_model, f.attention);
    assert_exact(f.n_gemm_params, n_gemm);
    assert_exact(f.model, tokens * (6 * n_gemm + 6 * L * C * T));
}

/* FLOPs per step, LLaMA blocks (llama-tiny's shape): each layer's GEMMs
 * read C (NH + 2 KV) hs (qkv at GQA width) + C^2 (the projection) + 3 C F
 * (SwiGLU's up, gate, down), so GEMMs 6 tokens (L that + V C) (the
 * untied head, no padding); model FLOPs with N = Psi - wte (the embedding
 * is a lookup; lm_head is a GEMM): L (that + 2 C) + C + V C. */
static void test_llama_trainer_flops(void **state) {
    (void)state;
    struct config c;
    llama405b(&c);
    c.n_layer = 4, c.d_model = 192, c.n_head = 6, c.n_kv_head = 2, c.ffn_dim = 512, c.vocab_size = 256;
    c.seq_len = 128, c.micro_batch = 8, c.grad_accum = 2;
    const uint64_t L = 4, C = 192, NH = 6, KV = 2, hs = C / NH, F = 512, V = 256, T = 128, B = 8, k = 2;
    const uint64_t tokens = B * T * k, layer = C * (NH + 2 * KV) * hs + C * C + 3 * C * F;
    const uint64_t n_gemm = L * (layer + 2 * C) + C + V * C;
    struct flop_theory f = theory_trainer_flops(&c, rank_place_dp(1, 0));
    assert_exact(f.gemm, 6 * tokens * (L * layer + V * C));
    assert_exact(f.attention, 12 * L * B * C * T * T * k);
    assert_exact(f.n_gemm_params, n_gemm);
    assert_exact(f.model, tokens * (6 * n_gemm + 6 * L * C * T));
}

/* The 405B dimensions with GPT-2 blocks and a uint16 vocabulary train as
 * far as the limits go; LLaMA-3's own vocabulary is stopped by the token
 * shards (uint16), not by the size limits, which it passes. */
static void test_validate_accepts_405b(void **state) {
    (void)state;
    char err[CONFIG_ERR_LEN] = "";
    struct config c;
    gpt2_405b_dims(&c, 50257);
    if (config_validate(&c, err) != 0) fail_msg("rejected: %s", err);
    llama405b(&c);
    assert_int_equal(config_check_sizes(&c, err), 0);
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "uint16"));
}

/* B NH T^2 = 2^20 x 2^10 x 2^32 attention probabilities: 2^64 bytes. */
static void test_validate_rejects_attention_overflow(void **state) {
    (void)state;
    char err[CONFIG_ERR_LEN] = "";
    struct config c;
    config_defaults(&c);
    c.micro_batch = 1 << 20;
    c.n_head = 1024;
    c.d_model = 65536;
    c.seq_len = 65536;
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "micro_batch x n_head x seq_len x seq_len"));
    assert_non_null(strstr(err, "1048576 x 1024 x 65536 x 65536"));
    assert_non_null(strstr(err, "2^64 or more"));
}

/* All layers' saved activations, 4 L B T (8C + 3F + NH T) bytes with
 * F = 4C, at most 2^62: the largest n_layer passes, one more fails. */
static void test_validate_layer_boundary(void **state) {
    (void)state;
    char err[CONFIG_ERR_LEN] = "";
    struct config c;
    config_defaults(&c);
    c.micro_batch = 65536;
    c.seq_len = 65536;
    c.d_model = 65536;
    c.n_head = 64;
    const uint64_t per_token = 8 * 65536ULL + 3 * 4 * 65536ULL + 64ULL * 65536;
    const uint64_t per_layer_bytes = 4 * 65536ULL * 65536ULL * per_token;
    const int L_max = (int)(((uint64_t)1 << 62) / per_layer_bytes);
    assert_int_equal(L_max, 48);
    c.n_layer = L_max;
    if (config_validate(&c, err) != 0) fail_msg("n_layer %d rejected: %s", L_max, err);
    c.n_layer = L_max + 1;
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "n_layer x micro_batch x seq_len"));
    char want[64];
    snprintf(want, sizeof want, "= %llu bytes", (unsigned long long)(per_layer_bytes * (uint64_t)(L_max + 1)));
    assert_non_null(strstr(err, want));
}

/* Small integers, so every sum is exact in fp32 whatever its order: one
 * sgemm and many slices must agree to the bit, and with the naive sums. */
static void fill_small_ints(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) x[i] = (float)((int)((i * 2654435761u + seed) >> 7 & 7u) - 3);
}

enum { GN = 37, GC = 24, GOC = 40 };

static void test_matmul_slices_bitwise(void **state) {
    (void)state;
    static float inp[GN * GC], w[GOC * GC], bias[GOC], dout[GN * GOC];
    static float out1[GN * GOC], out2[GN * GOC], ref[GN * GOC];
    static float dinp1[GN * GC], dinp2[GN * GC], dw1[GOC * GC], dw2[GOC * GC], db1[GOC], db2[GOC];
    fill_small_ints(inp, GN * GC, 1);
    fill_small_ints(w, GOC * GC, 2);
    fill_small_ints(bias, GOC, 3);
    fill_small_ints(dout, GN * GOC, 4);
    for (int i = 0; i < GN; i++)
        for (int o = 0; o < GOC; o++) {
            float s = bias[o];
            for (int k = 0; k < GC; k++) s += inp[i * GC + k] * w[o * GC + k];
            ref[i * GOC + o] = s;
        }
    struct exec_ctx fc1 = {0};
    matmul_forward(out1, inp, w, bias, GN, GC, GOC, &fc1);
    assert_memory_equal(out1, ref, sizeof ref);
    fill_small_ints(dw1, GOC * GC, 5); /* dweight and dbias accumulate */
    fill_small_ints(db1, GOC, 6);
    matmul_backward(dinp1, dw1, db1, dout, inp, w, GN, GC, GOC, &fc1);
    const int64_t slices[] = {1, 5, 36, 37, 1000};
    for (size_t s = 0; s < sizeof slices / sizeof slices[0]; s++) {
        struct exec_ctx fc2 = {0};
        memset(out2, 0, sizeof out2);
        matmul_forward_sliced(out2, inp, w, bias, GN, GC, GOC, slices[s], &fc2);
        assert_memory_equal(out1, out2, sizeof out1);
        memset(dinp2, 0, sizeof dinp2);
        fill_small_ints(dw2, GOC * GC, 5);
        fill_small_ints(db2, GOC, 6);
        matmul_backward_sliced(dinp2, dw2, db2, dout, inp, w, GN, GC, GOC, slices[s], &fc2);
        assert_memory_equal(dinp1, dinp2, sizeof dinp1);
        assert_memory_equal(dw1, dw2, sizeof dw1);
        assert_memory_equal(db1, db2, sizeof db1);
        assert_true(fc2.gemm == fc1.gemm && fc2.other == fc1.other);
    }
    assert_true(fc1.gemm == 3 * 2.0 * GN * GC * GOC); /* forward, dinp, dweight */
    /* dweight = initial + dout^T inp, checked by the naive sum */
    float dw_init[GOC * GC];
    fill_small_ints(dw_init, GOC * GC, 5);
    for (int o = 0; o < GOC; o++)
        for (int k = 0; k < GC; k++) {
            float s = dw_init[o * GC + k];
            for (int i = 0; i < GN; i++) s += dout[i * GOC + o] * inp[i * GC + k];
            assert_true(s == dw1[o * GC + k]);
        }
}

/* C beyond sgemm's int: the shape is named and the process exits 1. */
static void test_matmul_too_wide_exits(void **state) {
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        float x = 0;
        struct exec_ctx fc = {0};
        matmul_forward(&x, &x, &x, NULL, 1, (int64_t)INT32_MAX + 1, 1, &fc); /* exits before any access */
        _exit(0);
    }
    close(fds[1]);
    char msg[512] = "";
    ssize_t n = read(fds[0], msg, sizeof msg - 1);
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(n > 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
    assert_non_null(strstr(msg, "matmul_forward"));
    assert_non_null(strstr(msg, "C 2147483648"));
}

/* Shards: the header's int32 count caps one shard at INT32_MAX tokens, so
 * writing more is refused before any token is read; and a header declaring
 * INT32_MAX tokens needs 1024 + 2 x (2^31 - 1) bytes, a size past 2^32
 * that must be computed in 64 bits to be reported right. */
static void test_shard_counts(void **state) {
    (void)state;
    char dir[] = "/tmp/shardlab_test_sizes_XXXXXX", path[128], err[DATA_ERR_LEN] = "";
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/big.bin", dir);
    uint16_t tokens[16] = {0};
    assert_int_equal(shard_write(path, tokens, (size_t)INT32_MAX + 1, err), -1);
    assert_non_null(strstr(err, "2147483648 tokens"));
    assert_int_equal(access(path, F_OK), -1);
    int32_t header[SHARD_HEADER_INTS] = {shard_format_info(SHARD_GPT2)->magic, shard_format_info(SHARD_GPT2)->version,
                                         INT32_MAX};
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(header, sizeof header, 1, f), 1);
    assert_int_equal(fwrite(tokens, sizeof tokens, 1, f), 1);
    assert_int_equal(fclose(f), 0);
    struct token_shard sh;
    assert_int_equal(shard_read(path, 256, &sh, err), -1);
    char want[128];
    snprintf(want, sizeof want, "file is %llu bytes but the header declares %d tokens (%llu bytes): truncated",
             (unsigned long long)(sizeof header + sizeof tokens), INT32_MAX,
             (unsigned long long)sizeof header + 2ULL * INT32_MAX);
    if (!strstr(err, want)) fail_msg("%s", err);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        /* first, before BLAS or OpenMP start threads that a fork would not carry */
        cmocka_unit_test(test_matmul_too_wide_exits),
        cmocka_unit_test(test_405b_parameters),
        cmocka_unit_test(test_405b_korthikanti_layer),
        cmocka_unit_test(test_405b_trainer_activations),
        cmocka_unit_test(test_405b_trainer_flops),
        cmocka_unit_test(test_llama_trainer_flops),
        cmocka_unit_test(test_validate_accepts_405b),
        cmocka_unit_test(test_validate_rejects_attention_overflow),
        cmocka_unit_test(test_validate_layer_boundary),
        cmocka_unit_test(test_matmul_slices_bitwise),
        cmocka_unit_test(test_shard_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
