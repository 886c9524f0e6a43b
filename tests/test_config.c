/* The run configuration's values: the defaults, every shipped config file
 * (the llama3 ones planner-only), --device, the cross-key checks
 * (config_validate, config_warnings) and the config_print ->
 * config_load_file round trip. Error messages are in test_config_errors.c,
 * the command line in test_config_args.c. */
#include <glob.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../train/config/config.h"
#include "device.h"

static void test_defaults(void **state) {
    (void)state;
    struct config c;
    config_defaults(&c);
    assert_int_equal(c.n_layer, 2);
    assert_int_equal(c.d_model, 64);
    assert_int_equal(c.n_head, 4);
    assert_int_equal(c.seq_len, 64);
    assert_int_equal(c.vocab_size, 256);
    assert_int_equal(c.arch, ARCH_GPT2);
    assert_int_equal(c.n_kv_head, 0);
    assert_int_equal(c.ffn_dim, 0);
    assert_int_equal(c.micro_batch, 4);
    assert_int_equal(c.grad_accum, 1);
    assert_int_equal(c.optimizer, OPTIM_ADAMW);
    assert_int_equal(c.steps, 100);
    assert_int_equal(c.warmup_steps, 0);
    assert_true(c.lr == 1e-3f);
    assert_true(c.min_lr_frac == 0.1f);
    assert_true(c.weight_decay == 0.1f);
    assert_true(c.beta1 == 0.9f);
    assert_true(c.beta2 == 0.95f);
    assert_true(c.eps == 1e-8f);
    assert_true(c.grad_clip == 1.0f);
    assert_true(c.init_std == 0.02f);
    assert_int_equal(c.lr_schedule, LR_COSINE);
    assert_int_equal(c.decay_targets, DECAY_MATRICES);
    assert_int_equal(c.param_dtype, DTYPE_BF16);
    assert_int_equal(c.grad_dtype, DTYPE_BF16);
    assert_int_equal(c.act_dtype, DTYPE_BF16);
    assert_int_equal(c.rounding, ROUND_NEAREST);
    assert_string_equal(c.train_data, "data/kjv_train.bin");
    assert_string_equal(c.val_data, "data/kjv_val.bin");
    assert_true(c.shuffle);
    assert_int_equal(c.seed, 1337);
    assert_string_equal(c.init_from, "");
    assert_string_equal(c.resume, "");
    assert_string_equal(c.sample_prompt, "And God said");
    assert_int_equal(c.threads, 2);
    assert_true(c.peak_flops == 0.0);
    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(config_validate(&c, err), 0);
}

static void test_every_config_file_loads(void **state) {
    (void)state;
    glob_t g;
    assert_int_equal(glob("configs/*.conf", 0, NULL, &g), 0);
    assert_true(g.gl_pathc >= 7);
    int validated = 0, planner_only = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *p = g.gl_pathv[i];
        struct config c;
        config_defaults(&c);
        char err[CONFIG_ERR_LEN] = "";
        if (config_load_file(&c, p, err) != 0) fail_msg("%s: %s", p, err);
        assert_int_equal(c.d_model % c.n_head, 0);
        /* The llama3 configs are planner-only: V = 128256 does not fit the
         * trainer's uint16 token shards, so config_validate refuses them
         * (and says why). Everything else is trainable. */
        if (strstr(p, "llama3")) {
            assert_int_equal(c.arch, ARCH_LLAMA);
            assert_int_equal(c.vocab_size, 128256);
            assert_int_equal(config_validate(&c, err), -1);
            assert_non_null(strstr(err, "vocab_size"));
            assert_non_null(strstr(err, "65536"));
            planner_only++;
        } else {
            if (config_validate(&c, err) != 0) fail_msg("%s: %s", p, err);
            validated++;
        }
    }
    globfree(&g);
    assert_int_equal(planner_only, 3);
    assert_true(validated >= 4); /* tiny, demo, bench-small, gpt3-175b */

    const char *trainable[] = {"configs/tiny.conf", "configs/demo.conf", "configs/bench-small.conf",
                               "configs/gpt3-175b.conf"};
    for (size_t i = 0; i < sizeof trainable / sizeof *trainable; i++) {
        struct config c;
        config_defaults(&c);
        char err[CONFIG_ERR_LEN] = "";
        if (config_load_file(&c, trainable[i], err) != 0 || config_validate(&c, err) != 0)
            fail_msg("%s: %s", trainable[i], err);
    }
}

static void test_bench_small_shape(void **state) {
    (void)state;
    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(config_load_file(&c, "configs/bench-small.conf", err), 0);
    assert_int_equal(c.n_layer, 4);
    assert_int_equal(c.d_model, 256);
    assert_int_equal(c.n_head, 4);
    assert_int_equal(c.seq_len, 64);
    assert_int_equal(c.micro_batch, 4);
    assert_int_equal(c.vocab_size, 50257);
    assert_int_equal(c.arch, ARCH_GPT2);

    config_defaults(&c);
    assert_int_equal(config_load_file(&c, "configs/tiny.conf", err), 0);
    assert_int_equal(c.n_layer, 2);
    assert_int_equal(c.d_model, 32);
    assert_true(c.lr == 3e-3f);
    assert_true(c.weight_decay == 0.0f);
    assert_int_equal(c.warmup_steps, 10);

    config_defaults(&c);
    assert_int_equal(config_load_file(&c, "configs/demo.conf", err), 0);
    assert_string_equal(c.sample_prompt, "And God said"); /* value with spaces */
    assert_int_equal(c.sample_tokens, 300);
}

/* --device: auto by default; cpu and cuda by name; anything else names
 * the choices. Opening cuda in the CPU build is a clear error, auto and
 * cpu are the CPU. */
static void test_device_key(void **state) {
    (void)state;
    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(c.device, DEVICE_AUTO);
    assert_int_equal(config_set(&c, "device", "cuda", err), 0);
    assert_int_equal(c.device, DEVICE_CUDA);
    assert_int_equal(config_set(&c, "device", "cpu", err), 0);
    assert_int_equal(c.device, DEVICE_CPU);
    assert_int_equal(config_set(&c, "device", "gpu", err), -1);
    assert_non_null(strstr(err, "auto cpu cuda"));
    struct device_info d;
    char derr[DEVICE_ERR_LEN] = "";
    assert_false(device_build_has_cuda());
    assert_int_equal(device_open(DEVICE_AUTO, GPU_PATH_V1, false, &d, derr, sizeof derr), 0);
    assert_int_equal(d.kind, DEVICE_CPU);
    assert_int_equal(device_open(DEVICE_CUDA, GPU_PATH_V1, false, &d, derr, sizeof derr), -1);
    assert_non_null(strstr(derr, "without CUDA support"));
    size_t used = 1, total = 1;
    assert_int_equal(device_open(DEVICE_CPU, GPU_PATH_V1, false, &d, derr, sizeof derr), 0);
    assert_int_equal(device_memory_used(&d, &used, &total, derr, sizeof derr), -1);
    assert_int_equal(used, 0);
    /* --gpu_path v2 names the GPU's kernels: on the CPU an error, whether
     * the CPU was asked for or auto found no GPU */
    assert_int_equal(c.gpu_path, GPU_PATH_V1);
    assert_int_equal(config_set(&c, "gpu_path", "v2", err), 0);
    assert_int_equal(c.gpu_path, GPU_PATH_V2);
    assert_int_equal(config_set(&c, "gpu_path", "v3", err), -1);
    assert_int_equal(device_open(DEVICE_CPU, GPU_PATH_V2, false, &d, derr, sizeof derr), -1);
    assert_non_null(strstr(derr, "--gpu_path v2 chooses the GPU's kernels, but this run is on the cpu (--device cpu"));
    assert_int_equal(device_open(DEVICE_AUTO, GPU_PATH_V2, true, &d, derr, sizeof derr), -1);
    assert_non_null(strstr(derr, "(--device auto, the CPU build)"));
    assert_int_equal(device_open(DEVICE_CUDA, GPU_PATH_V2, false, &d, derr, sizeof derr), -1);
    assert_non_null(strstr(derr, "without CUDA support"));
}

/* warmup longer than the run: a warning naming both; steps 0 with
 * save_state: an error (no state would be written). */
/* adafactor_eps's range excludes 0 (eps1 = 0: 0/0 where a gradient is 0,
 * the vocabulary's padding rows), also a value that rounds to 0 as a
 * float; the smallest positive float and 1 are taken. */
static void test_adafactor_eps_range(void **state) {
    (void)state;
    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN] = "";
    const char *bad[] = {"0", "-0", "0.0", "1e-46", "-1e-30", "1.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(config_set(&c, "adafactor_eps", bad[i], err), -1);
        assert_non_null(strstr(err, "adafactor_eps: expected a number in (0, 1]"));
    }
    assert_float_equal(c.adafactor_eps, 1e-30f, 0.0f); /* the default, untouched */
    assert_int_equal(config_set(&c, "adafactor_eps", "1.4e-45", err), 0);
    assert_true(c.adafactor_eps > 0.0f);
    assert_int_equal(config_set(&c, "adafactor_eps", "1", err), 0);
    assert_float_equal(c.adafactor_eps, 1.0f, 0.0f);
    /* an inclusive range keeps its lower end */
    assert_int_equal(config_set(&c, "weight_decay", "0", err), 0);
}

static void test_warnings_and_steps_zero(void **state) {
    (void)state;
    struct config c;
    config_defaults(&c);
    char buf[512] = "", err[CONFIG_ERR_LEN] = "";
    FILE *f = fmemopen(buf, sizeof buf, "w");
    assert_int_equal(config_warnings(&c, f), 0);
    c.warmup_steps = 150;
    assert_int_equal(config_warnings(&c, f), 1);
    fclose(f);
    assert_non_null(strstr(buf, "warning: warmup_steps 150 is longer than the run (steps 100)"));
    c.warmup_steps = 100; /* warmup ending on the last step is fine */
    assert_int_equal(config_warnings(&c, stderr), 0);

    config_defaults(&c);
    c.steps = 0;
    assert_int_equal(config_validate(&c, err), 0); /* steps 0 alone: init and save a model file */
    snprintf(c.save_state, sizeof c.save_state, "out.state");
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "steps = 0 with save_state out.state"));
}

static void test_validate(void **state) {
    (void)state;
    struct config c;
    char err[CONFIG_ERR_LEN] = "";

    config_defaults(&c);
    c.d_model = 64;
    c.n_head = 6;
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "n_head"));
    assert_non_null(strstr(err, "d_model"));
    c.n_head = 8;
    assert_int_equal(config_validate(&c, err), 0);

    config_defaults(&c);
    c.n_head = 8;
    c.n_kv_head = 3;
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "n_kv_head"));
    c.n_kv_head = 2;
    assert_int_equal(config_validate(&c, err), 0);

    config_defaults(&c);
    c.param_dtype = DTYPE_FP32;
    c.rounding = ROUND_STOCHASTIC;
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "stochastic"));
    c.param_dtype = DTYPE_BF16;
    assert_int_equal(config_validate(&c, err), 0);
    c.param_dtype = DTYPE_FP32;
    c.rounding = ROUND_NEAREST;
    assert_int_equal(config_validate(&c, err), 0);

    config_defaults(&c);
    c.vocab_size = 65536;
    assert_int_equal(config_validate(&c, err), 0);
    c.vocab_size = 65537;
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "vocab_size"));
}

/* config_print -> file -> config_load_file reproduces the struct exactly. */
static void round_trip(const struct config *want) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/test_config.XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    config_print(f, want);
    assert_int_equal(fclose(f), 0);

    struct config got;
    config_defaults(&got);
    char err[CONFIG_ERR_LEN] = "";
    if (config_load_file(&got, path, err) != 0) fail_msg("reload: %s", err);
    unlink(path);
    /* field by field first for a readable failure, then the whole struct */
    assert_int_equal(got.n_layer, want->n_layer);
    assert_int_equal(got.d_model, want->d_model);
    assert_int_equal(got.vocab_size, want->vocab_size);
    assert_int_equal(got.arch, want->arch);
    assert_int_equal(got.param_dtype, want->param_dtype);
    assert_int_equal(got.rounding, want->rounding);
    assert_int_equal(got.seed, want->seed);
    assert_int_equal(got.shuffle, want->shuffle);
    if (got.lr != want->lr) fail_msg("lr %.9g != %.9g", (double)got.lr, (double)want->lr);
    if (got.init_std != want->init_std)
        fail_msg("init_std %.9g != %.9g", (double)got.init_std, (double)want->init_std);
    if (got.beta2 != want->beta2) fail_msg("beta2 %.9g != %.9g", (double)got.beta2, (double)want->beta2);
    if (got.peak_flops != want->peak_flops) fail_msg("peak_flops %.17g != %.17g", got.peak_flops, want->peak_flops);
    assert_string_equal(got.init_from, want->init_from);
    assert_string_equal(got.sample_prompt, want->sample_prompt);
    assert_string_equal(got.val_data, want->val_data);
    assert_memory_equal(&got, want, sizeof got);
}

static void test_print_round_trip(void **state) {
    (void)state;
    struct config c;
    config_defaults(&c);
    round_trip(&c);

    char err[CONFIG_ERR_LEN] = "";
    assert_int_equal(config_load_file(&c, "configs/demo.conf", err), 0);
    round_trip(&c);

    /* Every kind of key away from its default, floats that need all their
     * digits included. Set through config_set so strings stay as the
     * loader would leave them. */
    config_defaults(&c);
    const char *kv[][2] = {
        {"n_layer", "12"},          {"d_model", "768"},          {"n_head", "12"},
        {"seq_len", "1024"},        {"vocab_size", "50257"},     {"arch", "llama"},
        {"n_kv_head", "4"},         {"ffn_dim", "3072"},         {"init_std", "0.0123456789"},
        {"micro_batch", "8"},       {"grad_accum", "3"},         {"steps", "12345"},
        {"warmup_steps", "700"},    {"lr", "0.000612345678"},    {"lr_schedule", "constant"},
        {"min_lr_frac", "0.0333333333"}, {"weight_decay", "0.123456789"}, {"decay_targets", "all"},
        {"beta1", "0.8999999"},     {"beta2", "0.987654321"},    {"eps", "1.2345678e-9"},
        {"grad_clip", "0.7071067811865476"}, {"param_dtype", "bf16"}, {"grad_dtype", "fp32"},
        {"act_dtype", "fp32"},      {"rounding", "stochastic"},  {"train_data", "shards/train_*.bin"},
        {"val_data", ""},           {"shuffle", "0"},            {"val_every", "0"},
        {"val_batches", "3"},       {"seed", "9123456789012345678"}, {"init_from", "gpt2_124M.bin"},
        {"save", "out/model.bin"},  {"resume", "out/state"},     {"save_state", "out/state2"},
        {"save_state_every", "50"}, {"log_json", "out/log.jsonl"}, {"sample_tokens", "64"},
        {"sample_temperature", "0.7777777"}, {"sample_prompt", "In the beginning"}, {"threads", "16"},
        {"peak_flops", "1.234567890123e15"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        if (config_set(&c, kv[i][0], kv[i][1], err) != 0) fail_msg("%s: %s", kv[i][0], err);
    assert_int_equal(config_validate(&c, err), 0);
    round_trip(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_config_file_loads),
        cmocka_unit_test(test_bench_small_shape),
        cmocka_unit_test(test_device_key),
        cmocka_unit_test(test_adafactor_eps_range),
        cmocka_unit_test(test_warnings_and_steps_zero),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_print_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
