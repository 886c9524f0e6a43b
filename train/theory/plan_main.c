/* build/plan: capacity questions answered from the theory module alone,
 * without training. Planner flags (cluster and layout choices) are parsed
 * here; every other --key goes to the config table, so model keys can be
 * overridden (e.g. --seq_len 4096). All numbers come from theory_plan(). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "theory.h"

/* Defaults: the seeds' LLaMA-3 example, a TPU v5p pod (4.59e14 bf16
 * FLOP/s, 96 GB HBM, 4.5e10 B/s per ICI link one way), 40% MFU, 15e12
 * tokens, 4e6-token batches. Energy needs --watts. */
struct plan_opts {
    struct theory_plan_input in;
    bool json;
    const char *config_path;
    const struct theory_device *device; /* --device: sets memory and peak unless given */
    bool memory_given;
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: plan --config FILE [planner flags] [--key value ...] [--json]\n\n"
            "Planner flags:\n"
            "  --devices N          devices in the cluster (default 8960)\n"
            "  --device NAME        memory and peak FLOP/s from a table: a100-40gb, a100, h100, h100-pcie,\n"
            "                       h100-nvl, h200, tpu-v5p\n"
            "  --device-memory B    bytes of memory per device (default 96e9)\n"
            "  --peak-flops F       peak FLOP/s per device; the config key peak_flops (default 4.59e14)\n"
            "  --mfu X              fraction of peak achieved, in (0, 1] (default 0.4)\n"
            "  --tokens D           training tokens (default 15e12)\n"
            "  --batch-tokens T     tokens per optimizer step (default 4e6)\n"
            "  --link-bandwidth B   bytes/s per device link, one direction (default 4.5e10)\n"
            "  --watts W            power per device for the energy estimate (default 0: not given)\n"
            "  --zero-stage S       ZeRO stage 0..3 for the layout table and smallest fit (default 1)\n"
            "  --recompute-mode M   none|selective|full for the same (default selective)\n"
            "  --layout T,C,P       also judge this layout: TP T x CP C x PP P x DP (the rest of the devices);\n"
            "                       P need not divide L (stages of ceil(L/P) layers); up to 8 of them\n"
            "  --ckpt-per-layer K   checkpoints per layer in the seed-style estimate (default 4)\n"
            "  --json               one JSON object instead of tables\n"
            "  --help               this text and the config keys\n\n");
}

static int parse_number(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end = NULL;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x < lo || x > hi) {
        fprintf(stderr, "plan: bad value '%s' for %s: expected a number in [%g, %g]\n", v, flag, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static bool is_planner_flag(const char *a) {
    static const char *flags[] = {"--devices", "--device", "--device-memory", "--mfu", "--tokens", "--batch-tokens",
                                  "--link-bandwidth", "--watts", "--zero-stage", "--ckpt-per-layer",
                                  "--recompute-mode", "--layout"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strcmp(a, flags[i])) return true;
    return false;
}

/* --layout T,C,P: tp, cp and pp of a layout to judge beside the search's;
 * dp follows from --devices (theory_plan checks that they divide it). */
static int parse_layout(const char *v, struct theory_plan_input *in) {
    int t = 0, cp = 0, p = 0, used = 0;
    if (sscanf(v, "%d,%d,%d%n", &t, &cp, &p, &used) != 3 || v[used] || t < 1 || cp < 1 || p < 1) {
        fprintf(stderr, "plan: bad value '%s' for --layout: expected T,C,P (tp, cp, pp), each at least 1\n", v);
        return -1;
    }
    if (in->n_requested == THEORY_PLAN_MAX_REQUESTED) {
        fprintf(stderr, "plan: more than %d --layout flags\n", THEORY_PLAN_MAX_REQUESTED);
        return -1;
    }
    in->requested[in->n_requested++] = (struct theory_layout){.tp = t, .cp = cp, .pp = p};
    return 0;
}

/* Returns 0, 1 for --help, or -1 after printing the error. Non-planner
 * pairs are copied into rest (argv[0] kept) for config_parse_args. */
static int parse_planner_flags(int argc, char **argv, struct plan_opts *o, int *rest_argc, char **rest) {
    *rest_argc = 0;
    rest[(*rest_argc)++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v && is_planner_flag(a)) {
            fprintf(stderr, "plan: %s needs a value\n", a);
            return -1;
        }
        double x = 0;
        int rc = 0;
        bool mine = true;
        if (!strcmp(a, "--devices")) rc = parse_number(a, v, 1, 1 << 30, &o->in.devices);
        else if (!strcmp(a, "--device-memory")) {
            rc = parse_number(a, v, 1, 1e18, &o->in.memory);
            o->memory_given = true;
        } else if (!strcmp(a, "--device")) {
            o->device = theory_device_find(v);
            if (!o->device) {
                fprintf(stderr, "plan: unknown device '%s'; valid choices are %s\n", v, theory_device_names());
                rc = -1;
            }
        }
        else if (!strcmp(a, "--mfu")) rc = parse_number(a, v, 1e-6, 1, &o->in.mfu);
        else if (!strcmp(a, "--tokens")) rc = parse_number(a, v, 1, 1e20, &o->in.tokens);
        else if (!strcmp(a, "--batch-tokens")) rc = parse_number(a, v, 1, 1e15, &o->in.batch_tokens);
        else if (!strcmp(a, "--link-bandwidth")) rc = parse_number(a, v, 1, 1e18, &o->in.link_bandwidth);
        else if (!strcmp(a, "--watts")) rc = parse_number(a, v, 0, 1e9, &o->in.watts);
        else if (!strcmp(a, "--zero-stage")) {
            rc = parse_number(a, v, 0, 3, &x);
            if (!rc && x != floor(x)) {
                fprintf(stderr, "plan: bad value '%s' for %s: expected 0, 1, 2 or 3\n", v, a);
                rc = -1;
            }
            o->in.zero_stage = (int)x;
        } else if (!strcmp(a, "--ckpt-per-layer")) {
            rc = parse_number(a, v, 1, 1000, &x);
            o->in.ckpt_per_layer = (int)x;
        } else if (!strcmp(a, "--recompute-mode")) {
            const char *names[] = {"none", "selective", "full"};
            rc = -1;
            for (int r = 0; r < 3; r++)
                if (!strcmp(v, names[r])) o->in.recompute = (enum recompute_mode)r, rc = 0;
            if (rc) fprintf(stderr, "plan: bad value '%s' for %s: valid choices are none selective full\n",
                            v, a);
        } else if (!strcmp(a, "--layout")) rc = parse_layout(v, &o->in);
        else mine = false;
        if (rc) return -1;
        if (!strcmp(a, "--config") && v) o->config_path = v;
        if (mine) {
            i++;
            continue;
        }
        rest[(*rest_argc)++] = argv[i]; /* a config --key value pair */
        if (v && !strncmp(a, "--", 2)) rest[(*rest_argc)++] = argv[++i];
    }
    return 0;
}

static int check_model(const struct config *c) {
    if (c->d_model % c->n_head) {
        fprintf(stderr, "plan: n_head (%d) must divide d_model (%d)\n", c->n_head, c->d_model);
        return -1;
    }
    if (c->n_kv_head && c->n_head % c->n_kv_head) {
        fprintf(stderr, "plan: n_kv_head (%d) must divide n_head (%d)\n", c->n_kv_head, c->n_head);
        return -1;
    }
    return 0;
}

static const char *layout_name(const struct theory_layout *l, char *buf, size_t n) {
    if (l->cp > 1) snprintf(buf, n, "TP%d x CP%d x PP%d x DP%d", l->tp, l->cp, l->pp, l->dp);
    else snprintf(buf, n, "TP%d x PP%d x DP%d", l->tp, l->pp, l->dp);
    return buf;
}

static void layout_rows(const struct theory_layout *l, const struct theory_layout_eval *ev, int n) {
    const double GB = 1e9;
    char name[64];
    printf("  %-26s %6s %9s %9s %9s %5s %10s %10s %10s %10s %s\n", "layout", "m", "state GB", "act GB", "total GB",
           "fits", "compute s", "comm s", "(cp s)", "bubble s", "bound");
    for (int i = 0; i < n; i++) {
        const struct theory_layout_eval *e = &ev[i];
        printf("  %-26s %6.1f %9.4g %9.4g %9.4g %5s %10.4g %10.4g %10.4g %10.4g %s\n",
               layout_name(&l[i], name, sizeof name), e->micro_batches, e->state.total / GB, e->activations / GB,
               e->memory / GB, e->fits ? "yes" : (e->batch_ok ? "no" : "batch"), e->compute_s, e->comm_s,
               e->cp_comm_s, e->bubble_s, e->comm_bound ? "communication" : "compute");
    }
}

static void print_text(const struct theory_plan *pl, const struct plan_opts *o, const struct config *c) {
    const struct theory_plan_input *in = &o->in;
    const struct theory_params *p = &pl->params;
    const struct theory_model *m = &pl->model;
    const double GB = 1e9, day = 86400.0;
    char name[64];

    printf("plan: %s  (arch %s, L %d, h %d, a %d, n_kv %d, F %d, V %d, s %d, micro_batch %d)\n",
           o->config_path ? o->config_path : "(defaults)", c->arch == ARCH_LLAMA ? "llama" : "gpt2", m->L, m->h,
           m->a, m->n_kv, m->F, m->V, m->s, c->micro_batch);
    printf("cluster: %.0f devices x %.4g GB, %.4g FLOP/s peak at MFU %.2f, link %.3g B/s\n\n", in->devices,
           in->memory / GB, in->peak_flops, in->mfu, in->link_bandwidth);

    printf("Parameters by part\n");
    printf("  %-26s %16.0f  %8.3g\n", "FFN", p->ffn, p->ffn);
    printf("  %-26s %16.0f  %8.3g\n", "attention", p->attention, p->attention);
    printf("  %-26s %16.0f  %8.3g\n", m->tied_embeddings ? "embeddings (tied)" : "embeddings (in + out)",
           p->embedding, p->embedding);
    printf("  %-26s %16.0f  %8.3g\n", "position embedding", p->position, p->position);
    printf("  %-26s %16.0f  %8.3g\n", "norms", p->norms, p->norms);
    printf("  %-26s %16.0f  %8.4g\n", "total (Psi)", p->total, p->total);
    if (p->padding > 0) printf("  %-26s %16.0f  (V padded to %d in memory; not in Psi)\n", "vocab padding", p->padding, m->Vp);

    printf("\nFLOPs\n");
    printf("  per token, 6 Psi (Kaplan; seeds)         %.4g\n", pl->flops.dense);
    printf("  per token, + 12 L a d_h s (PaLM App. B)  %.4g  (attention %.3g, non-causal)\n", pl->flops.model,
           pl->flops.attention);
    printf("  total for %.3g tokens: %.4g (6 Psi D), %.4g (PaLM)\n", in->tokens, pl->total_flops_dense,
           pl->total_flops_model);
    printf("  time on %.0f devices at MFU %.2f: %.1f days (6 Psi), %.1f days (PaLM)\n", in->devices, in->mfu,
           pl->seconds_dense / day, pl->seconds_model / day);
    if (in->watts > 0)
        printf("  energy at %.0f W/device: %.4g MWh (devices only, 6 Psi time)\n", in->watts,
               pl->energy_dense_j / 3.6e9);
    else printf("  energy: give --watts W\n");

    printf("\nModel states per device over %.0f data-parallel ranks (w_p %.0f, w_g %.0f, K %.4g B/param: %s)\n",
           in->devices, pl->dtypes.w_p, pl->dtypes.w_g, pl->dtypes.K, optim_rule(c->optimizer)->name);
    const char *stage[] = {"DP", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
    printf("  %-8s %12s %12s %12s %12s\n", "", "params GB", "grads GB", "optim GB", "total GB");
    for (int z = 0; z < 4; z++)
        printf("  %-8s %12.4g %12.4g %12.4g %12.4g\n", stage[z], pl->state[z].params / GB,
               pl->state[z].grads / GB, pl->state[z].optimizer / GB, pl->state[z].total / GB);

    printf("\nActivations (Korthikanti 2022 Table 2, b = %d, t = p = 1)\n", c->micro_batch);
    printf("  %-10s %14s %18s\n", "recompute", "per layer GB", "whole model GB");
    for (int r = 0; r < 3; r++)
        printf("  %-10s %14.4g %18.4g\n", theory_recompute_name((enum recompute_mode)r), pl->act_layer[r] / GB,
               pl->act_device[r] / GB);

    printf("\nLayouts on %.0f devices (ZeRO-%d over DP x CP, recompute %s, sequence parallel; batch %.3g tokens; a "
           "CP rank holds s/CP positions: activations / CP, ring traffic in \"cp s\")\n",
           in->devices, in->zero_stage, theory_recompute_name(in->recompute), in->batch_tokens);
    layout_rows(pl->layouts, pl->evals, pl->n_layouts);
    printf("  (\"batch\": fewer than one micro-batch per pipeline; times are per optimizer step)\n");
    if (in->n_requested) {
        printf("\nRequested layouts (--layout)\n");
        layout_rows(pl->requested, pl->requested_evals, pl->n_requested);
    }

    printf("\nSmallest device count that fits: ");
    if (pl->smallest_fit)
        printf("%d (%s)\n", pl->smallest_fit, layout_name(&pl->smallest_layout, name, sizeof name));
    else printf("none up to the search limit\n");
    printf("  rule: model states (ZeRO-%d) + activations (recompute %s) <= %.4g GB per device,\n"
           "        TP in {1,2,4,8}, CP in {1,2,...,%d} (2 CP dividing s), PP dividing L, at least one micro-batch "
           "per pipeline\n",
           in->zero_stage, theory_recompute_name(in->recompute), in->memory / GB, THEORY_MAX_CP);

    printf("\nSeed-style estimate (%.0f B weights + 8 B fp32 optimizer per param + %d checkpoints of h per layer "
           "per batch token)\n", pl->dtypes.w_p, in->ckpt_per_layer);
    printf("  params %.4g TB, optimizer %.4g TB, checkpoints %.4g TB, total %.4g TB\n", pl->ckpt.params / 1e12,
           pl->ckpt.optimizer / 1e12, pl->ckpt.checkpoints / 1e12, pl->ckpt.total / 1e12);
    printf("  devices of %.4g GB: %.1f -> at least %d; per device on %.0f: %.3g GB\n", in->memory / GB,
           pl->ckpt_devices_ratio, pl->ckpt_min_devices, in->devices, pl->ckpt_per_device / GB);
}

static void json_state(const char *key, const struct theory_state *s, bool comma) {
    printf("\"%s\":{\"params\":%.10g,\"grads\":%.10g,\"optimizer\":%.10g,\"total\":%.10g}%s", key, s->params,
           s->grads, s->optimizer, s->total, comma ? "," : "");
}

static void print_json(const struct theory_plan *pl, const struct plan_opts *o) {
    const struct theory_plan_input *in = &o->in;
    const struct theory_params *p = &pl->params;
    printf("{\"config\":\"%s\",", o->config_path ? o->config_path : "");
    printf("\"cluster\":{\"devices\":%.10g,\"memory\":%.10g,\"peak_flops\":%.10g,\"mfu\":%.10g,\"tokens\":%.10g,"
           "\"batch_tokens\":%.10g,\"link_bandwidth\":%.10g,\"watts\":%.10g},",
           in->devices, in->memory, in->peak_flops, in->mfu, in->tokens, in->batch_tokens, in->link_bandwidth,
           in->watts);
    printf("\"params\":{\"ffn\":%.10g,\"attention\":%.10g,\"embedding\":%.10g,\"position\":%.10g,\"norms\":%.10g,"
           "\"total\":%.10g,\"padding\":%.10g},",
           p->ffn, p->attention, p->embedding, p->position, p->norms, p->total, p->padding);
    printf("\"flops\":{\"per_token_6n\":%.10g,\"per_token_attention\":%.10g,\"per_token_palm\":%.10g,"
           "\"total_6n\":%.10g,\"total_palm\":%.10g,\"days_6n\":%.10g,\"days_palm\":%.10g,\"energy_j\":%.10g},",
           pl->flops.dense, pl->flops.attention, pl->flops.model, pl->total_flops_dense, pl->total_flops_model,
           pl->seconds_dense / 86400, pl->seconds_model / 86400, pl->energy_dense_j);
    printf("\"model_states\":{");
    json_state("dp", &pl->state[0], true);
    json_state("zero1", &pl->state[1], true);
    json_state("zero2", &pl->state[2], true);
    json_state("zero3", &pl->state[3], false);
    printf("},\"activations\":{");
    for (int r = 0; r < 3; r++)
        printf("\"%s\":{\"per_layer\":%.10g,\"whole_model\":%.10g}%s", theory_recompute_name((enum recompute_mode)r),
               pl->act_layer[r], pl->act_device[r], r < 2 ? "," : "");
    printf("},\"layouts\":[");
    for (int i = 0; i < pl->n_layouts; i++) {
        const struct theory_layout *l = &pl->layouts[i];
        const struct theory_layout_eval *e = &pl->evals[i];
        printf("%s{\"tp\":%d,\"cp\":%d,\"pp\":%d,\"dp\":%d,\"zero_stage\":%d,\"recompute\":\"%s\",\"micro_batches\":%.10g,"
               "\"state_bytes\":%.10g,\"activation_bytes\":%.10g,\"memory_bytes\":%.10g,\"batch_ok\":%s,"
               "\"fits\":%s,\"compute_s\":%.10g,\"bubble_s\":%.10g,\"dp_comm_s\":%.10g,\"tp_comm_s\":%.10g,"
               "\"pp_comm_s\":%.10g,\"cp_comm_s\":%.10g,\"comm_s\":%.10g,\"step_s\":%.10g,\"bound\":\"%s\"}",
               i ? "," : "", l->tp, l->cp > 1 ? l->cp : 1, l->pp, l->dp, l->zero_stage, theory_recompute_name(l->recompute),
               e->micro_batches, e->state.total, e->activations, e->memory, e->batch_ok ? "true" : "false",
               e->fits ? "true" : "false", e->compute_s, e->bubble_s, e->dp_comm_s, e->tp_comm_s, e->pp_comm_s,
               e->cp_comm_s, e->comm_s, e->step_s, e->comm_bound ? "communication" : "compute");
    }
    printf("],\"smallest_fit\":{\"devices\":%d,\"tp\":%d,\"cp\":%d,\"pp\":%d,\"dp\":%d},", pl->smallest_fit,
           pl->smallest_layout.tp, pl->smallest_layout.cp > 1 ? pl->smallest_layout.cp : 1, pl->smallest_layout.pp,
           pl->smallest_layout.dp);
    printf("\"seed_estimate\":{\"ckpt_per_layer\":%d,\"params\":%.10g,\"optimizer\":%.10g,\"checkpoints\":%.10g,"
           "\"total\":%.10g,\"devices_ratio\":%.10g,\"min_devices\":%d,\"per_device\":%.10g}}\n",
           in->ckpt_per_layer, pl->ckpt.params, pl->ckpt.optimizer, pl->ckpt.checkpoints, pl->ckpt.total,
           pl->ckpt_devices_ratio, pl->ckpt_min_devices, pl->ckpt_per_device);
}

int main(int argc, char **argv) {
    struct plan_opts o = {.in = {.devices = 8960, .memory = 96e9, .peak_flops = 4.59e14, .mfu = 0.4,
                                 .tokens = 15e12, .batch_tokens = 4e6, .link_bandwidth = 4.5e10, .watts = 0,
                                 .zero_stage = 1, .recompute = RECOMPUTE_SELECTIVE, .ckpt_per_layer = 4}};
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return 1;
    int rest_argc = 0;
    int rc = parse_planner_flags(argc, argv, &o, &rest_argc, rest);
    if (rc == 1) {
        usage(stdout);
        config_print_help(stdout, "plan", true);
        free(rest);
        return 0;
    }
    struct config c;
    config_defaults(&c);
    char err[CONFIG_ERR_LEN];
    bool help = false;
    if (rc == 0 && config_parse_args(&c, rest_argc, rest, &help, err) != 0) {
        fprintf(stderr, "plan: %s\n", err);
        rc = -1;
    }
    free(rest);
    if (rc != 0 || check_model(&c) != 0) {
        fprintf(stderr, "plan: see --help\n");
        return 2;
    }
    for (int i = 0; i < o.in.n_requested; i++) {
        const struct theory_layout *l = &o.in.requested[i];
        long long mp = (long long)l->tp * l->cp * l->pp;
        if ((long long)o.in.devices % mp || c.seq_len % (2 * l->cp)) {
            fprintf(stderr, "plan: --layout %d,%d,%d: tp x cp x pp = %lld must divide --devices %.0f and 2 cp must "
                    "divide seq_len %d\n", l->tp, l->cp, l->pp, mp, o.in.devices, c.seq_len);
            return 2;
        }
    }
    if (o.device) {
        o.in.peak_flops = o.device->peak_flops;
        if (!o.memory_given) o.in.memory = o.device->memory;
    }
    if (c.peak_flops > 0) o.in.peak_flops = c.peak_flops;

    struct theory_plan *pl = malloc(sizeof *pl);
    if (!pl) return 1;
    theory_plan(pl, &c, &o.in);
    if (o.json) print_json(pl, &o);
    else print_text(pl, &o, &c);
    free(pl);
    return 0;
}
