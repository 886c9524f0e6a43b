/* --gpu_path v2's step-level host logic (fc->device: what v2's backend
 * asks of the core, model/cuda/layer_ops_cuda.c), on host memory,
 * against v1's way:
 * - the gradient norm (parallel/zero/zero.c: the counted segments as one
 *   buf_sumsq_open list, made once) against a buf_sum_squares call per
 *   segment, where the list's host form runs the same sums: the norm bit
 *   for bit (the same segments, added in the same order), fp32 and bf16
 *   gradients, ZeRO 0, 1 and 2, the whole model and both pipeline stages
 *   (the last holding the head's wte copy). v1 makes no list (its
 *   per-segment calls, and on a GPU their copies, are as before). The
 *   list's device form (one pass, one copy) is tests/cuda/test_sumsq_cuda.c's.
 * - the targets uploaded with the batch (parallel/engine.c, before the
 *   micro-batch's kernels; v1: in the head's forward): the loss and every
 *   gradient bit for bit with v1's, over two micro-batches in two slots. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "bufops.h"
#include "engine.h"
#include "engine_fixture.h"
#include "grid.h"
#include "grid_single.h"
#include "pipe_stages.h"

enum { L = 3, C = 16, NH = 2, T = 8, V = 64, B = 2 };

/* What v2's backend asks of the core (model/cuda/layer_ops_cuda.c:
 * cuda_backend_traits, which the CPU build does not link). */
static const struct backend_traits v2_traits = {
    .reads_bf16 = true, .targets_with_batch = true, .one_pass_norm = true, .queued_updates = true};

static void tokens(int32_t *out, size_t n, uint64_t seed) { fixture_tokens(out, n, seed, V); }

/* The small model's config, fp32 but the gradients' dtype. */
static void small_config(struct config *cfg, enum dtype grad_dtype, int zero_stage) {
    config_defaults(cfg);
    cfg->n_layer = L, cfg->d_model = C, cfg->n_head = NH, cfg->seq_len = T, cfg->vocab_size = V;
    cfg->micro_batch = B;
    cfg->param_dtype = cfg->act_dtype = DTYPE_FP32;
    cfg->grad_dtype = grad_dtype;
    cfg->zero = zero_stage;
}

static int one_thread(void **state) {
    (void)state;
    omp_set_num_threads(1);
    return 0;
}

/* One micro-batch's gradients on stage `stage` of `pp`, then the norm by
 * v1's way and by v2's list: equal bits, the list over every segment
 * (one rank: each counts), made once. */
static void check_norms(enum dtype grad_dtype, int zero_stage, int pp, int stage) {
    struct config cfg;
    small_config(&cfg, grad_dtype, zero_stage);
    struct grid grid;
    grid_init_single(&grid);
    struct mem_tracker mem = {0};
    struct exec_ctx flops = {0};
    struct rank_desc d;
    assert_int_equal(pipeline_rank_desc_v(L, pp, 1, stage, 1, 0, NULL, &d), 0);
    struct model_layout lay;
    assert_int_equal(layout_init(&lay, trainer_model_shape(&cfg), d), 0);
    struct engine_options o = trainer_engine_options(&cfg);
    char err[256];
    struct engine e;
    assert_int_equal(engine_init(&e, &o, &lay, &grid, &mem, MEM_HOST, &flops, err, sizeof err), 0);
    engine_init_params(&e);
    engine_zero_grads(&e);
    int32_t in[B * T], tgt[B * T];
    tokens(in, B * T, 3);
    tokens(tgt, B * T, 4);
    size_t act = (size_t)B * T * C;
    float *x = calloc(act, sizeof *x), *dx = calloc(act, sizeof *dx);
    struct mb_input mb = {.inputs = in, .targets = tgt, .x_in = stage > 0 ? x : NULL};
    for (size_t i = 0; i < act; i++) x[i] = 0.01f * (float)((int)(i % 13) - 6), dx[i] = 0.02f * (float)((int)(i % 7) - 3);
    bool last = stage == pp - 1;
    engine_forward(&e, 0, &mb, last ? NULL : x, 1.0f);
    engine_backward(&e, 0, last ? NULL : dx, stage > 0 ? dx : NULL);
    engine_reduce_grads(&e);

    double v1 = engine_all_reduce_grad_norm(&e);
    assert_null(e.z.norm_list); /* v1 makes no list */
    flops.device = v2_traits;
    double v2 = engine_all_reduce_grad_norm(&e);
    struct sumsq_list *made = e.z.norm_list;
    assert_non_null(made);
    assert_int_equal(buf_sumsq_count(made), e.z.segs.n);
    double again = engine_all_reduce_grad_norm(&e);
    assert_ptr_equal(e.z.norm_list, made); /* made once */
    printf("  grad %s, ZeRO %d, stage %d of %d: %d segments, norm v1 %.17g, v2 %.17g\n", dtype_name(grad_dtype),
           zero_stage, stage, pp, e.z.segs.n, v1, v2);
    assert_true(v1 > 0.0 && isfinite(v1));
    assert_memory_equal(&v1, &v2, sizeof v1);
    assert_memory_equal(&v2, &again, sizeof v2);
    free(x);
    free(dx);
    engine_free(&e);
    assert_null(e.z.norm_list);
    mem_free_all(&mem);
}

/* Two micro-batches (slots 0 and 1) forward and backward; the loss of
 * each and the gradients after both. */
static void run_two(bool v2, float loss[2], float *grads, size_t *n) {
    struct config cfg;
    small_config(&cfg, DTYPE_FP32, 0);
    struct grid grid;
    grid_init_single(&grid);
    struct mem_tracker mem = {0};
    struct exec_ctx flops = {.device = v2 ? v2_traits : (struct backend_traits){0}};
    struct model_layout lay;
    layout_init_whole(&lay, trainer_model_shape(&cfg));
    struct engine_options o = trainer_engine_options(&cfg);
    o.slots = 2;
    char err[256];
    struct engine e;
    assert_int_equal(engine_init(&e, &o, &lay, &grid, &mem, MEM_HOST, &flops, err, sizeof err), 0);
    engine_init_params(&e);
    engine_zero_grads(&e);
    int32_t in[2][B * T], tgt[2][B * T];
    for (int k = 0; k < 2; k++) tokens(in[k], B * T, 10 + (uint64_t)k), tokens(tgt[k], B * T, 20 + (uint64_t)k);
    struct mb_input a = {.inputs = in[0], .targets = tgt[0]}, b = {.inputs = in[1], .targets = tgt[1]};
    loss[0] = engine_forward(&e, 0, &a, NULL, 0.5f);
    loss[1] = engine_forward(&e, 1, &b, NULL, 0.5f); /* slot 1's targets in before slot 0's backward */
    engine_backward(&e, 1, NULL, NULL);
    engine_backward(&e, 0, NULL, NULL);
    *n = e.z.sh.total_padded;
    memcpy(grads, e.z.st.grads, *n * sizeof *grads);
    engine_free(&e);
    mem_free_all(&mem);
}

static void test_targets_with_the_batch(void **state) {
    (void)state;
    enum { MAX = 1 << 16 };
    float l1[2], l2[2];
    float *g1 = malloc(MAX * sizeof *g1), *g2 = malloc(MAX * sizeof *g2);
    size_t n1 = 0, n2 = 0;
    run_two(false, l1, g1, &n1);
    run_two(true, l2, g2, &n2);
    assert_true(n1 == n2 && n1 > 0 && n1 <= MAX);
    printf("  losses v1 %.9g %.9g, v2 %.9g %.9g; %zu gradient elements\n", l1[0], l1[1], l2[0], l2[1], n1);
    assert_true(l1[0] > 0.0f && l1[0] != l1[1]);
    assert_memory_equal(l1, l2, sizeof l1);
    assert_memory_equal(g1, g2, n1 * sizeof *g1);
    free(g1), free(g2);
}

static void test_norm_list_fp32(void **state) {
    (void)state;
    check_norms(DTYPE_FP32, 0, 1, 0);
    check_norms(DTYPE_FP32, 2, 1, 0);
}

static void test_norm_list_bf16(void **state) {
    (void)state;
    check_norms(DTYPE_BF16, 0, 1, 0);
    check_norms(DTYPE_BF16, 1, 1, 0);
}

static void test_norm_list_stages(void **state) {
    (void)state;
    check_norms(DTYPE_FP32, 0, 2, 0);
    check_norms(DTYPE_FP32, 0, 2, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_norm_list_fp32),
        cmocka_unit_test(test_norm_list_bf16),
        cmocka_unit_test(test_norm_list_stages),
        cmocka_unit_test(test_targets_with_the_batch),
    };
    return cmocka_run_group_tests(tests, one_thread, NULL);
}
