/* arch = llama through the trainer's own engine and model (model/llama.c),
 * against the PyTorch reference fixture (tests/fixtures/llama3_tiny.bin,
 * bench/llama3_fixture.py): the fixture's weights set into the layout,
 * its batch forward gives its logits and loss, and backward every
 * parameter's gradient, within llm.c's test_gpt2-style tolerances (tighter:
 * fp32 on both sides, what differs is the order of sums); then 10 AdamW
 * steps on the stream's sequential batches give the reference's losses.
 * The fp32 path: params, grads and activations fp32, fp32 GEMMs, ZeRO-0,
 * one process. And the bf16 data path (bf16 params, activations and
 * GEMMs: the project's reference bf16 GEMM, so the test runs alike on any
 * CPU) on the same weights and batch: its loss and gradients within bf16's
 * reach of the reference's (BF16_*, below). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../train/config/config.h"
#include "engine_fixture.h"
#include "grid_single.h"
#include "llama_fixture.h"

/* llm.c's test_gpt2 checks logits and the loss within 1e-2 and gradients
 * within a few 1e-2 in its own units; fp32 on both sides allows far less. */
#define LOGIT_ATOL 1e-5
#define LOSS_ATOL 1e-5
#define GRAD_RTOL 1e-5   /* of the tensor's largest gradient */
#define STEP_LOSS_ATOL 1e-5 /* ten updates on: the order of sums compounds (seen: 1e-6) */
/* The data path rounds the weights, every saved tensor and every GEMM
 * operand to bf16 (2^-9 relative each; a few hundred products a sum): the
 * loss within 1e-2, each tensor's gradient within 5e-2 of its largest
 * element (seen: 2e-3 and 1e-2); a wrong rounding point or operand is off
 * by its whole size. */
#define BF16_LOSS_ATOL 1e-2
#define BF16_GRAD_RTOL 5e-2

struct reference {
    struct fixture fx;
    struct config cfg;
    int64_t P, N, V;
    const float *params, *logits, *grads, *floats, *losses;
    const int32_t *x, *y, *stream;
    float loss;
    int steps;
};

static struct reference reference_of(void) {
    struct reference r = {.fx = read_fixture()};
    const struct fixture *fx = &r.fx;
    r.P = param_count(fx);
    r.V = int_at(fx, 0, H_VOCAB);
    const size_t state = (HEADER_INTS + (size_t)r.P) * 4;
    const int B = int_at(fx, state, S_B), T = int_at(fx, state, S_T);
    r.N = (int64_t)B * T;
    const size_t x_off = state + HEADER_INTS * 4, y_off = x_off + (size_t)r.N * 4, logits_off = y_off + (size_t)r.N * 4,
                 loss_off = logits_off + (size_t)(r.N * r.V) * 4, grads_off = loss_off + STATE_LOSS_FLOATS * 4,
                 trailer = grads_off + (size_t)r.P * 4, floats_off = trailer + TRAILER_INTS * 4,
                 stream_off = floats_off + TRAILER_FLOATS * 4;
    const unsigned char *b = fx->bytes;
    r.params = (const float *)(const void *)(b + HEADER_INTS * 4);
    r.x = (const int32_t *)(const void *)(b + x_off), r.y = (const int32_t *)(const void *)(b + y_off);
    r.logits = (const float *)(const void *)(b + logits_off);
    r.loss = float_at(fx, loss_off, 0);
    r.grads = (const float *)(const void *)(b + grads_off);
    r.floats = (const float *)(const void *)(b + floats_off);
    r.steps = int_at(fx, trailer, TR_STEPS);
    r.stream = (const int32_t *)(const void *)(b + stream_off);
    r.losses = (const float *)(const void *)(b + stream_off + (size_t)int_at(fx, trailer, TR_STREAM) * 4);
    assert_int_equal(r.steps, EXPECTED_STEPS);

    struct config *c = &r.cfg;
    config_defaults(c);
    c->arch = ARCH_LLAMA;
    c->n_layer = int_at(fx, 0, H_LAYERS), c->d_model = int_at(fx, 0, H_EMBD), c->n_head = int_at(fx, 0, H_HEADS);
    c->n_kv_head = int_at(fx, 0, H_KV_HEADS), c->vocab_size = (int)r.V, c->seq_len = T, c->micro_batch = B;
    c->ffn_dim = (int)hidden_of(c->d_model, int_at(fx, 0, H_FFN_MULT), int_at(fx, 0, H_MULTIPLE_OF));
    c->norm_eps = r.floats[TF_NORM_EPS], c->rope_theta = (float)int_at(fx, 0, H_ROPE_THETA);
    c->rope_scaled = int_at(fx, 0, H_SCALED_ROPE) != 0;
    c->param_dtype = c->grad_dtype = c->act_dtype = DTYPE_FP32;
    c->gemm_dtype = GEMM_DTYPE_FP32, c->zero = 0, c->threads = 1;
    /* the reference's AdamW: constant lr, no clipping, decay on matrices */
    c->optimizer = OPTIM_ADAMW, c->lr = r.floats[3], c->beta1 = r.floats[4], c->beta2 = r.floats[5];
    c->eps = r.floats[6], c->weight_decay = r.floats[7], c->grad_clip = 0.0f;
    c->lr_schedule = LR_CONSTANT, c->warmup_steps = 0, c->decay_targets = DECAY_MATRICES;
    char err[CONFIG_ERR_LEN];
    if (config_validate(c, err) != 0) fail_msg("the fixture's config: %s", err);
    return r;
}

/* Where the layout's tensor t starts in write_tensors' order: wte, each
 * layer kind over all layers, lnfw, lm_head. */
static size_t reference_offset(const struct model_layout *lay, const struct tensor_info *t) {
    const size_t L = (size_t)lay->shape.L, wte = layout_embed_tensor(lay, EMB_WTE).numel;
    size_t layers = 0;
    for (int k = 0; k < lay->n_layer_kinds; k++)
        layers += L * layout_layer_tensor(lay, 0, (enum layer_tensor)lay->layer_kinds[k]).numel;
    if (t->kind == UNIT_EMBED) return 0;
    if (t->kind == UNIT_HEAD) return wte + layers + (t->id == HEAD_LM ? (size_t)lay->shape.C : 0);
    size_t before = 0;
    for (int k = 0; k < lay->n_layer_kinds && lay->layer_kinds[k] != t->id; k++)
        before += L * layout_layer_tensor(lay, 0, (enum layer_tensor)lay->layer_kinds[k]).numel;
    return wte + before + (size_t)t->layer * t->numel;
}

/* The fixture's values (write_tensors' order) in the layout's order, and back. */
static void to_layout(const struct model_layout *lay, const float *ref, float *out) {
    for (int k = 0; k < layout_num_tensors(lay); k++) {
        struct tensor_info t = layout_tensor(lay, k);
        memcpy(out + t.offset, ref + reference_offset(lay, &t), t.numel * sizeof *out);
    }
}

struct run {
    struct config cfg;
    struct grid grid;
    struct mem_tracker mem;
    struct exec_ctx fc;
    struct engine e;
};

static struct run *run_with(const struct reference *r, const struct config *c) {
    struct run *h = calloc(1, sizeof *h);
    assert_non_null(h);
    h->cfg = *c;
    h->fc.bf16_reference = c->gemm_dtype == GEMM_DTYPE_BF16; /* --gemm_kernel reference */
    grid_init_single(&h->grid);
    fixture_engine_init(&h->e, &h->cfg, &h->grid, &h->mem, &h->fc);
    assert_int_equal(h->e.lay.total, (size_t)r->P); /* the planner's count, the fixture's */
    float *w = malloc((size_t)r->P * sizeof *w);
    assert_non_null(w);
    to_layout(&h->e.lay, r->params, w);
    fixture_set_weights(&h->e, w);
    free(w);
    return h;
}

static struct run *run_new(const struct reference *r) { return run_with(r, &r->cfg); }

static void run_free(struct run *h) {
    engine_free(&h->e);
    mem_free_all(&h->mem);
    free(h);
}

/* Each tensor's gradient (fp32 or bf16) against the reference's: max |diff|
 * within rtol of the tensor's largest; the worst ratio printed. Non-zero
 * when one is not. */
static int grads_within(struct engine *e, const float *want, double rtol) {
    const bool b16 = e->z.o.grad_dtype == DTYPE_BF16;
    double worst = 0.0;
    int bad = 0;
    for (int k = 0; k < layout_num_tensors(&e->lay); k++) {
        struct tensor_info t = layout_tensor(&e->lay, k);
        double mx = 0.0, diff = 0.0;
        for (size_t i = t.offset; i < t.offset + t.numel; i++) {
            double g = b16 ? bf16_to_f32(((const bf16 *)e->z.st.grads)[i]) : ((const float *)e->z.st.grads)[i];
            mx = fmax(mx, fabs((double)want[i]));
            diff = fmax(diff, fabs(g - want[i]));
        }
        worst = fmax(worst, mx > 0.0 ? diff / mx : INFINITY);
        if (!(mx > 0.0 && diff <= rtol * mx)) {
            fprintf(stderr, "  %s (layer %d): max |grad| %.3g, max |diff| %.3g\n", t.name, t.layer, mx, diff);
            bad++;
        }
    }
    printf("  every parameter's gradient within %.0e of its tensor's largest (worst %.2g)\n", rtol, worst);
    return bad;
}

static void test_logits_loss_and_gradients(void **state) {
    (void)state;
    struct reference r = reference_of();
    struct run *h = run_new(&r);
    struct engine *e = &h->e;
    /* the forward alone keeps the logits */
    float loss = fixture_forward(e, r.x, r.y);
    const float *logits = e->model.slot[0].logits;
    double worst = 0.0;
    for (int64_t i = 0; i < r.N * r.V; i++) worst = fmax(worst, fabs((double)logits[i] - r.logits[i]));
    printf("  logits: max |diff| %.3g; loss %.7f, reference %.7f\n", worst, (double)loss, (double)r.loss);
    assert_true(worst <= LOGIT_ATOL);
    assert_true(fabs((double)loss - r.loss) <= LOSS_ATOL);

    engine_zero_grads(e);
    fixture_forward_backward(e, r.x, r.y, 1.0f);
    float *want = malloc((size_t)r.P * sizeof *want);
    assert_non_null(want);
    to_layout(&e->lay, r.grads, want);
    assert_int_equal(grads_within(e, want, GRAD_RTOL), 0);
    free(want);
    run_free(h);
    free(r.fx.bytes);
}

static void test_ten_adamw_steps(void **state) {
    (void)state;
    struct reference r = reference_of();
    struct run *h = run_new(&r);
    struct engine *e = &h->e;
    double worst = 0.0;
    for (int s = 0; s < r.steps; s++) {
        const int32_t *x = r.stream + (size_t)s * (size_t)r.N;
        engine_zero_grads(e);
        float loss = fixture_forward_backward(e, x, x + 1, 1.0f);
        struct fixture_step st = fixture_optimizer_step(e, s, false);
        assert_false(st.skipped);
        printf("  step %d: loss %.6f, reference %.6f\n", s, (double)loss, (double)r.losses[s]);
        worst = fmax(worst, fabs((double)loss - r.losses[s]));
    }
    printf("  worst step loss |diff| %.3g\n", worst);
    assert_true(worst <= STEP_LOSS_ATOL);
    /* training lowered the loss: the comparison is of a model that learns */
    assert_true(r.losses[r.steps - 1] < r.losses[0]);
    run_free(h);
    free(r.fx.bytes);
}

/* The bf16 data path on the reference's weights (rounded to bf16 as the
 * params hold them) and batch. */
static void test_bf16_data_path(void **state) {
    (void)state;
    struct reference r = reference_of();
    struct config c = r.cfg;
    c.param_dtype = c.grad_dtype = c.act_dtype = DTYPE_BF16;
    c.gemm_dtype = GEMM_DTYPE_BF16, c.gemm_kernel = GEMM_KERNEL_REFERENCE;
    struct run *h = run_with(&r, &c);
    struct engine *e = &h->e;
    engine_zero_grads(e);
    float loss = fixture_forward_backward(e, r.x, r.y, 1.0f);
    printf("  bf16 data path: loss %.6f, reference %.6f\n", (double)loss, (double)r.loss);
    assert_true(fabs((double)loss - r.loss) <= BF16_LOSS_ATOL);
    float *want = malloc((size_t)r.P * sizeof *want);
    assert_non_null(want);
    to_layout(&e->lay, r.grads, want);
    assert_int_equal(grads_within(e, want, BF16_GRAD_RTOL), 0);
    free(want);
    run_free(h);
    free(r.fx.bytes);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_loss_and_gradients),
        cmocka_unit_test(test_ten_adamw_steps),
        cmocka_unit_test(test_bf16_data_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
