/* --explain: the shard map. For every unit and rank, the element range the
 * rank owns and the tensors the cut passes through; then, for the chosen
 * stage, which buffers each rank holds in full and which in part. */
#include "../theory/accounting.h"
#include "report.h"
#include "schedule.h"
#include "shard.h"

static void owned_tensors(FILE *out, const struct model_layout *lay, int unit, size_t lo, size_t hi) {
    size_t base = layout_unit_offset(lay, unit);
    for (int t = 0; t < layout_num_tensors(lay); t++) {
        struct tensor_info ti = layout_tensor(lay, t);
        if (ti.unit != unit) continue;
        size_t a = ti.offset - base, b = a + ti.numel;
        size_t x = a > lo ? a : lo, y = b < hi ? b : hi;
        if (x >= y) continue;
        if (x == a && y == b) fprintf(out, " %s", ti.name);
        else fprintf(out, " %s[%zu:%zu)", ti.name, x - a, y - a); /* the cut passes through this tensor */
    }
}

static const char *held(bool sharded) { return sharded ? "part (1/N)" : "full"; }

/* pp > 1: which layers, and the embedding or head, each stage holds, and
 * on which world ranks (tp innermost, pp outermost: include/grid.h). */
static void stage_map(FILE *out, const struct trainer *tr) {
    const struct config *c = tr->cfg;
    const struct grid *g = tr->grid;
    int v = config_chunks(c);
    fprintf(out, "\nstage map: %d layers over pp = %d stages (%s), schedule %s, m = %d micro-batches per step\n",
            c->n_layer, g->pp, c->pp_layers[0] ? c->pp_layers : "even split", schedule_name(c->schedule),
            c->grad_accum);
    if (v > 1)
        fprintf(out, "  %d model chunks (virtual stages), %d per stage: stage s holds chunks s, s + %d, ...; the last "
                "stage's chunk c feeds stage 0's chunk c + 1\n", g->pp * v, v, g->pp);
    for (int s = 0; s < g->pp; s++) {
        struct rank_place p = {.dp = g->dp, .tp = g->tp, .pp = g->pp, .pp_rank = s};
        struct model_layout lay;
        rank_place_layout(c, p, &lay);
        struct activation_theory at = theory_trainer_activations(c, p);
        char layers[160] = "";
        size_t at_c = 0;
        for (int ch = 0; ch < lay.rank.n_chunks && at_c < sizeof layers; ch++)
            at_c += (size_t)snprintf(layers + at_c, sizeof layers - at_c, "%s%d..%d", ch ? ", " : "",
                                     lay.rank.chunk[ch].l0, lay.rank.chunk[ch].l1 - 1);
        char per_chunk[160] = "";
        at_c = 0;
        for (int ch = 0; v > 1 && ch < v && at_c < sizeof per_chunk; ch++)
            at_c += (size_t)snprintf(per_chunk + at_c, sizeof per_chunk - at_c, "%s%d", ch ? " + " : " (per chunk: ",
                                     schedule_chunk_slots(c->schedule, g->pp, s, c->grad_accum, v, ch));
        if (v > 1 && at_c < sizeof per_chunk) snprintf(per_chunk + at_c, sizeof per_chunk - at_c, ")");
        fprintf(out, "  stage %d: %slayers %s%s, %zu parameters, %d activation slot%s%s; world ranks", s,
                lay.rank.has_embed ? "embedding, " : "", layers,
                lay.rank.has_head ? (lay.head_wte_copy ? ", head (own copy of wte)" : ", head") : "", lay.total,
                at.slots, at.slots == 1 ? "" : "s", per_chunk);
        for (int d = 0; d < g->dp; d++)
            for (int t = 0; t < g->tp; t++) fprintf(out, " %d", (s * g->dp + d) * g->tp + t);
        fprintf(out, "\n");
    }
    if (g->pp > 1)
        fprintf(out, "  the tied wte lives on stage 0 and stage %d; its gradient is summed over the two each step\n",
                g->pp - 1);
    fprintf(out, "  the shard map below is rank 0's (stage 0)\n");
}

void report_shard_map(FILE *out, const struct trainer *tr) {
    if (tr->grid->pp > 1) stage_map(out, tr);
    report_tp_map(out, tr);
    report_cp_map(out, tr);
    const struct engine *e = &tr->engine;
    const struct shard_layout *sh = &e->z.sh;
    int N = sh->N, z = e->o.zero.stage;
    fprintf(out, "\nshard map: ZeRO-%d over N = %d data-parallel rank%s%s. ", z, N, N == 1 ? "" : "s",
            tr->grid->cp > 1 ? " (dp x cp)" : "");
    if (z == 0) /* the slices are still worth showing: they are what stages 1 to 3 cut */
        fprintf(out, "Nothing is sharded at ZeRO-0: every rank holds and updates\nevery unit whole. Below is where "
                     "ZeRO-1 to 3 would cut them: slice r to rank r; ");
    else fprintf(out, "Rank r owns slice r of every unit;\n");
    fprintf(out, "each unit is padded to a multiple of N elements, so no slice crosses a unit.\n"
                 "[a:b) = elements a..b-1 of a tensor.\n");
    int first_layer = layout_layer_unit(&e->lay, rank_layer_at(&e->lay.rank, 0)), last_unit = e->lay.n_units - 1;
    for (int u = 0; u < e->lay.n_units; u++) {
        struct unit_info ui = layout_unit(&e->lay, u);
        char what[48];
        if (ui.kind == UNIT_LAYER) snprintf(what, sizeof what, "layer %d", ui.layer);
        else snprintf(what, sizeof what, "%s", ui.kind == UNIT_EMBED ? "embedding" : "head: final norm, tied to wte");
        /* the layers between the first two and the last are cut alike */
        if (ui.kind == UNIT_LAYER && u > first_layer + 1 && u < last_unit) {
            if (u == first_layer + 2)
                fprintf(out, "  ... layers %d..%d are cut the same way\n", ui.layer, layout_unit(&e->lay, last_unit).layer - 1);
            continue;
        }
        fprintf(out, "  unit %d (%s): %zu elements, padded %zu, %zu per rank\n", u, what, ui.size,
                shard_unit_padded(sh, u), shard_unit_chunk(sh, u));
        for (int r = 0; r < N; r++) {
            size_t lo, hi;
            shard_owned(sh, u, r, &lo, &hi);
            size_t pad = shard_unit_chunk(sh, u) - (hi - lo);
            fprintf(out, "    rank %d: [%zu, %zu)", r, lo, hi);
            if (pad) fprintf(out, " + %zu padding", pad);
            fprintf(out, " :");
            owned_tensors(out, &e->lay, u, lo, hi);
            fprintf(out, "\n");
        }
    }
    fprintf(out, "  each rank holds: params %s, master and Adam m, v %s, grads %s", held(z >= 3), held(z >= 1),
            held(z >= 2));
    /* --overlap keeps a second gathered layer (the next one, prefetched)
     * and a second bucket (one reduce-scatter in flight while the next
     * unit's gradient fills): include/zero.h */
    bool overlap = e->o.zero.overlap;
    if (z >= 3)
        fprintf(out, ", plus the gathered embedding, head and %s in full while they are used, and %s",
                overlap ? "two layers (the one in use and the next, prefetched)" : "one layer",
                overlap ? "two units' gradients in full (two reduce-scatter buckets, one in flight)"
                        : "one unit's gradient in full (the reduce-scatter bucket)");
    if (z == 2)
        fprintf(out, ", plus %s", overlap ? "two units' gradients in full (two reduce-scatter buckets, one in flight)"
                                          : "one unit's gradient in full (the reduce-scatter bucket)");
    fprintf(out, ".\n  %s\n",
            z == 0   ? "every rank updates every parameter; gradients are all-reduced once per step"
            : z == 1 ? "rank r updates its slices; gradients are reduce-scattered once per step, params all-gathered"
            : z == 2 ? "each unit's gradient is reduce-scattered when its backward ends; params all-gathered after the update"
                     : "each unit is all-gathered before its forward and again before its backward, then released");
}
