/* The planner's theory against the worked examples: the seeds' LLaMA-3-70B
 * problems, ZeRO's Figure 1, published parameter totals, Narayanan eq. 2,
 * ring-collective volumes and Korthikanti's activation formula. Run from
 * the repository root (configs are loaded by relative path). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../train/config/config.h"
#include "../train/theory/plan.h"
#include "../train/theory/theory.h"

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

/* LLaMA 3 405B (Dubey et al. 2024, Table 4) on 16,384 H100s (80 GiB), a
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
    const double memory = 80 * THEORY_GIB;
    struct theory_plan_input in = {.devices = 16384, .memory = memory, .peak_flops = 989e12, .mfu = 0.4,
                                   .tokens = 15e12, .batch_tokens = 1 << 24, .link_bandwidth = 450e9,
                                   .zero_stage = 2, .recompute = RECOMPUTE_SELECTIVE, .ckpt_per_layer = 4,
                                   .n_requested = 2,
                                   .requested = {{.tp = 8, .cp = 16, .pp = 16}, {.tp = 8, .cp = 1, .pp = 16}}};
    struct theory_plan *pl = malloc(sizeof *pl);
    assert_non_null(pl);
    set(&c, "seq_len", "131072");
    theory_plan(pl, &c, &in);
    assert_int_equal(pl->requested[0].dp, 8);
    assert_int_equal(pl->requested[1].dp, 128);
    assert_true(pl->requested_evals[0].fits && pl->requested_evals[0].memory <= memory);
    assert_false(pl->requested_evals[1].fits);
    assert_true(pl->requested_evals[1].memory > memory);
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
 * 989e12 dense bf16. Memory is the data sheets' GB read as GiB (an H100's
 * "80GB" is 80 x 2^30 = 85,899,345,920 B), links one direction: NVLink 4
 * "900 GB/s" is both directions, 450e9 B/s each; NVLink 3 600 -> 300e9; the
 * TPU v5p's ICI link the seeds' 4.5e10 B/s. */
static void test_device_table(void **state) {
    (void)state;
    assert_true(theory_device_find("a100")->peak_flops == 312e12);
    assert_true(theory_device_find("h100")->peak_flops == 989e12);
    assert_true(theory_device_find("h200")->peak_flops == 989e12);
    assert_true(theory_device_find("h100")->memory == 85899345920.0);
    assert_true(theory_device_find("h200")->memory == 141.0 * 1073741824.0);
    assert_true(theory_device_find("h100")->link_bandwidth == 450e9);
    assert_true(theory_device_find("h200")->link_bandwidth == 450e9);
    assert_true(theory_device_find("a100")->link_bandwidth == 300e9);
    assert_true(theory_device_find("tpu-v5p")->link_bandwidth == 4.5e10);
    assert_null(theory_device_find("h300"));
}

/* The inter-node link (DGX H100/H200: one 400 Gb/s NDR InfiniBand NIC per
 * GPU, 50e9 B/s one direction; DGX A100: 200 Gb/s HDR, 25e9; 8 GPUs on a
 * node's NVLink; the TPU v5p's ICI one network). A group of devices
 * spanning more than a node (tp innermost, then cp, dp, pp) moves its
 * bytes at that link, one within a node at NVLink: on 64 H100s, TP 8 x
 * PP 2 x DP 4 keeps TP on the node's NVLink while DP (span 32) and PP
 * cross nodes, so DP's time is its bytes / 50e9, TP's / 450e9; on one
 * node (8 devices) DP runs at 450e9. --device fills the link and the node
 * size unless given; --json and the text say them. */
static void test_inter_node_link(void **state) {
    (void)state;
    const struct theory_device *h100 = theory_device_find("h100");
    assert_true(h100->inter_node_bandwidth == 50e9 && h100->devices_per_node == 8);
    assert_true(theory_device_find("h200")->inter_node_bandwidth == 50e9);
    assert_true(theory_device_find("a100")->inter_node_bandwidth == 25e9);
    assert_true(theory_device_find("tpu-v5p")->devices_per_node == 0);
    struct config c;
    struct theory_model m;
    load(&c, "configs/llama3-8b.conf");
    theory_model_from_config(&m, &c);
    struct theory_dtypes dt = theory_dtypes_from_config(&c);
    double psi = theory_param_count(&m).total;
    struct theory_cluster cl = {.devices = 64, .memory = h100->memory, .peak_flops = h100->peak_flops, .mfu = 0.4,
                                .link_bandwidth = 450e9, .inter_node_bandwidth = 50e9, .devices_per_node = 8};
    struct theory_layout lay = {.tp = 8, .cp = 1, .pp = 2, .dp = 4, .zero_stage = 1,
                                .recompute = RECOMPUTE_SELECTIVE, .sequence_parallel = true};
    struct theory_layout_eval e = theory_layout_evaluate(&m, &dt, psi, 1, 4e6, &lay, &cl);
    assert_false(e.tp_inter);
    assert_true(e.dp_inter && e.pp_inter);
    struct theory_cluster one_net = cl;
    one_net.inter_node_bandwidth = 0; /* one network: every group at 450e9 */
    struct theory_layout_eval f = theory_layout_evaluate(&m, &dt, psi, 1, 4e6, &lay, &one_net);
    assert_false(f.dp_inter || f.pp_inter);
    assert_near(e.dp_comm_s, f.dp_comm_s * 450e9 / 50e9, 1e-9);
    assert_near(e.tp_comm_s, f.tp_comm_s, 1e-15);
    /* one node: nothing crosses */
    struct theory_layout node = {.tp = 2, .cp = 1, .pp = 1, .dp = 4, .zero_stage = 1,
                                 .recompute = RECOMPUTE_SELECTIVE, .sequence_parallel = true};
    struct theory_layout_eval g = theory_layout_evaluate(&m, &dt, psi, 1, 4e6, &node, &cl);
    assert_false(g.tp_inter || g.cp_inter || g.dp_inter || g.pp_inter);
}

enum { WORDS_LEN = 1024, MAX_WORDS = 32 };

/* argv from a string of words (at most 32) cut in buf (the caller's: the
 * options point into it), then plan_parse_args; the messages go to
 * *err_text (freed by the caller). */
static int parse_words(const char *words, char buf[WORDS_LEN], struct plan_opts *o, struct config *c,
                       char **err_text) {
    char *argv[MAX_WORDS + 1] = {"plan"};
    int argc = 1;
    snprintf(buf, WORDS_LEN, "%s", words);
    for (char *w = strtok(buf, " "); w && argc <= MAX_WORDS; w = strtok(NULL, " ")) argv[argc++] = w;
    size_t n = 0;
    FILE *err = open_memstream(err_text, &n);
    assert_non_null(err);
    int rc = plan_parse_args(argc, argv, o, c, err);
    fclose(err);
    return rc;
}

/* A refusal: non-zero, and the message names the flag. */
static void refused(const char *words, const char *flag) {
    struct plan_opts o;
    struct config c;
    char *msg = NULL, buf[WORDS_LEN];
    int rc = parse_words(words, buf, &o, &c, &msg);
    if (rc != -1 || !strstr(msg, flag)) fail_msg("'%s': rc %d, message '%s' (want one naming %s)", words, rc, msg, flag);
    free(msg);
}

static void accepted(const char *words, char buf[WORDS_LEN], struct plan_opts *o, struct config *c) {
    char *msg = NULL;
    int rc = parse_words(words, buf, o, c, &msg);
    if (rc != 0) fail_msg("'%s': rc %d, message '%s'", words, rc, msg);
    free(msg);
}

/* Counts refuse fractions; every value is range-checked; --device fills
 * memory, peak and link unless given; --device-memory is GiB. */
static void test_plan_flags(void **state) {
    (void)state;
    refused("--config configs/llama3-8b.conf --devices 3.5", "--devices");
    refused("--devices 0", "--devices");
    refused("--tokens 1.5", "--tokens");
    refused("--batch-tokens 4e6.5", "--batch-tokens");
    refused("--zero-stage 1.5", "--zero-stage");
    refused("--zero-stage 4", "--zero-stage");
    refused("--ckpt-per-layer 2.5", "--ckpt-per-layer");
    refused("--layout 8,1", "--layout");
    refused("--layout 8.5,1,1", "--layout");
    refused("--layout 99999999999,1,1", "--layout");
    refused("--devices 1024 --layout 1024,1024,1024", "--layout");
    refused("--device-memory 96e9", "--device-memory");
    refused("--device-memory 0", "--device-memory");
    refused("--mfu 0", "--mfu");
    refused("--device h300", "--device");
    refused("--recompute-mode some", "--recompute-mode");
    refused("--devices", "--devices");
    refused("--devices=3.5", "--devices");
    refused("--peak-flops 1e-300", "--peak-flops"); /* found by fuzz_plan: inf days */

    struct plan_opts o;
    struct config c;
    char buf[WORDS_LEN];
    accepted("--config configs/llama3-8b.conf --device h100 --devices 16384 --all --json", buf, &o, &c);
    assert_true(o.in.memory == 80.0 * THEORY_GIB && o.in.link_bandwidth == 450e9 && o.in.peak_flops == 989e12);
    assert_true(o.in.devices == 16384 && o.all && o.json);
    accepted("--device h100 --link-bandwidth 5e10 --device-memory 70", buf, &o, &c);
    assert_true(o.in.memory == 70.0 * THEORY_GIB && o.in.link_bandwidth == 5e10);
    assert_true(o.in.inter_node_bandwidth == 50e9 && o.in.devices_per_node == 8); /* the device's */
    accepted("--device h100 --inter-node-bandwidth 2.5e10 --devices-per-node 4", buf, &o, &c);
    assert_true(o.in.inter_node_bandwidth == 2.5e10 && o.in.devices_per_node == 4);
    accepted("--devices 64", buf, &o, &c); /* the seeds' TPU: one network */
    assert_true(o.in.inter_node_bandwidth == 0 && o.in.devices_per_node == 0);
    refused("--devices-per-node 2.5", "--devices-per-node");
    refused("--inter-node-bandwidth -1", "--inter-node-bandwidth");
    accepted("--tokens 15e12 --batch-tokens 4e6 --layout 8,1,16 --devices 16384", buf, &o, &c);
    assert_true(o.in.tokens == 15e12 && o.in.n_requested == 1 && o.in.requested[0].pp == 16);
    /* --flag=value, as the config's keys take it; a --key=value pair keeps
     * the next word (it once swallowed --devices here) */
    accepted("--config=configs/llama3-8b.conf --device=h100 --seq_len=4096 --devices 16", buf, &o, &c);
    assert_true(o.in.devices == 16 && o.in.memory == 80.0 * THEORY_GIB && c.seq_len == 4096);
    assert_string_equal(o.config_path, "configs/llama3-8b.conf");
}

/* A plan from build/plan's words: the options, the config and the words
 * they point into, with the plan (one allocation, freed by the caller). */
struct planned {
    struct theory_plan pl;
    struct plan_opts o;
    struct config c;
    char buf[WORDS_LEN];
};

static struct planned *plan_of(const char *words) {
    struct planned *p = malloc(sizeof *p);
    assert_non_null(p);
    accepted(words, p->buf, &p->o, &p->c);
    theory_plan(&p->pl, &p->c, &p->o.in);
    return p;
}

/* LLaMA 3 405B at Meta's layout (Dubey et al. 2024 Table 4: TP 8, PP 16,
 * DP 128 on 16,384 H100s at s = 8,192, a 16M-token batch), ZeRO-1 over
 * DP as in the seeds' per-device formula (DeepSpeed-Megatron: weights and
 * gradients / (PP TP), optimizer / DP as well), selective recompute:
 *   Psi = 405,853,388,800; Psi / (t p) = Psi / 128 = 3,170,729,600
 *   states = (2 + 2) x 3,170,729,600 + 12 x 3,170,729,600 / 128
 *          = 12,682,918,400 + 297,255,900 = 12,980,174,300 B (12.089 GiB)
 *   B = 2^24 / 8192 = 2048 sequences, m = 2048 / (1 x 128) = 16
 *   a layer (Korthikanti Table 2, SP, no scores): s b h / t x (10 + 4 +
 *     4 n_kv/a + 6 F/h) = 8192 x 16384 / 8 x (14 + 0.25 + 19.5)
 *     = 16,777,216 x 33.75 = 566,231,040 B
 *   stage 0 under 1F1B: min(m, p) = 16 micro-batches of ceil(126/16) = 8
 *     layers: 128 x 566,231,040 = 72,477,573,120 B (67.5 GiB)
 *   total 85,457,747,420 B = 79.589 GiB: fits in 80 GiB (85,899,345,920 B),
 *     not in the 80e9 B the table used to say.
 * Time: executed FLOPs per token with selective recompute 6 Psi + 2 x 12
 * L h s = 2,435,120,332,800 + 405,874,409,472 = 2,840,994,742,272; a step's
 * 2^24 tokens over 16,384 devices at 989e12 x 0.4:
 *   compute = 2,840,994,742,272 x 1024 / 395.6e12 = 7.3538 s
 *   bubble = 7.3538 x 15 / 16 = 6.8942 s; comm (< compute) hidden
 *   step = 14.248 s; days = 15e12 / 2^24 steps x 14.248 s / 86400 = 147.43 */
static void test_llama3_405b_meta_layout_gib(void **state) {
    (void)state;
    struct planned *p = plan_of("--config configs/llama3-405b.conf --device h100 --devices 16384 "
                                "--batch-tokens 16777216 --zero-stage 1 --layout 8,1,16");
    const struct theory_layout_eval *e = &p->pl.requested_evals[0];
    assert_int_equal(p->pl.requested[0].dp, 128);
    assert_true(e->micro_batches == 16.0);
    assert_true(e->step_tokens == 16777216.0);
    assert_near(e->state.total, 12980174300.0, 1e-9);
    assert_near(e->activations, 72477573120.0, 1e-9);
    assert_near(e->memory / THEORY_GIB, 79.589, 1e-4);
    assert_true(e->fits);
    assert_true(e->memory > 80e9);
    assert_near(e->compute_s, 7.3538, 1e-4);
    assert_near(e->bubble_s, 7.3538 * 15 / 16, 1e-4);
    assert_true(e->comm_s < e->compute_s && !e->comm_bound);
    assert_near(e->step_s, 7.3538 * 31 / 16, 1e-4);
    assert_near(e->days, 147.43, 1e-4);
    /* the 4e6-token batch: B = floor(4e6 / 8192) = 488 sequences, so m =
     * floor(488 / 128) = 3 whole micro-batches, 3 x 128 x 8192 tokens */
    free(p);
    p = plan_of("--config configs/llama3-405b.conf --device h100 --devices 16384 --layout 8,1,16");
    assert_true(p->pl.requested_evals[0].micro_batches == 3.0);
    assert_true(p->pl.requested_evals[0].step_tokens == 3.0 * 128 * 8192);
    free(p);
}

/* The table: every layout once, those that fit first by days; the fastest
 * is the first and no fitting layout is faster; days = tokens / step
 * tokens x step / 86400 on each; m whole. */
static void test_plan_fastest_and_table(void **state) {
    (void)state;
    struct planned *p = plan_of("--config configs/llama3-405b.conf --device h100 --devices 16384");
    const struct theory_plan *pl = &p->pl;
    assert_true(pl->n_fit > 0 && pl->fastest == pl->order[0]);
    assert_int_equal(pl->n_table, THEORY_PLAN_TABLE_ROWS);
    int seen[THEORY_PLAN_MAX_LAYOUTS] = {0};
    for (int k = 0; k < pl->n_layouts; k++) {
        const struct theory_layout_eval *e = &pl->evals[pl->order[k]];
        seen[pl->order[k]]++;
        assert_true(e->fits == (k < pl->n_fit));
        assert_true(e->micro_batches == floor(e->micro_batches));
        assert_near(e->days, 15e12 / e->step_tokens * e->step_s / 86400, 1e-12);
        if (e->fits) assert_true(e->days >= pl->evals[pl->fastest].days);
    }
    for (int i = 0; i < pl->n_layouts; i++) assert_int_equal(seen[i], 1);
    /* Meta's PP 16 does not divide 126 layers; the search holds it (a
     * power of 2, stages of 8 layers) */
    int meta = 0;
    for (int i = 0; i < pl->n_layouts; i++)
        meta += pl->layouts[i].tp == 8 && pl->layouts[i].pp == 16 && pl->layouts[i].cp == 1;
    assert_int_equal(meta, 1);
    /* 1 GiB per device: nothing fits; the seed-style count stays a count */
    free(p);
    p = plan_of("--config configs/llama3-405b.conf --device-memory 1");
    assert_int_equal(p->pl.fastest, -1);
    assert_int_equal(p->pl.n_fit, 0);
    assert_true(p->pl.ckpt_min_devices == ceil(p->pl.ckpt.total / THEORY_GIB));
    free(p);
}

/* --json carries the --layout results, the fastest layout and the table's
 * rows, and no nan or inf. */
static void test_plan_json(void **state) {
    (void)state;
    struct planned *p = plan_of("--config configs/llama3-405b.conf --device h100 --devices 16384 --layout 8,1,16");
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    assert_non_null(f);
    plan_print_json(f, &p->pl, &p->o);
    fclose(f);
    assert_non_null(strstr(text, "\"requested\":[{\"tp\":8,\"cp\":1,\"pp\":16,\"dp\":128,"));
    assert_non_null(strstr(text, "\"fastest\":{\"tp\":"));
    assert_non_null(strstr(text, "\"table\":["));
    assert_non_null(strstr(text, "\"device\":\"h100\""));
    assert_non_null(strstr(text, "\"micro_batches\":3,"));
    /* the inter-node link, and TP8 x PP16 x DP128's groups on it: DP and PP span nodes, TP does not */
    assert_non_null(strstr(text, "\"inter_node_bandwidth\":5e+10,\"devices_per_node\":8,"));
    assert_non_null(strstr(text, "\"inter_node\":{\"tp\":false,\"cp\":false,\"pp\":true,\"dp\":true}}]"));
    assert_null(strstr(text, "nan"));
    assert_null(strstr(text, "inf"));
    free(text);
    free(p);
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
        cmocka_unit_test(test_inter_node_link),
        cmocka_unit_test(test_plan_flags),
        cmocka_unit_test(test_llama3_405b_meta_layout_gib),
        cmocka_unit_test(test_plan_fastest_and_table),
        cmocka_unit_test(test_plan_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
