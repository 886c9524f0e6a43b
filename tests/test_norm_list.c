/* The gradient norm under --gpu_path v2 (parallel/zero/zero.c: the counted
 * segments as one buf_sumsq_open list, made once) against v1's way (a
 * buf_sumsq call per segment), on host memory, where the list's host form
 * runs the same sums: the norm bit for bit (the same segments, added in
 * the same order), fp32 and bf16 gradients, ZeRO 0 and 2, the whole model
 * and a pipeline stage holding the head's wte copy. v1 makes no list (its
 * per-segment calls, and on a GPU their copies, are as before). The list's
 * device form (one pass, one copy) is tests/cuda/test_sumsq_cuda.c's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "bufops.h"
#include "engine.h"
#include "engine_fixture.h"
#include "grid.h"
#include "pipe_stages.h"

enum { L = 3, C = 16, NH = 2, T = 8, V = 64, B = 2 };

static void tokens(int32_t *out, size_t n, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        out[i] = (int32_t)((s >> 33) % V);
    }
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
    config_defaults(&cfg);
    cfg.n_layer = L, cfg.d_model = C, cfg.n_head = NH, cfg.seq_len = T, cfg.vocab_size = V, cfg.micro_batch = B;
    cfg.param_dtype = cfg.act_dtype = DTYPE_FP32;
    cfg.grad_dtype = grad_dtype;
    cfg.zero = zero_stage;
    struct grid grid;
    grid_init_single(&grid);
    struct mem_tracker mem = {0};
    struct flop_counter flops = {0};
    struct rank_desc d;
    assert_int_equal(pipeline_rank_desc(L, pp, stage, 1, 0, NULL, &d), 0);
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

    double v1 = engine_grad_norm(&e);
    assert_null(e.z.norm_list); /* v1 makes no list */
    flops.gpu_v2 = true;
    double v2 = engine_grad_norm(&e);
    struct sumsq_list *made = e.z.norm_list;
    assert_non_null(made);
    assert_int_equal(buf_sumsq_count(made), e.z.segs.n);
    double again = engine_grad_norm(&e);
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
    };
    return cmocka_run_group_tests(tests, one_thread, NULL);
}
