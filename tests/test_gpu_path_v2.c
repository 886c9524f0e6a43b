/* --gpu_path v2 reaching the model (issue 24, Deliver 1): the one
 * predicate that chooses the bf16 data path (model/gpt_acts.c:
 * acts_direct) is on for v2 on device memory, off for v1 there (v1's
 * verified path: fp32 working copies) and unchanged on the host; the
 * theory of what a run allocates follows it (theory_acts_direct);
 * and the trainer refuses at start-up, naming it, every combination v2
 * cannot run on a GPU (config_check_gpu_path), never falling back to v1.
 * Host logic only: no device memory is touched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "../model/gpt_acts.h"
#include "../train/theory/accounting.h"
#include "../train/theory/theory_rank_parts.h"
#include "../train/config/config.h"
#include "layout.h"

/* The theory's predicates at grid place p, as the rank theory asks them. */
static bool trainer_acts_direct(const struct config *c, struct rank_place p) {
    return theory_acts_direct(c, theory_sp_on(c, p));
}
static bool trainer_logits_bf16(const struct config *c, struct rank_place p) {
    return theory_logits_bf16(c, theory_sp_on(c, p), theory_layout_of(c, p).rank.tp);
}

/* A model as gpt_init_chunks would set the fields acts_direct reads. */
/* v2's backend reads bf16 as it is (model/cuda/layer_ops_cuda.c:
 * cuda_backend_traits); v1's does not. */
static struct exec_ctx v1_kernels = {0}, v2_kernels = {.device = {.reads_bf16 = true}};
static struct gpt model_on(enum mem_space space, enum gpu_path path) {
    return (struct gpt){.act_dtype = DTYPE_BF16, .gemm_dtype = DTYPE_BF16, .recompute = RECOMPUTE_NONE,
                        .attention = ATTENTION_FLASH, .space = space,
                        .flops = path == GPU_PATH_V2 ? &v2_kernels : &v1_kernels};
}

static void test_acts_direct_by_path(void **state) {
    (void)state;
    struct gpt m = model_on(MEM_DEVICE, GPU_PATH_V1);
    assert_true(acts_gemm_reads_store(&m));
    assert_false(acts_direct(&m)); /* v1 on the GPU: exactly as before */
    m.flops = &v2_kernels;
    assert_true(acts_direct(&m));
    m = model_on(MEM_HOST, GPU_PATH_V1);
    assert_true(acts_direct(&m)); /* the CPU's path, whatever the GPU path */
    /* v2 does not widen the premise: no bf16 stores read by the GEMMs, no
     * data path */
    struct gpt off[4];
    for (int i = 0; i < 4; i++) off[i] = model_on(MEM_DEVICE, GPU_PATH_V2);
    off[0].gemm_dtype = DTYPE_FP32;
    off[1].act_dtype = DTYPE_FP32;
    off[2].recompute = RECOMPUTE_FULL;
    off[3].sp = true;
    for (int i = 0; i < 4; i++) assert_false(acts_direct(&off[i]));
}

/* A GPU run's config that v2 takes: bf16 params (auto GEMMs: bf16 on a
 * GPU), bf16 activations, flash attention, one cp rank. */
static struct config v2_config(void) {
    struct config c;
    config_defaults(&c);
    c.device = DEVICE_CUDA;
    c.gpu_path = GPU_PATH_V2;
    c.param_dtype = DTYPE_BF16;
    c.act_dtype = DTYPE_BF16;
    c.attention = ATTENTION_FLASH;
    c.recompute = RECOMPUTE_NONE;
    return c;
}

static void refused(const struct config *c, const char *names) {
    char err[512] = "";
    assert_int_equal(config_check_gpu_path(c, err, sizeof err), -1);
    assert_non_null(strstr(err, "--gpu_path v2 runs the bf16 data path on the GPU"));
    assert_non_null(strstr(err, names));
}

static void test_start_up_errors(void **state) {
    (void)state;
    char err[512] = "";
    struct config c = v2_config();
    assert_int_equal(config_check_gpu_path(&c, err, sizeof err), 0);
    c.attention = ATTENTION_PLAIN; /* its device form: model/cuda/v2/attention_widened.cu */
    c.recompute = RECOMPUTE_SELECTIVE;
    assert_int_equal(config_check_gpu_path(&c, err, sizeof err), 0);
    c = v2_config();
    c.cp = 2;
    refused(&c, "--cp > 1 with --gpu_path v2");
    c = v2_config();
    c.gemm_dtype = GEMM_DTYPE_FP32;
    refused(&c, "bf16 GEMMs");
    c = v2_config();
    c.param_dtype = DTYPE_FP32; /* auto follows the params: fp32 */
    refused(&c, "bf16 GEMMs");
    c = v2_config();
    c.act_dtype = DTYPE_FP32;
    refused(&c, "--act_dtype bf16");
    c = v2_config();
    c.recompute = RECOMPUTE_FULL;
    refused(&c, "--recompute full");
    c = v2_config();
    c.tp = 2;
    c.sequence_parallel = true;
    refused(&c, "--sequence_parallel 1");
    /* v1 takes every one of them, as before; so does a CPU run (device_open
     * refuses v2 there, before this check) */
    c = v2_config();
    c.attention = ATTENTION_PLAIN;
    c.cp = 2;
    c.gpu_path = GPU_PATH_V1;
    assert_int_equal(config_check_gpu_path(&c, err, sizeof err), 0);
    c.gpu_path = GPU_PATH_V2;
    c.device = DEVICE_CPU;
    assert_int_equal(config_check_gpu_path(&c, err, sizeof err), 0);
}

/* The memory theory follows the model and the engine: v2 on the GPU is the
 * bf16 data path, v1 there is not; and v2 reads the bf16 params as they
 * are (parallel/engine.c: params_direct), so its fp32 weight views hold the
 * vectors only, less than v1's whole units by at least the layer's GEMM
 * weights (12 C^2 a layer). */
static void test_theory_follows(void **state) {
    (void)state;
    struct config c = v2_config();
    c.gemm_dtype = GEMM_DTYPE_BF16;
    struct rank_place p = {.dp = 1, .tp = 1, .pp = 1, .cp = 1};
    assert_true(trainer_acts_direct(&c, p));
    double v2 = theory_trainer_scratch(&c, p).persistent;
    c.gpu_path = GPU_PATH_V1;
    assert_false(trainer_acts_direct(&c, p));
    double v1 = theory_trainer_scratch(&c, p).persistent;
    assert_true(v1 - v2 >= 12.0 * c.d_model * c.d_model * 4);
}

/* The head's bf16 logits (issue 24, Deliver 2): model/gpt_acts.c's one
 * predicate acts_logits_bf16 is on only for the bf16 data path on device
 * memory (v2) at tp = 1; the theory prices the logits by the same rule,
 * exactly half the fp32 logits' bytes, 2 Vp bytes a token, there. */
static void test_logits_bf16(void **state) {
    (void)state;
    struct model_layout one = {.rank = {.tp = 1}}, two = {.rank = {.tp = 2}};
    struct gpt m = model_on(MEM_DEVICE, GPU_PATH_V2);
    m.lay = &one;
    assert_true(acts_logits_bf16(&m));
    m.lay = &two; /* the vocabulary-parallel cross-entropy: fp32 logits */
    assert_true(acts_direct(&m));
    assert_false(acts_logits_bf16(&m));
    m = model_on(MEM_DEVICE, GPU_PATH_V1);
    m.lay = &one;
    assert_false(acts_logits_bf16(&m)); /* v1: as before */
    m = model_on(MEM_HOST, GPU_PATH_V2);
    m.lay = &one;
    assert_true(acts_direct(&m));
    assert_false(acts_logits_bf16(&m)); /* the CPU's head keeps fp32 logits */
    m = model_on(MEM_DEVICE, GPU_PATH_V2);
    m.lay = &one;
    m.recompute = RECOMPUTE_FULL; /* no data path, no bf16 logits */
    assert_false(acts_logits_bf16(&m));

    struct config c = v2_config();
    c.gemm_dtype = GEMM_DTYPE_BF16;
    struct rank_place p = {.dp = 1, .tp = 1, .pp = 1, .cp = 1};
    assert_true(trainer_logits_bf16(&c, p));
    double v2 = theory_trainer_activations(&c, p).head;
    c.gpu_path = GPU_PATH_V1;
    assert_false(trainer_logits_bf16(&c, p));
    double v1 = theory_trainer_activations(&c, p).head;
    double BT = (double)c.micro_batch * c.seq_len, Vp = padded_vocab(c.vocab_size);
    assert_true(Vp >= c.vocab_size);
    assert_true(v1 - v2 == 2.0 * Vp * BT); /* 4 bytes a logit, then 2 */
    c.device = DEVICE_CPU; /* the CPU's bf16 path: fp32 logits */
    assert_false(trainer_logits_bf16(&c, p));
    /* tp = 2 under v2: fp32 logits, priced alike on both paths */
    c = v2_config();
    c.gemm_dtype = GEMM_DTYPE_BF16;
    c.tp = 2;
    p.tp = 2;
    assert_true(trainer_acts_direct(&c, p));
    assert_false(trainer_logits_bf16(&c, p));
    v2 = theory_trainer_activations(&c, p).head;
    c.gpu_path = GPU_PATH_V1;
    assert_true(theory_trainer_activations(&c, p).head == v2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acts_direct_by_path),
        cmocka_unit_test(test_start_up_errors),
        cmocka_unit_test(test_theory_follows),
        cmocka_unit_test(test_logits_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
