/* build/plan's text report: the tables of theory_plan(), memory in GiB
 * (2^30 B, as the trainer prints it), times in seconds and days. The
 * seed-style estimate keeps the seeds' decimal TB so it reads beside them. */
#include "plan.h"

#define JOULES_PER_MWH 3.6e9
#define BYTES_PER_TB 1e12 /* the seeds' unit */
#define BYTES_PER_GB_S 1e9 /* link bandwidth, as vendors quote it */

/* "TP8 x CP16 x PP16 x DP8" (no CP part at cp 1) into buf; returns buf. */
static const char *plan_layout_name(const struct theory_layout *l, char *buf, size_t n) {
    if (l->cp > 1) snprintf(buf, n, "TP%d x CP%d x PP%d x DP%d", l->tp, l->cp, l->pp, l->dp);
    else snprintf(buf, n, "TP%d x PP%d x DP%d", l->tp, l->pp, l->dp);
    return buf;
}

static const char *fit_word(const struct theory_layout_eval *e) {
    return e->fits ? "yes" : (e->batch_ok ? "no" : "batch");
}

static void layout_header(FILE *f) {
    fprintf(f, "  %-26s %5s %9s %9s %9s %5s %9s %9s %9s %9s %9s %8s %-13s %s\n", "layout", "m", "state GiB",
            "act GiB", "total GiB", "fits", "compute s", "comm s", "(cp s)", "bubble s", "step s", "days", "bound",
            "across nodes");
}

/* "dp+pp": the groups on the inter-node link; "-": none. */
static const char *across_nodes(const struct theory_layout_eval *e, char *buf, size_t n) {
    snprintf(buf, n, "%s%s%s%s", e->tp_inter ? "+tp" : "", e->cp_inter ? "+cp" : "", e->dp_inter ? "+dp" : "",
             e->pp_inter ? "+pp" : "");
    return buf[0] ? buf + 1 : "-";
}

static void layout_row(FILE *f, const struct theory_layout *l, const struct theory_layout_eval *e) {
    char name[64], across[16];
    fprintf(f, "  %-26s %5.0f %9.4g %9.4g %9.4g %5s %9.4g %9.4g %9.4g %9.4g %9.4g %8.4g %-13s %s\n",
            plan_layout_name(l, name, sizeof name), e->micro_batches, e->state.total / THEORY_GIB,
            e->activations / THEORY_GIB, e->memory / THEORY_GIB, fit_word(e), e->compute_s, e->comm_s, e->cp_comm_s,
            e->bubble_s, e->step_s, e->days, e->comm_bound ? "communication" : "compute",
            across_nodes(e, across, sizeof across));
}

static void print_header(FILE *f, const struct theory_plan *pl, const struct plan_opts *o, const struct config *c) {
    const struct theory_plan_input *in = &o->in;
    const struct theory_model *m = &pl->model;
    fprintf(f, "plan: %s  (arch %s, L %d, h %d, a %d, n_kv %d, F %d, V %d, s %d, micro_batch %d)\n",
            o->config_path ? o->config_path : "(defaults)", c->arch == ARCH_LLAMA ? "llama" : "gpt2", m->L, m->h,
            m->a, m->n_kv, m->F, m->V, m->s, c->micro_batch);
    fprintf(f, "cluster: %.0f devices%s%s x %.4g GiB, %.4g FLOP/s peak at MFU %.2f, link %.4g GB/s one direction\n",
            in->devices, o->device ? " " : "", o->device ? o->device->name : "", in->memory / THEORY_GIB,
            in->peak_flops, in->mfu, in->link_bandwidth / BYTES_PER_GB_S);
    if (in->devices_per_node > 0 && in->inter_node_bandwidth > 0)
        fprintf(f, "nodes: %.0f devices each on that link; between nodes %.4g GB/s one direction per device, for the "
                   "groups in the 'across nodes' column (devices numbered tp, cp, dp, pp from the innermost)\n",
                in->devices_per_node, in->inter_node_bandwidth / BYTES_PER_GB_S);
    fputc('\n', f);
}

static void print_params(FILE *f, const struct theory_plan *pl) {
    const struct theory_params *p = &pl->params;
    const struct theory_model *m = &pl->model;
    fprintf(f, "Parameters by part\n");
    fprintf(f, "  %-26s %16.0f  %8.3g\n", "FFN", p->ffn, p->ffn);
    fprintf(f, "  %-26s %16.0f  %8.3g\n", "attention", p->attention, p->attention);
    fprintf(f, "  %-26s %16.0f  %8.3g\n", m->tied_embeddings ? "embeddings (tied)" : "embeddings (in + out)",
            p->embedding, p->embedding);
    fprintf(f, "  %-26s %16.0f  %8.3g\n", "position embedding", p->position, p->position);
    fprintf(f, "  %-26s %16.0f  %8.3g\n", "norms", p->norms, p->norms);
    fprintf(f, "  %-26s %16.0f  %8.4g\n", "total (Psi)", p->total, p->total);
    if (p->padding > 0)
        fprintf(f, "  %-26s %16.0f  (V padded to %d in memory; not in Psi)\n", "vocab padding", p->padding, m->Vp);
}

static void print_flops(FILE *f, const struct theory_plan *pl, const struct theory_plan_input *in) {
    fprintf(f, "\nFLOPs\n");
    fprintf(f, "  per token, 6 Psi (Kaplan; seeds)         %.4g\n", pl->flops.dense);
    fprintf(f, "  per token, + 12 L a d_h s (PaLM App. B)  %.4g  (attention %.3g, non-causal)\n", pl->flops.model,
            pl->flops.attention);
    fprintf(f, "  total for %.3g tokens: %.4g (6 Psi D), %.4g (PaLM)\n", in->tokens, pl->total_flops_dense,
            pl->total_flops_model);
    fprintf(f, "  time on %.0f devices at MFU %.2f: %.1f days (6 Psi), %.1f days (PaLM)\n", in->devices, in->mfu,
            pl->seconds_dense / THEORY_SECONDS_PER_DAY, pl->seconds_model / THEORY_SECONDS_PER_DAY);
    if (in->watts > 0)
        fprintf(f, "  energy at %.0f W/device: %.4g MWh (devices only, 6 Psi time)\n", in->watts,
                pl->energy_dense_j / JOULES_PER_MWH);
    else fprintf(f, "  energy: give --watts W\n");
}

static void print_memory(FILE *f, const struct theory_plan *pl, const struct theory_plan_input *in,
                         const struct config *c) {
    fprintf(f, "\nModel states per device over %.0f data-parallel ranks (w_p %.0f, w_g %.0f, K %.4g B/param: %s)\n",
            in->devices, pl->dtypes.w_p, pl->dtypes.w_g, pl->dtypes.K, optim_rule(c->optimizer)->name);
    const char *stage[] = {"DP", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
    fprintf(f, "  %-8s %12s %12s %12s %12s\n", "", "params GiB", "grads GiB", "optim GiB", "total GiB");
    for (int z = 0; z < 4; z++)
        fprintf(f, "  %-8s %12.4g %12.4g %12.4g %12.4g\n", stage[z], pl->state[z].params / THEORY_GIB,
                pl->state[z].grads / THEORY_GIB, pl->state[z].optimizer / THEORY_GIB, pl->state[z].total / THEORY_GIB);

    fprintf(f, "\nActivations (Korthikanti 2022 Table 2, b = %d, t = p = 1)\n", c->micro_batch);
    fprintf(f, "  %-10s %14s %18s\n", "recompute", "per layer GiB", "whole model GiB");
    for (int r = 0; r < 3; r++)
        fprintf(f, "  %-10s %14.4g %18.4g\n", theory_recompute_name((enum recompute_mode)r),
                pl->act_layer[r] / THEORY_GIB, pl->act_device[r] / THEORY_GIB);
}

/* The useful rows (layouts[order[]]): those that fit, fastest first, at
 * most THEORY_PLAN_TABLE_ROWS; when none fits, as many of the nearest to
 * fitting. --all: every layout in the search's order. */
static void print_table(FILE *f, const struct theory_plan *pl, bool all) {
    layout_header(f);
    const int shown = all ? pl->n_layouts : pl->n_table;
    for (int k = 0; k < shown; k++) {
        int i = all ? k : pl->order[k];
        layout_row(f, &pl->layouts[i], &pl->evals[i]);
    }
    if (all) fprintf(f, "  (every layout of the search; %d fit)\n", pl->n_fit);
    else if (pl->n_fit > 0)
        fprintf(f, "  (the %d fastest of the %d layouts that fit, of %d searched; --all for every one)\n", shown,
                pl->n_fit, pl->n_layouts);
    else fprintf(f, "  (none of the %d layouts fits: the %d nearest, least memory first; --all for every one)\n",
                 pl->n_layouts, shown);
}

static void print_fastest(FILE *f, const struct theory_plan *pl, const struct theory_plan_input *in) {
    char name[64];
    fprintf(f, "\nFastest layout that fits: ");
    if (pl->fastest < 0) {
        fprintf(f, "none on %.0f devices of %.4g GiB\n", in->devices, in->memory / THEORY_GIB);
        return;
    }
    const struct theory_layout_eval *e = &pl->evals[pl->fastest];
    fprintf(f, "%s, %.4g GiB per device, %.1f days\n", plan_layout_name(&pl->layouts[pl->fastest], name, sizeof name),
            e->memory / THEORY_GIB, e->days);
    fprintf(f, "  step %.4g s = max(compute %.4g s, comm %.4g s) + bubble %.4g s; m = %.0f, %.0f tokens a step\n",
            e->step_s, e->compute_s, e->comm_s, e->bubble_s, e->micro_batches, e->step_tokens);
}

static void print_layouts(FILE *f, const struct theory_plan *pl, const struct plan_opts *o) {
    const struct theory_plan_input *in = &o->in;
    fprintf(f, "\nLayouts on %.0f devices (ZeRO-%d over DP x CP, recompute %s, sequence parallel; batch %.4g tokens; a "
            "CP rank holds s/CP positions: activations / CP, ring traffic in \"cp s\")\n",
            in->devices, in->zero_stage, theory_recompute_name(in->recompute), in->batch_tokens);
    print_table(f, pl, o->all);
    fprintf(f, "  m: whole micro-batches per pipeline, floor(B / (b DP)); \"batch\": not one. Per optimizer step:\n"
            "  step = max(compute, comm) + bubble (comm beyond compute is exposed); days = tokens / (m b DP s) "
            "steps\n");
    print_fastest(f, pl, in);
    if (in->n_requested) {
        fprintf(f, "\nRequested layouts (--layout)\n");
        layout_header(f);
        for (int i = 0; i < pl->n_requested; i++) layout_row(f, &pl->requested[i], &pl->requested_evals[i]);
    }
}

static void print_smallest(FILE *f, const struct theory_plan *pl, const struct theory_plan_input *in) {
    char name[64];
    fprintf(f, "\nSmallest device count that fits: ");
    if (pl->smallest_fit)
        fprintf(f, "%d (%s)\n", pl->smallest_fit, plan_layout_name(&pl->smallest_layout, name, sizeof name));
    else fprintf(f, "none up to the search limit\n");
    fprintf(f, "  rule: model states (ZeRO-%d) + activations (recompute %s) <= %.4g GiB per device,\n"
            "        TP in {1,2,4,8}, CP in {1,2,...,%d} (2 CP dividing s), PP <= %d dividing L or a power of 2,\n"
            "        at least one micro-batch per pipeline\n",
            in->zero_stage, theory_recompute_name(in->recompute), in->memory / THEORY_GIB, THEORY_MAX_CP,
            THEORY_MAX_PP);
}

static void print_seed(FILE *f, const struct theory_plan *pl, const struct theory_plan_input *in) {
    fprintf(f, "\nSeed-style estimate (%.0f B weights + 8 B fp32 optimizer per param + %d checkpoints of h per layer "
            "per batch token; TB = 1e12 B, the seeds' unit)\n", pl->dtypes.w_p, in->ckpt_per_layer);
    fprintf(f, "  params %.4g TB, optimizer %.4g TB, checkpoints %.4g TB, total %.4g TB\n",
            pl->ckpt.params / BYTES_PER_TB, pl->ckpt.optimizer / BYTES_PER_TB, pl->ckpt.checkpoints / BYTES_PER_TB,
            pl->ckpt.total / BYTES_PER_TB);
    fprintf(f, "  devices of %.4g GiB: %.1f -> at least %.0f; per device on %.0f: %.4g GiB\n", in->memory / THEORY_GIB,
            pl->ckpt_devices_ratio, pl->ckpt_min_devices, in->devices, pl->ckpt_per_device / THEORY_GIB);
}

void plan_print_text(FILE *f, const struct theory_plan *pl, const struct plan_opts *o, const struct config *c) {
    print_header(f, pl, o, c);
    print_params(f, pl);
    print_flops(f, pl, &o->in);
    print_memory(f, pl, &o->in, c);
    print_layouts(f, pl, o);
    print_smallest(f, pl, &o->in);
    print_seed(f, pl, &o->in);
}
