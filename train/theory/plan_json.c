/* build/plan --json: everything the text shows as one JSON object, in raw
 * units (bytes, seconds, FLOP/s, B/s one direction): every layout of the
 * search (the text's rows are "table" of them, fastest first), the fastest
 * that fits, the --layout ones and the smallest fit. */
#include "plan.h"

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static void json_state(FILE *f, const char *key, const struct theory_state *s, bool comma) {
    fprintf(f, "\"%s\":{\"params\":%.10g,\"grads\":%.10g,\"optimizer\":%.10g,\"total\":%.10g}%s", key, s->params,
            s->grads, s->optimizer, s->total, comma ? "," : "");
}

static void json_layout(FILE *f, const struct theory_layout *l, const struct theory_layout_eval *e) {
    fprintf(f, "{\"tp\":%d,\"cp\":%d,\"pp\":%d,\"dp\":%d,\"zero_stage\":%d,\"recompute\":\"%s\",\"micro_batches\":%.0f,"
            "\"step_tokens\":%.0f,\"state_bytes\":%.10g,\"activation_bytes\":%.10g,\"memory_bytes\":%.10g,"
            "\"batch_ok\":%s,\"fits\":%s,\"compute_s\":%.10g,\"bubble_s\":%.10g,\"dp_comm_s\":%.10g,"
            "\"tp_comm_s\":%.10g,\"pp_comm_s\":%.10g,\"cp_comm_s\":%.10g,\"comm_s\":%.10g,\"step_s\":%.10g,"
            "\"days\":%.10g,\"bound\":\"%s\",\"inter_node\":{\"tp\":%s,\"cp\":%s,\"pp\":%s,\"dp\":%s}}",
            l->tp, l->cp > 1 ? l->cp : 1, l->pp, l->dp, l->zero_stage, theory_recompute_name(l->recompute),
            e->micro_batches, e->step_tokens, e->state.total, e->activations, e->memory, e->batch_ok ? "true" : "false",
            e->fits ? "true" : "false", e->compute_s, e->bubble_s, e->dp_comm_s, e->tp_comm_s, e->pp_comm_s,
            e->cp_comm_s, e->comm_s, e->step_s, e->days, e->comm_bound ? "communication" : "compute",
            e->tp_inter ? "true" : "false", e->cp_inter ? "true" : "false", e->pp_inter ? "true" : "false",
            e->dp_inter ? "true" : "false");
}

static void json_layouts(FILE *f, const char *key, const struct theory_layout *l, const struct theory_layout_eval *e,
                         int n) {
    fprintf(f, "\"%s\":[", key);
    for (int i = 0; i < n; i++) {
        if (i) fputc(',', f);
        json_layout(f, &l[i], &e[i]);
    }
    fprintf(f, "],");
}

static void json_cluster(FILE *f, const struct plan_opts *o) {
    const struct theory_plan_input *in = &o->in;
    fprintf(f, "{\"config\":");
    json_string(f, o->config_path ? o->config_path : "");
    fprintf(f, ",\"units\":{\"memory\":\"bytes (the text: GiB = 2^30 B)\",\"time\":\"s\",\"link_bandwidth\":"
            "\"B/s one direction\"},");
    fprintf(f, "\"cluster\":{\"device\":");
    json_string(f, o->device ? o->device->name : "");
    fprintf(f, ",\"devices\":%.0f,\"memory\":%.10g,\"peak_flops\":%.10g,\"mfu\":%.10g,\"tokens\":%.0f,"
            "\"batch_tokens\":%.0f,\"link_bandwidth\":%.10g,\"inter_node_bandwidth\":%.10g,\"devices_per_node\":%.0f,"
            "\"watts\":%.10g,\"zero_stage\":%d,\"recompute\":\"%s\"},",
            in->devices, in->memory, in->peak_flops, in->mfu, in->tokens, in->batch_tokens, in->link_bandwidth,
            in->inter_node_bandwidth, in->devices_per_node, in->watts, in->zero_stage,
            theory_recompute_name(in->recompute));
}

static void json_model(FILE *f, const struct theory_plan *pl) {
    const struct theory_params *p = &pl->params;
    fprintf(f, "\"params\":{\"ffn\":%.10g,\"attention\":%.10g,\"embedding\":%.10g,\"position\":%.10g,\"norms\":%.10g,"
            "\"total\":%.10g,\"padding\":%.10g},",
            p->ffn, p->attention, p->embedding, p->position, p->norms, p->total, p->padding);
    fprintf(f, "\"flops\":{\"per_token_6n\":%.10g,\"per_token_attention\":%.10g,\"per_token_palm\":%.10g,"
            "\"total_6n\":%.10g,\"total_palm\":%.10g,\"days_6n\":%.10g,\"days_palm\":%.10g,\"energy_j\":%.10g},",
            pl->flops.dense, pl->flops.attention, pl->flops.model, pl->total_flops_dense, pl->total_flops_model,
            pl->seconds_dense / THEORY_SECONDS_PER_DAY, pl->seconds_model / THEORY_SECONDS_PER_DAY, pl->energy_dense_j);
    fprintf(f, "\"model_states\":{");
    json_state(f, "dp", &pl->state[0], true);
    json_state(f, "zero1", &pl->state[1], true);
    json_state(f, "zero2", &pl->state[2], true);
    json_state(f, "zero3", &pl->state[3], false);
    fprintf(f, "},\"activations\":{");
    for (int r = 0; r < 3; r++)
        fprintf(f, "\"%s\":{\"per_layer\":%.10g,\"whole_model\":%.10g}%s",
                theory_recompute_name((enum recompute_mode)r), pl->act_layer[r], pl->act_device[r], r < 2 ? "," : "");
    fprintf(f, "},");
}

/* "table": the indices (into "layouts") of the text's rows, in its order */
static void json_choice(FILE *f, const struct theory_plan *pl) {
    fprintf(f, "\"table\":[");
    for (int k = 0; k < pl->n_table; k++) fprintf(f, "%s%d", k ? "," : "", pl->order[k]);
    fprintf(f, "],\"n_fit\":%d,\"fastest\":", pl->n_fit);
    if (pl->fastest >= 0) json_layout(f, &pl->layouts[pl->fastest], &pl->evals[pl->fastest]);
    else fprintf(f, "null");
    fprintf(f, ",");
}

void plan_print_json(FILE *f, const struct theory_plan *pl, const struct plan_opts *o) {
    const struct theory_plan_input *in = &o->in;
    json_cluster(f, o);
    json_model(f, pl);
    json_layouts(f, "layouts", pl->layouts, pl->evals, pl->n_layouts);
    json_choice(f, pl);
    json_layouts(f, "requested", pl->requested, pl->requested_evals, pl->n_requested);
    fprintf(f, "\"smallest_fit\":{\"devices\":%d,\"tp\":%d,\"cp\":%d,\"pp\":%d,\"dp\":%d},", pl->smallest_fit,
            pl->smallest_layout.tp, pl->smallest_layout.cp > 1 ? pl->smallest_layout.cp : 1, pl->smallest_layout.pp,
            pl->smallest_layout.dp);
    fprintf(f, "\"seed_estimate\":{\"ckpt_per_layer\":%d,\"params\":%.10g,\"optimizer\":%.10g,\"checkpoints\":%.10g,"
            "\"total\":%.10g,\"devices_ratio\":%.10g,\"min_devices\":%.0f,\"per_device\":%.10g}}\n",
            in->ckpt_per_layer, pl->ckpt.params, pl->ckpt.optimizer, pl->ckpt.checkpoints, pl->ckpt.total,
            pl->ckpt_devices_ratio, pl->ckpt_min_devices, pl->ckpt_per_device);
}
