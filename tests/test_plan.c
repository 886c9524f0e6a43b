/* The planner's theory against the worked examples: the seeds' LLaMA-3-70B
 * problems, ZeRO's Figure 1, published parameter totals, Narayanan eq. 2,
 * ring-collective volumes and Korthikanti's activation formula. Run from
 * the repository root (configs are loaded by relative path). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "config.h"
#include "theory.h"

static void load(struct config *c, const char *path) {
    char err[CONFIG_ERR_LEN];
    config_defaults(c);
    if (config_load_file(c, path, err) != 0) fail_msg("%s", err);
}

static void set(struct config *c, const char *key, const char *value) {
    char err[CONFIG_ERR_LEN];
    if (config_set(c, key, value, err) != 0) fail_msg("%s", err);
}

/* |got - want| <= rel * |want| */
#define assert_near(got, want, rel)                                                                    \
    do {                                                                                               \
        double g_ = (got), w_ = (want);                                                                \
        if (!(fabs(g_ - w_) <= (rel)*fabs(w_))) fail_msg("%s = %.6g, want %.6g within %g%%", #got, g_, w_, \
                                                         100.0 * (rel));                               \
    } while (0)

static struct theory_params params_of(const char *path) {
    struct config c;
    struct theory_model m;
    load(&c, path);
    theory_model_from_config(&m, &c);
    return theory_param_count(&m);
}

/* The seed's 70B input: 4.59e14 FLOP/s chips, 8960 of them, 40% MFU,
 * 15e12 tokens, 4e6-token batches, 96 GB, 4 checkpoints per layer. */
static void plan_70b(struct theory_plan *pl) {
    struct config c;
    load(&c, "configs/llama3-70b.conf");
    struct theory_plan_input in = {.devices = 8960, .memory = 96e9, .peak_flops = 4.59e14, .mfu = 0.4,
                                   .tokens = 15e12, .batch_tokens = 4e6, .link_bandwidth = 4.5e10, .watts = 700,
                                   .zero_stage = 1, .recompute = RECOMPUTE_SELECTIVE, .ckpt_per_layer = 4};
    theory_plan(pl, &c, &in);
}

static void test_llama3_70b_params(void **state) {
    (void)state;
    struct theory_params p = params_of("configs/llama3-70b.conf");
    assert_near(p.total, 70.5e9, 0.005);
    assert_near(p.ffn, 56.4e9, 0.01);
    assert_near(p.embedding, 2.1e9, 0.01);
    assert_near(p.attention, 12.1e9, 0.01);
    assert_near(p.total, 70.4e9, 0.005); /* the seed's rounded sum */
    assert_true(p.position == 0.0);      /* RoPE */
    assert_true(p.padding == 0.0);
    assert_near(p.embedding + p.position + p.attention + p.ffn + p.norms, p.total, 1e-12);
}

static void test_published_totals_exact(void **state) {
    (void)state;
    struct theory_params p8 = params_of("configs/llama3-8b.conf");
    assert_true(p8.total == 8030261248.0);

    /* LLaMA-2-7B: MHA (n_kv = a), F 11008, V 32000 (THEORY.md 4.5). */
    struct config c;
    struct theory_model m;
    load(&c, "configs/llama3-8b.conf");
    set(&c, "n_kv_head", "32");
    set(&c, "ffn_dim", "11008");
    set(&c, "vocab_size", "32000");
    set(&c, "seq_len", "4096");
    theory_model_from_config(&m, &c);
    assert_true(theory_param_count(&m).total == 6738415616.0);
}

static void test_gpt3_175b_narayanan_eq2(void **state) {
    (void)state;
    struct config c;
    struct theory_model m;
    load(&c, "configs/gpt3-175b.conf");
    theory_model_from_config(&m, &c);
    struct theory_params p = theory_param_count(&m);
    assert_near(p.total, 174.6e9, 0.001);
    /* eq. 2: 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh)); ours adds the final
     * LayerNorm's 2h. */
    double l = m.L, h = m.h;
    double eq2 = 12 * l * h * h * (1 + 13 / (12 * h) + (m.V + m.s) / (12 * l * h));
    assert_near(p.total, eq2 + 2 * h, 1e-12);
    assert_true(m.Vp == 50304 && p.padding == (50304.0 - 50257.0) * h);
}

static void test_llama3_70b_flops_and_time(void **state) {
    (void)state;
    struct theory_plan *pl = malloc(sizeof *pl);
    assert_non_null(pl);
    plan_70b(pl);
    assert_near(pl->flops.dense, 4.2e11, 0.01);
    assert_near(pl->total_flops_dense, 6.3e24, 0.01);
    double days = pl->seconds_dense / 86400.0;
    assert_true(days > 43.5 && days < 45.5); /* seed: 3.8e6 s, "about 44 days" */
    /* PaLM's attention term: 12 L a d_h s. */
    assert_near(pl->flops.attention, 12.0 * 80 * 64 * 128 * 8192, 1e-12);
    assert_near(pl->energy_dense_j, pl->seconds_dense * 8960 * 700, 1e-12);
    free(pl);
}

static void test_llama3_70b_seed_memory(void **state) {
    (void)state;
    struct theory_plan *pl = malloc(sizeof *pl);
    assert_non_null(pl);
    plan_70b(pl);
    assert_near(pl->ckpt.params, 140e9, 0.01);
    assert_near(pl->ckpt.optimizer, 560e9, 0.01);
    assert_near(pl->ckpt.checkpoints, 20.9e12, 0.005);
    assert_near(pl->ckpt.total, 21.6e12, 0.005);
    /* 21.6e12 / 96e9 = 225 in the seed; unrounded 225.8, so 226 whole chips. */
    assert_near(pl->ckpt_devices_ratio, 225.0, 0.005);
    assert_true(pl->ckpt_min_devices >= 225 && pl->ckpt_min_devices <= 226);
    assert_near(pl->ckpt_per_device, 2.4e9, 0.01);
    free(pl);
}

static void test_zero_figure1(void **state) {
    (void)state;
    const double psi = 7.5e9, GB = 1e9;
    double want[4] = {120.0, 31.4, 16.6, 1.875};
    for (int z = 0; z < 4; z++) {
        struct theory_state s = theory_model_state_bytes(2, 2, 12, psi, z, 64);
        assert_near(s.total / GB, want[z], 0.01);
        assert_near(s.params + s.grads + s.optimizer, s.total, 1e-12);
    }
    /* The paper prints 1.9 for ZeRO-3: 1.875 rounded to one decimal. */
    double z3 = theory_model_state_bytes(2, 2, 12, psi, 3, 64).total / GB;
    assert_true(round(z3 * 10) / 10 == 1.9);
    /* A single rank holds everything at every stage. */
    assert_near(theory_model_state_bytes(2, 4, 12, psi, 3, 1).total, 18 * psi, 1e-12);
}

static void test_comm_volumes(void **state) {
    (void)state;
    const double psi = 1e9;
    const int N = 8;
    assert_near(theory_dp_step_bytes(psi, 2, 2, 0, N, 1), 2.0 * 7 / 8 * psi * 2, 1e-12);
    assert_near(theory_dp_step_bytes(psi, 2, 4, 1, N, 4), 7.0 / 8 * psi * (4 + 2), 1e-12);
    assert_near(theory_dp_step_bytes(psi, 2, 2, 2, N, 4), 4 * 7.0 / 8 * psi * 2 + 7.0 / 8 * psi * 2, 1e-12);
    assert_near(theory_dp_step_bytes(psi, 2, 2, 3, N, 1), 7.0 / 8 * psi * (2 + 2 * 2), 1e-12);
    assert_true(theory_dp_step_bytes(psi, 2, 2, 0, 1, 1) == 0.0);

    struct config c;
    struct theory_model m;
    load(&c, "configs/llama3-70b.conf");
    theory_model_from_config(&m, &c);
    double bsh = 2.0 * 8192 * 8192;
    assert_near(theory_tp_layer_bytes(&m, 2, 4, 2, RECOMPUTE_NONE, false), 8 * bsh * 3.0 / 4 * 2, 1e-12);
    /* full recompute re-runs one g (the attention projection's), not two */
    assert_near(theory_tp_layer_bytes(&m, 2, 4, 2, RECOMPUTE_FULL, false), 10 * bsh * 3.0 / 4 * 2, 1e-12);
    assert_near(theory_tp_layer_bytes(&m, 2, 4, 2, RECOMPUTE_SELECTIVE, false), 8 * bsh * 3.0 / 4 * 2, 1e-12);
    assert_int_equal(theory_tp_layer_allreduces(RECOMPUTE_FULL), 5);
    /* sequence parallelism as gpt.c issues it: 4 reduce-scatters and 6
     * all-gathers of b s h (the backward gathers ln1 and ln2 again), (t-1)/t
     * each, and the RMSNorms' gains (2 h fp32) all-reduced: 10/8 of the
     * all-reduces it replaces plus the gains; full recompute 5 and 8 */
    double gains = 2.0 * 2 * 8192 * 4 * 3.0 / 4;
    assert_near(theory_tp_norm_grad_bytes(&m), 2.0 * 8192 * 4, 1e-12);
    assert_near(theory_tp_layer_bytes(&m, 2, 4, 2, RECOMPUTE_NONE, true), 10 * bsh * 3.0 / 4 * 2 + gains,
                1e-12);
    assert_near(theory_tp_layer_bytes(&m, 2, 4, 2, RECOMPUTE_FULL, true), 13 * bsh * 3.0 / 4 * 2 + gains,
                1e-12);
    struct theory_tp_layer_calls k = theory_tp_layer_collectives(RECOMPUTE_SELECTIVE, true);
    assert_int_equal(k.all_reduces, 0), assert_int_equal(k.reduce_scatters, 4);
    assert_int_equal(k.all_gathers, 6), assert_int_equal(k.norm_all_reduces, 1);
    assert_near(theory_pp_boundary_bytes(&m, 2, 16, 1, false, 2), 2 * 16 * bsh * 2, 1e-12);
    assert_near(theory_pp_boundary_bytes(&m, 2, 16, 4, true, 2), 2 * 16 * bsh * 2 / 4, 1e-12);
}

static void test_korthikanti_small(void **state) {
    (void)state;
    struct config c;
    struct theory_model m;
    config_defaults(&c); /* gpt2 arch */
    set(&c, "n_layer", "2");
    set(&c, "d_model", "32");
    set(&c, "n_head", "4");
    set(&c, "seq_len", "16");
    theory_model_from_config(&m, &c);
    const double s = 16, b = 2, h = 32, a = 4, sbh = s * b * h;
    assert_near(theory_activation_layer_bytes(&m, b, 1, false, RECOMPUTE_NONE),
                34 * sbh + 5 * a * s * s * b, 1e-12);
    assert_near(theory_activation_layer_bytes(&m, b, 1, false, RECOMPUTE_SELECTIVE), 34 * sbh, 1e-12);
    assert_near(theory_activation_layer_bytes(&m, b, 1, false, RECOMPUTE_FULL), 2 * sbh, 1e-12);
    assert_near(theory_activation_layer_bytes(&m, b, 2, false, RECOMPUTE_NONE),
                sbh * (10 + 24.0 / 2 + 5 * a * s / (h * 2)), 1e-12);
    assert_near(theory_activation_layer_bytes(&m, b, 2, true, RECOMPUTE_NONE),
                sbh / 2 * (34 + 5 * a * s / h), 1e-12);
    assert_near(theory_activation_layer_bytes(&m, b, 4, true, RECOMPUTE_SELECTIVE), 34 * sbh / 4, 1e-12);
}

static void test_hardware_flops(void **state) {
    (void)state;
    struct config c;
    struct theory_model m;
    load(&c, "configs/llama3-8b.conf");
    theory_model_from_config(&m, &c);
    double psi = theory_param_count(&m).total;
    struct theory_flops f = theory_flops_per_token(&m, psi);
    assert_near(theory_hardware_flops_per_token(&m, psi, RECOMPUTE_NONE), f.model, 1e-12);
    assert_near(theory_hardware_flops_per_token(&m, psi, RECOMPUTE_FULL), f.model * 4 / 3, 1e-12);
    assert_near(theory_hardware_flops_per_token(&m, psi, RECOMPUTE_SELECTIVE), f.dense + 2 * f.attention,
                1e-12);
}

static void test_layouts_and_smallest_fit(void **state) {
    (void)state;
    struct theory_plan *pl = malloc(sizeof *pl);
    assert_non_null(pl);
    plan_70b(pl);
    assert_true(pl->n_layouts >= 5);
    int fits = 0;
    for (int i = 0; i < pl->n_layouts; i++) {
        const struct theory_layout *l = &pl->layouts[i];
        const struct theory_layout_eval *e = &pl->evals[i];
        assert_int_equal(l->tp * (l->cp > 1 ? l->cp : 1) * l->pp * l->dp, 8960);
        assert_near(e->memory, e->state.total + e->activations, 1e-12);
        assert_true(e->comm_bound == (e->comm_s > e->compute_s));
        fits += e->fits;
    }
    assert_true(fits > 0);
    /* Smallest fit: a layout of that size fits, none smaller does. */
    int n = pl->smallest_fit;
    assert_true(n > 1);
    const struct theory_layout *best = &pl->smallest_layout;
    assert_int_equal(best->tp * (best->cp > 1 ? best->cp : 1) * best->pp * best->dp, n);
    struct config c;
    struct theory_model m;
    load(&c, "configs/llama3-70b.conf");
    theory_model_from_config(&m, &c);
    struct theory_dtypes dt = theory_dtypes_from_config(&c);
    double psi = pl->params.total;
    assert_int_equal(theory_smallest_fit(&m, &dt, psi, 1, 4e6, 1, RECOMPUTE_SELECTIVE, 96e9, n - 1, NULL), 0);
    struct theory_cluster cl = {.devices = n, .memory = 96e9, .peak_flops = 4.59e14, .mfu = 0.4,
                                .link_bandwidth = 4.5e10};
    struct theory_layout_eval e = theory_layout_evaluate(&m, &dt, psi, 1, 4e6, best, &cl);
    assert_true(e.fits && e.memory <= 96e9);
    free(pl);
}

/* LLaMA 3 405B (Dubey et al. 2024, Table 4) on 16,384 H100s (80 GB), a
 * 16M-token batch (2^24: 128 sequences of 131,072), ZeRO-2, selective
 * recompute (no s x s scores kept): at sequence 131,072 the paper's TP 8 x CP 16 x PP 16 x DP 8
 * fits and TP 8 x PP 16 x DP 128 (no CP) does not; at 8,192 the latter
 * fits. A CP rank's activations are the model's at s/cp, its ZeRO shards
 * over DP x CP, and the ring's traffic is (cp - 1) + (2 cp - 1) blocks of
 * b s/cp 2 n_kv d_h / t per layer, + (cp - 1) for full recompute. */
static void test_llama3_405b_context_parallel(void **state) {
    (void)state;
    struct config c;
    load(&c, "configs/llama3-405b.conf");
    struct theory_plan_input in = {.devices = 16384, .memory = 80e9, .peak_flops = 989e12, .mfu = 0.4,
                                   .tokens = 15e12, .batch_tokens = 1 << 24, .link_bandwidth = 4.5e10,
                                   .zero_stage = 2, .recompute = RECOMPUTE_SELECTIVE, .ckpt_per_layer = 4,
                                   .n_requested = 2,
                                   .requested = {{.tp = 8, .cp = 16, .pp = 16}, {.tp = 8, .cp = 1, .pp = 16}}};
    struct theory_plan *pl = malloc(sizeof *pl);
    assert_non_null(pl);
    set(&c, "seq_len", "131072");
    theory_plan(pl, &c, &in);
    assert_int_equal(pl->requested[0].dp, 8);
    assert_int_equal(pl->requested[1].dp, 128);
    assert_true(pl->requested_evals[0].fits && pl->requested_evals[0].memory <= 80e9);
    assert_false(pl->requested_evals[1].fits);
    assert_true(pl->requested_evals[1].memory > 80e9);
    /* the CP layout's activations: the model's at s/16 */
    struct theory_model m = pl->model, local = m;
    local.s = m.s / 16;
    double mm = pl->requested_evals[0].micro_batches;
    assert_near(pl->requested_evals[0].activations,
                theory_activation_device_bytes(&local, 1, 8, 16, mm, true, RECOMPUTE_SELECTIVE), 1e-12);
    assert_near(pl->requested_evals[0].state.total,
                theory_model_state_bytes(2, 2, 12, pl->params.total / 128, 2, 8 * 16).total, 1e-12);
    double kv = 1.0 * (131072 / 16) * 2 * m.n_kv * m.d_h / 8 * 2; /* bf16 */
    assert_near(theory_cp_layer_bytes(&m, 1, 8, 16, 2, RECOMPUTE_FULL), (15 + 31 + 15) * kv, 1e-12);
    assert_true(theory_cp_layer_bytes(&m, 1, 8, 1, 2, RECOMPUTE_FULL) == 0);
    /* the search holds CP layouts */
    int with_cp = 0;
    for (int i = 0; i < pl->n_layouts; i++) with_cp += pl->layouts[i].cp > 1;
    assert_true(with_cp > 0);
    set(&c, "seq_len", "8192");
    theory_plan(pl, &c, &in);
    assert_true(pl->requested_evals[1].fits);
    free(pl);
}

/* The GPU peaks MFU is usually quoted against: A100 312e12, H100/H200 SXM
 * 989e12 dense bf16. */
static void test_device_table(void **state) {
    (void)state;
    assert_true(theory_device_find("a100")->peak_flops == 312e12);
    assert_true(theory_device_find("h100")->peak_flops == 989e12);
    assert_true(theory_device_find("h200")->peak_flops == 989e12);
    assert_true(theory_device_find("h200")->memory == 141e9);
    assert_null(theory_device_find("h300"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama3_70b_params),
        cmocka_unit_test(test_published_totals_exact),
        cmocka_unit_test(test_gpt3_175b_narayanan_eq2),
        cmocka_unit_test(test_llama3_70b_flops_and_time),
        cmocka_unit_test(test_llama3_70b_seed_memory),
        cmocka_unit_test(test_zero_figure1),
        cmocka_unit_test(test_comm_volumes),
        cmocka_unit_test(test_korthikanti_small),
        cmocka_unit_test(test_hardware_flops),
        cmocka_unit_test(test_layouts_and_smallest_fit),
        cmocka_unit_test(test_llama3_405b_context_parallel),
        cmocka_unit_test(test_device_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
