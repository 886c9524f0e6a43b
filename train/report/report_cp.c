/* Context parallelism's reports: --explain's map of which positions of
 * every sequence each context-parallel rank holds (the load-balanced
 * split, include/context_parallel.h), the causal work that gives each
 * (beside a contiguous split's) and what the ring moves; and the measured
 * attention FLOPs of every rank, which that split makes equal. */
#include "../theory/accounting.h"
#include "context_parallel.h"
#include "grid.h"
#include "report.h"
#include "../measure/trainer.h"

/* Causal query-key pairs per head and sequence of cp rank r's positions
 * over every rank's keys: each query at global position g sees g + 1. */
static long long causal_pairs(struct cp_split s) {
    long long n = 0;
    for (int t = 0; t < cp_local_len(s); t++) n += cp_global_position(s, t) + 1;
    return n;
}

void report_cp_map(FILE *out, const struct trainer *tr) {
    const struct grid *g = tr->grid;
    if (g->cp == 1) return;
    int T = tr->cfg->seq_len, cp = g->cp, Tl = T / cp;
    struct cp_split s0 = {.T = T, .cp = cp, .rank = 0};
    fprintf(out, "\ncontext parallel: cp = %d. Each sequence's %d positions are cut into 2 cp = %d chunks of %d; cp "
                 "rank r holds chunks r and %d - r (%d positions), so every rank does the same causal work:\n",
            cp, T, 2 * cp, cp_chunk_len(s0), 2 * cp - 1, Tl);
    for (int r = 0; r < cp; r++) {
        struct cp_split s = {.T = T, .cp = cp, .rank = r};
        struct cp_run runs[CP_MAX_RUNS];
        int k = cp_position_runs(s, 0, Tl, runs);
        /* the contiguous split's rank r: positions [r Tl, (r+1) Tl) */
        long long contiguous = (long long)Tl * r * Tl + (long long)Tl * (Tl + 1) / 2;
        struct grid_coords at = {.dp_rank = g->dp_rank, .cp_rank = r, .tp_rank = g->tp_rank, .pp_rank = g->pp_rank};
        fprintf(out, "  cp rank %d (world rank %d):", r, grid_world_rank(at, g->dp, cp, g->tp));
        for (int i = 0; i < k; i++) fprintf(out, " [%d, %d)", runs[i].global0, runs[i].global0 + runs[i].n);
        fprintf(out, "; query-key pairs per head and sequence %lld (a contiguous split: %lld)\n", causal_pairs(s),
                contiguous);
    }
    fprintf(out, "  ring, per layer per micro-batch: %d steps; at step i a rank's queries meet cp rank (r - i)'s keys\n"
                 "  and values while that block goes on to rank r + 1; fully masked blocks are skipped, partial\n"
                 "  outputs merged by log-sum-exp; the backward sends the keys and values round again with their\n"
                 "  gradients, which end at their owner. Gradients are reduced, and ZeRO shards, over dp x cp = %d.\n",
            cp, g->dp * cp);
}

void report_cp_flops(FILE *out, const struct trainer *tr, const struct rank_stats *ranks, int n, int steps) {
    if (tr->grid->cp == 1 || steps <= 0) return;
    fprintf(out, "  attention FLOPs per step on every rank (the load-balanced split: equal across cp ranks):");
    bool all = true;
    for (int r = 0; r < n; r++) {
        double mine = ranks[r].attention_flops / steps;
        all = all && mine == theory_trainer_flops(tr->cfg, rank_place_of(tr->cfg, n, r)).attention;
        fprintf(out, " %.6g", mine);
    }
    fprintf(out, "; every rank = its theory (1/cp of the causal count): %s\n", all ? "yes" : "NO");
}
