/* The engine's seams, in one process: the model cut into two pipeline
 * stages (two engines built from rank descriptions, include/pipe_stages.h)
 * and passing the activation forward and its gradient back through the
 * boundary entry points equals the whole model: the loss and every
 * layer's gradient bit for bit, and the tied wte's two gradients (the
 * embedding's and the head's copy, which Megatron-LM sums across the
 * first and last stage) summing to the whole model's. Two micro-batches
 * in flight in two activation slots (forward A, forward B, backward B,
 * backward A) equal running them one after the other. fp32 throughout, so
 * the boundary copies are exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "engine_fixture.h"
#include "grid.h"
#include "grid_single.h"
#include "pipe_stages.h"

enum { L = 4, C = 16, NH = 2, T = 8, V = 64, B = 2 };

struct rig {
    struct config cfg;
    struct mem_tracker mem;
    struct exec_ctx flops;
    struct grid grid;
};

static struct rig *rig_new(void) {
    struct rig *r = calloc(1, sizeof *r);
    config_defaults(&r->cfg);
    r->cfg.n_layer = L, r->cfg.d_model = C, r->cfg.n_head = NH, r->cfg.seq_len = T, r->cfg.vocab_size = V;
    r->cfg.micro_batch = B;
    r->cfg.param_dtype = r->cfg.grad_dtype = r->cfg.act_dtype = DTYPE_FP32;
    grid_init_single(&r->grid);
    return r;
}

/* An engine for pipeline stage `stage` of `pp` (pp = 1: the whole model). */
static void stage_engine(struct rig *r, struct engine *e, int pp, int stage, int slots) {
    struct rank_desc d;
    assert_int_equal(pipeline_rank_desc_v(L, pp, 1, stage, 1, 0, NULL, &d), 0);
    struct model_layout lay;
    assert_int_equal(layout_init(&lay, trainer_model_shape(&r->cfg), d), 0);
    struct engine_options o = trainer_engine_options(&r->cfg);
    o.slots = slots;
    char err[256];
    assert_int_equal(engine_init(e, &o, &lay, &r->grid, &r->mem, MEM_HOST, &r->flops, err, sizeof err), 0);
    engine_init_params(e);
    engine_zero_grads(e);
}

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

/* The gradient of tensor t of engine e (fp32 grads, one rank: flat). */
static const float *grad_of(const struct engine *e, const struct tensor_info *t) {
    return (const float *)e->z.st.grads + t->offset;
}

static void test_two_stages_equal_the_whole(void **state) {
    (void)state;
    struct rig *r = rig_new();
    struct engine whole, first, last;
    stage_engine(r, &whole, 1, 0, 1);
    stage_engine(r, &first, 2, 0, 1);
    stage_engine(r, &last, 2, 1, 1);
    assert_true(first.lay.rank.has_embed && !first.lay.rank.has_head && first.lay.rank.chunk[0].l1 == 2);
    assert_true(last.lay.head_wte_copy && last.lay.rank.chunk[0].l0 == 2);

    int32_t in[B * T], tgt[B * T];
    tokens(in, B * T, 1);
    tokens(tgt, B * T, 2);
    float lw = fixture_forward_backward(&whole, in, tgt, 1.0f);

    size_t act = (size_t)B * T * C;
    float *x = calloc(act, sizeof *x), *dx = calloc(act, sizeof *dx);
    struct mb_input a = {.inputs = in}, b = {.targets = tgt, .x_in = x};
    assert_true(engine_forward(&first, 0, &a, x, 1.0f) == 0.0f);
    float ls = engine_forward(&last, 0, &b, NULL, 1.0f);
    engine_backward(&last, 0, NULL, dx);
    engine_backward(&first, 0, dx, NULL);
    assert_true(ls == lw);

    /* every tensor of each stage against the whole model's */
    size_t checked = 0;
    struct engine *stages[] = {&first, &last};
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < layout_num_tensors(&stages[s]->lay); k++) {
            struct tensor_info t = layout_tensor(&stages[s]->lay, k);
            if (t.split == SPLIT_VOCAB) continue; /* the tied pair, below */
            struct tensor_info w = t.kind == UNIT_LAYER ? layout_layer_tensor(&whole.lay, t.layer, (enum layer_tensor)t.id)
                                 : t.kind == UNIT_EMBED ? layout_embed_tensor(&whole.lay, (enum embed_tensor)t.id)
                                                        : layout_head_tensor(&whole.lay, (enum head_tensor)t.id);
            assert_memory_equal(grad_of(stages[s], &t), grad_of(&whole, &w), t.numel * sizeof(float));
            checked += t.numel;
        }
    struct tensor_info we = layout_embed_tensor(&first.lay, EMB_WTE), wh = layout_head_tensor(&last.lay, HEAD_WTE);
    struct tensor_info ww = layout_embed_tensor(&whole.lay, EMB_WTE);
    const float *ge = grad_of(&first, &we), *gh = grad_of(&last, &wh), *gw = grad_of(&whole, &ww);
    double max_err = 0, max_g = 0;
    for (size_t i = 0; i < ww.numel; i++) {
        max_err = fmax(max_err, fabs((double)ge[i] + gh[i] - gw[i]));
        max_g = fmax(max_g, fabs((double)gw[i]));
    }
    printf("  %zu gradient elements bitwise equal; tied wte: |embedding + head copy - whole| <= %.3g of max %.3g\n",
           checked, max_err, max_g);
    assert_true(max_g > 0 && max_err <= 1e-6 * max_g); /* fp32 summation order only */
    free(x);
    free(dx);
    engine_free(&whole);
    engine_free(&first);
    engine_free(&last);
    mem_free_all(&r->mem);
    free(r);
}

static void test_two_slots_in_flight(void **state) {
    (void)state;
    struct rig *r = rig_new();
    struct engine seq, two;
    stage_engine(r, &seq, 1, 0, 1);
    stage_engine(r, &two, 1, 0, 2);
    int32_t in[2 * B * T], tgt[2 * B * T];
    tokens(in, 2 * B * T, 3);
    tokens(tgt, 2 * B * T, 4);
    float s0 = fixture_forward_backward(&seq, in, tgt, 0.5f);
    float s1 = fixture_forward_backward(&seq, in + B * T, tgt + B * T, 0.5f);
    struct mb_input a = {.inputs = in, .targets = tgt}, b = {.inputs = in + B * T, .targets = tgt + B * T};
    float t0 = engine_forward(&two, 0, &a, NULL, 0.5f);
    float t1 = engine_forward(&two, 1, &b, NULL, 0.5f);
    engine_backward(&two, 1, NULL, NULL);
    engine_backward(&two, 0, NULL, NULL);
    assert_true(s0 == t0 && s1 == t1);
    const float *g1 = seq.z.st.grads, *g2 = two.z.st.grads;
    double max_err = 0, max_g = 0;
    for (size_t i = 0; i < seq.lay.total; i++) {
        max_err = fmax(max_err, fabs((double)g1[i] - g2[i]));
        max_g = fmax(max_g, fabs((double)g1[i]));
    }
    printf("  two slots in flight: losses equal, gradients within %.3g of max %.3g (order of the two sums)\n",
           max_err, max_g);
    assert_true(max_g > 0 && max_err <= 1e-6 * max_g);
    /* each slot has its own residual stream: (L + 1) x (B,T,C) apart */
    assert_true((char *)two.model.slot[1].resid - (char *)two.model.slot[0].resid ==
                (ptrdiff_t)((L + 1) * (size_t)B * T * C * sizeof(float)));
    engine_free(&seq);
    engine_free(&two);
    mem_free_all(&r->mem);
    free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_stages_equal_the_whole),
        cmocka_unit_test(test_two_slots_in_flight),
    };
    return cmocka_run_group_tests(tests, one_thread, NULL);
}
