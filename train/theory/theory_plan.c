/* Everything build/plan reports, computed in one place from a config and
 * the cluster description, so tests check the same numbers it prints. */
#include "theory.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

enum { SMALLEST_FIT_SEARCH = 1 << 17 };
/* the seeds' optimizer: Adam's m and v in fp32, no master copy */
#define SEED_OPTIMIZER_BYTES 8.0

/* Candidate layouts for `devices`: t in {1,2,4,8} (dividing a and n_kv),
 * cp in {1, 2, ..., THEORY_MAX_CP} (2 cp dividing s), p theory_pp_searched
 * (dividing L, or a power of 2), d = devices / (t cp p). */
static void candidate_layouts(struct theory_plan *pl, int devices, const struct theory_plan_input *in) {
    static const int tps[] = {1, 2, 4, 8};
    const struct theory_model *m = &pl->model;
    pl->n_layouts = 0;
    for (int i = 0; i < 4; i++) {
        int t = tps[i];
        if (devices % t || m->a % t || m->n_kv % t) continue;
        for (int cp = 1; cp <= THEORY_MAX_CP; cp *= 2) {
            if ((devices / t) % cp || m->s % (2 * cp)) continue;
            for (int p = 1; p <= THEORY_MAX_PP; p++) {
                if (!theory_pp_searched(m, p) || (devices / (t * cp)) % p) continue;
                if (pl->n_layouts == THEORY_PLAN_MAX_LAYOUTS) return;
                pl->layouts[pl->n_layouts++] = (struct theory_layout){
                    .tp = t, .cp = cp, .pp = p, .dp = devices / (t * cp * p), .zero_stage = in->zero_stage,
                    .recompute = in->recompute, .sequence_parallel = true};
            }
        }
    }
}

/* Days to train `tokens` on a layout: tokens / step_tokens steps of step_s
 * each (the headline days' formula, with this layout's step). */
static double layout_days(const struct theory_layout_eval *e, double tokens) {
    return e->step_tokens > 0 ? tokens / e->step_tokens * e->step_s / THEORY_SECONDS_PER_DAY : 0.0;
}

/* Does layout i come before j in the table: a layout that fits before one
 * that does not; among those that fit, fewer days (then less memory);
 * among the rest, less memory (the nearest to fitting). */
static bool table_before(const struct theory_layout_eval *ev, int i, int j) {
    const struct theory_layout_eval *a = &ev[i], *b = &ev[j];
    if (a->fits != b->fits) return a->fits;
    if (a->fits && a->days != b->days) return a->days < b->days;
    return a->memory < b->memory;
}

/* pl->order, n_fit and fastest from the evals (an insertion sort: stable,
 * so equal rows keep the search's order; THEORY_PLAN_MAX_LAYOUTS rows at most). */
static void order_layouts(struct theory_plan *pl) {
    pl->n_fit = 0;
    for (int i = 0; i < pl->n_layouts; i++) {
        int k = i;
        while (k > 0 && table_before(pl->evals, i, pl->order[k - 1])) {
            pl->order[k] = pl->order[k - 1];
            k--;
        }
        pl->order[k] = i;
        pl->n_fit += pl->evals[i].fits;
    }
    pl->fastest = pl->n_fit > 0 ? pl->order[0] : -1;
    pl->n_table = pl->n_fit > 0 ? pl->n_fit : pl->n_layouts;
    if (pl->n_table > THEORY_PLAN_TABLE_ROWS) pl->n_table = THEORY_PLAN_TABLE_ROWS;
}

static void evaluate_layouts(struct theory_plan *pl, const struct config *c, const struct theory_plan_input *in) {
    const struct theory_model *m = &pl->model;
    const double psi = pl->params.total, b = c->micro_batch;
    const long long devices = (long long)in->devices;
    const struct theory_cluster cl = {.devices = in->devices, .memory = in->memory, .peak_flops = in->peak_flops,
                                      .mfu = in->mfu, .link_bandwidth = in->link_bandwidth, .watts = in->watts,
                                      .inter_node_bandwidth = in->inter_node_bandwidth,
                                      .devices_per_node = in->devices_per_node};
    candidate_layouts(pl, (int)devices, in);
    for (int i = 0; i < pl->n_layouts; i++) {
        pl->evals[i] = theory_layout_evaluate(m, &pl->dtypes, psi, b, in->batch_tokens, &pl->layouts[i], &cl);
        pl->evals[i].days = layout_days(&pl->evals[i], in->tokens);
    }
    order_layouts(pl);
    pl->n_requested = in->n_requested;
    for (int i = 0; i < in->n_requested; i++) {
        struct theory_layout *l = &pl->requested[i];
        *l = in->requested[i];
        l->dp = (int)(devices / ((long long)l->tp * l->cp * l->pp));
        l->zero_stage = in->zero_stage, l->recompute = in->recompute, l->sequence_parallel = true;
        pl->requested_evals[i] = theory_layout_evaluate(m, &pl->dtypes, psi, b, in->batch_tokens, l, &cl);
        pl->requested_evals[i].days = layout_days(&pl->requested_evals[i], in->tokens);
    }
}

void theory_plan(struct theory_plan *pl, const struct config *c, const struct theory_plan_input *in) {
    memset(pl, 0, sizeof *pl);
    theory_model_from_config(&pl->model, c);
    pl->dtypes = theory_dtypes_from_config(c);
    pl->params = theory_param_count(&pl->model);
    const struct theory_model *m = &pl->model;
    const struct theory_dtypes *dt = &pl->dtypes;
    const double psi = pl->params.total;
    const double b = c->micro_batch;
    const int devices = (int)in->devices;

    pl->flops = theory_flops_per_token(m, psi);
    pl->total_flops_dense = pl->flops.dense * in->tokens;
    pl->total_flops_model = pl->flops.model * in->tokens;
    pl->seconds_dense = theory_training_seconds(pl->total_flops_dense, in->devices, in->peak_flops, in->mfu);
    pl->seconds_model = theory_training_seconds(pl->total_flops_model, in->devices, in->peak_flops, in->mfu);
    pl->energy_dense_j = theory_energy_joules(pl->seconds_dense, in->devices, in->watts);

    for (int z = 0; z < 4; z++) pl->state[z] = theory_model_state_bytes(dt->w_p, dt->w_g, dt->K, psi, z, devices);
    for (int r = 0; r < 3; r++) {
        pl->act_layer[r] = theory_activation_layer_bytes(m, b, 1, false, (enum recompute_mode)r);
        pl->act_device[r] = theory_activation_device_bytes(m, b, 1, 1, 1, false, (enum recompute_mode)r);
    }

    evaluate_layouts(pl, c, in);
    pl->smallest_fit = theory_smallest_fit(m, dt, psi, b, in->batch_tokens, in->zero_stage, in->recompute,
                                           in->memory, SMALLEST_FIT_SEARCH, &pl->smallest_layout);

    /* Seed-style: weights in the param dtype, optimizer m and v in fp32
     * (8 B, no master copy), checkpoints in the activation dtype. */
    pl->ckpt = theory_checkpoint_estimate(psi, dt->w_p, SEED_OPTIMIZER_BYTES, in->batch_tokens, m->h, m->L,
                                          in->ckpt_per_layer, dt->w_act);
    pl->ckpt_devices_ratio = in->memory > 0 ? pl->ckpt.total / in->memory : 0.0;
    pl->ckpt_min_devices = ceil(pl->ckpt_devices_ratio);
    pl->ckpt_per_device = in->devices > 0 ? pl->ckpt.total / in->devices : 0.0;
}
