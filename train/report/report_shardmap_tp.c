/* --explain at tp > 1: which slice of every tensor each tensor-parallel
 * rank holds (include/layout.h's split rules): the rows of a column-
 * parallel weight (QKV: the same rows of each of q, k and v, i.e. the
 * rank's heads), the columns of a row-parallel one, the vocabulary rows of
 * wte with how many of them are padding, and the replicated tensors whole.
 * Every layer is cut like its stage's first, so one layer is shown. */
#include "../theory/accounting.h"
#include "report.h"

/* [lo, hi) of the split dimension, for tp rank r of a tensor whose local
 * extent along it is n (per section). */
static void range(char *buf, size_t len, const char *what, int r, int n, int full, int sections) {
    if (sections == 3) /* q, k, v: the same rows of each, so the rank's heads */
        snprintf(buf, len, "%s [%d, %d) of each of q, k, v (%d each)", what, r * n, (r + 1) * n, full);
    else snprintf(buf, len, "%s [%d, %d) of %d", what, r * n, (r + 1) * n, full);
}

static void tensor_line(FILE *out, const struct model_layout *lay, const struct tensor_info *t) {
    char where[128];
    int r = lay->rank.tp_rank;
    bool vector = t->full_rows == 1;
    switch (t->split) {
    case SPLIT_REPLICATED:
        snprintf(where, sizeof where, "whole (%s)", t->kind == UNIT_LAYER && (t->id == LAYER_ATTPROJ_B ||
                 t->id == LAYER_FCPROJ_B) ? "added once, after g's sum" : "same on every tp rank");
        break;
    case SPLIT_COLUMN: { /* output features: the rows of a weight, the elements of its bias */
        if (t->id == LAYER_QKV_W && lay->shape.arch == ARCH_LLAMA) { /* GQA: q at NH heads, k and v at KV */
            int hs = lay->shape.C / lay->shape.NH, q = lay->shape.NH * hs, kv = kv_heads(&lay->shape) * hs;
            int tp = lay->rank.tp;
            snprintf(where, sizeof where, "rows [%d, %d) of q (%d), [%d, %d) of each of k, v (%d each)", r * q / tp,
                     (r + 1) * q / tp, q, r * kv / tp, (r + 1) * kv / tp, kv);
            break;
        }
        int sections = t->id == LAYER_QKV_W || t->id == LAYER_QKV_B ? 3 : 1;
        int n = (vector ? t->cols : t->rows) / sections, full = (vector ? t->full_cols : t->full_rows) / sections;
        range(where, sizeof where, vector ? "elements" : "rows", r, n, full, sections);
        break;
    }
    case SPLIT_ROW: /* input features: the columns */
        range(where, sizeof where, "columns", r, t->cols, t->full_cols, 1);
        break;
    case SPLIT_VOCAB: {
        struct vocab_rows v = rank_vocab_rows(lay);
        snprintf(where, sizeof where, "vocabulary rows [%d, %d) of %d: %d real, %d padding (V = %d)", v.v0, v.v1,
                 lay->shape.Vp, v.v1 - v.v0 - v.padding, v.padding, lay->shape.V);
        break;
    }
    }
    fprintf(out, "    %-9s %-10s %6d x %-6d %s\n", t->name, tp_split_name(t->split), t->rows, t->cols, where);
}

void report_tp_map(FILE *out, const struct trainer *tr) {
    const struct config *c = tr->cfg;
    const struct grid *g = tr->grid;
    if (g->tp < 2) return;
    int F = config_mlp_width(c), NHl = c->n_head / g->tp, Fl = F / g->tp;
    bool llama = c->arch == ARCH_LLAMA; /* SwiGLU: fc (up) and fc2 (gate) split alike */
    const char *fc = llama ? "FC and FC2" : "FC", *features = llama ? "SwiGLU features" : "FC features";
    fprintf(out, "\ntensor-parallel map: tp = %d (Megatron: column-parallel QKV and %s after f, row-parallel "
                 "projections then g); %d of %d heads and %d of %d %s per rank; rows x cols are the rank's shape\n",
            g->tp, fc, NHl, c->n_head, Fl, F, features);
    for (int t = 0; t < g->tp; t++) {
        fprintf(out, "  tp rank %d (world ranks", t);
        for (int s = 0; s < g->pp; s++)
            for (int d = 0; d < g->dp; d++) fprintf(out, " %d", (s * g->dp + d) * g->tp + t);
        fprintf(out, "): heads %d..%d, %s [%d, %d)", t * NHl, (t + 1) * NHl - 1, features, t * Fl, (t + 1) * Fl);
        int KVl = c->n_kv_head / g->tp; /* llama's key/value heads (GQA) */
        if (c->arch == ARCH_LLAMA) fprintf(out, ", key/value heads %d..%d", t * KVl, (t + 1) * KVl - 1);
        fprintf(out, "\n");
        /* stage 0 (embedding and the layers), then the last stage's head */
        int stages[] = {0, g->pp - 1};
        for (int k = 0; k < (g->pp > 1 ? 2 : 1); k++) {
            int s = stages[k];
            struct rank_place p = {.dp = g->dp, .tp = g->tp, .tp_rank = t, .pp = g->pp, .pp_rank = s};
            struct model_layout lay;
            rank_place_layout(c, p, &lay);
            for (int i = 0; i < layout_num_tensors(&lay); i++) {
                struct tensor_info ti = layout_tensor(&lay, i);
                if (ti.kind == UNIT_LAYER && (s > 0 || ti.layer != rank_layer_at(&lay.rank, 0))) continue; /* one layer shown */
                if (ti.kind == UNIT_LAYER && ti.id == 0)
                    fprintf(out, "   layer %d (every layer is cut alike):\n", ti.layer);
                else if (ti.kind == UNIT_EMBED && ti.id == 0) fprintf(out, "   embedding:\n");
                else if (ti.kind == UNIT_HEAD && ti.id == 0)
                    fprintf(out, "   head%s:\n", lay.head_wte_copy ? " (last stage, its own copy of wte)" : "");
                tensor_line(out, &lay, &ti);
            }
        }
    }
}
