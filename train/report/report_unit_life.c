/* --explain 2: a unit's life through one step on each rank, as a table
 * (train/report/report.h): each phase of the step in the engine's order
 * (parallel/engine.c), the collectives and releases ZeRO makes there, and
 * the bytes live beside the theory of them (the memory timeline's walk,
 * train/theory/theory_timeline.c). At ZeRO-3 the comm column is the
 * sawtooth: a unit's params gathered, used, released; its gradient
 * reduce-scattered through a bucket. */
#include <stdio.h>
#include <stdlib.h>

#include "report.h"

#include "../theory/accounting.h"
#include "schedule.h"

/* Micro-batches shown in full; the rest repeat them. */
enum { SHOWN_MICRO_BATCHES = 2, LIFE_TEXT_LEN = 256 };

static const char *unit_name(const struct timeline_phase *p, char *buf, size_t len) {
    if (p->unit_kind == UNIT_LAYER) snprintf(buf, len, "layer %d", p->layer);
    else snprintf(buf, len, "%s", p->unit_kind == UNIT_EMBED ? "embedding" : "head");
    return buf;
}

/* Stage 3: what the engine does to the phase's unit (all_gather, release,
 * reduce_scatter), in its order, on a rank that holds the embedding
 * and/or the head (rank, include/layout.h; a pp stage may hold neither). */
static void stage3_life(const struct timeline_phase *p, bool overlap, const struct rank_desc *rank, char *out,
                        size_t len) {
    char u[32], gathered[96];
    unit_name(p, u, sizeof u);
    /* with overlap the all_gather was posted during the unit before */
    if (overlap) snprintf(gathered, sizeof gathered, "wait for %s's all_gather (posted ahead)", u);
    else snprintf(gathered, sizeof gathered, "all_gather %s", u);
    bool fwd = p->kind == PHASE_FORWARD;
    const char *next = overlap ? "; post the next unit's all_gather" : "";
    if (fwd && p->unit_kind == UNIT_EMBED)
        snprintf(out, len, "all_gather embedding%s; %s", next,
                 rank->has_head ? "kept for the tied head" : "release embedding (the head is another stage's)");
    else if (fwd && p->unit_kind == UNIT_LAYER)
        snprintf(out, len, "%s%s; release %s", gathered, next, u);
    else if (fwd)
        snprintf(out, len, "%s; release head%s", gathered, rank->has_embed ? " and embedding" : "");
    else if (p->unit_kind == UNIT_HEAD && rank->has_embed)
        snprintf(out, len, "all_gather head and embedding again%s; reduce_scatter head; release both", next);
    else if (p->unit_kind == UNIT_HEAD) /* its own copy of wte (include/layout.h: head_wte_copy) */
        snprintf(out, len, "all_gather head again%s; reduce_scatter head; release head", next);
    else if (p->unit_kind == UNIT_LAYER)
        snprintf(out, len, "%s%s; reduce_scatter %s; release %s", gathered, next, u, u);
    else snprintf(out, len, "reduce_scatter embedding (its backward reads no params)");
}

/* What ZeRO does at phase p at stage z. */
/* own: the rank is this process's (its engine's bucket count is known here). */
static void life_at(const struct trainer *tr, const struct rank_desc *rank, bool own, const struct timeline_phase *p,
                    char *out, size_t len) {
    int z = tr->cfg->zero;
    char u[32];
    switch (p->kind) {
    case PHASE_FORWARD:
    case PHASE_BACKWARD:
        if (z == 3) stage3_life(p, tr->cfg->overlap, rank, out, len);
        else if (z == 2 && p->kind == PHASE_BACKWARD) snprintf(out, len, "reduce_scatter %s", unit_name(p, u, sizeof u));
        else snprintf(out, len, "- (params whole%s)", p->kind == PHASE_BACKWARD ? "; its gradient accumulates" : "");
        return;
    case PHASE_REDUCE_GRADS:
        if (z == 0 && own) snprintf(out, len, "all_reduce the gradients: %d bucket%s", tr->engine.z.n_ddp,
                                    tr->engine.z.n_ddp == 1 ? "" : "s");
        else if (z == 0) snprintf(out, len, "all_reduce the gradients in buckets"); /* their count is that rank's */
        else if (z == 1) snprintf(out, len, "reduce_scatter each unit's gradient");
        else snprintf(out, len, "wait for the reduce_scatters in flight");
        return;
    case PHASE_UPDATE:
        snprintf(out, len, z == 0 ? "update every parameter" : "update this rank's slices (the sharded update)");
        return;
    default:
        snprintf(out, len, "all_gather each unit's updated params");
    }
}

/* Rank r's table: every phase of its step, its own layout and schedule. */
static void rank_life(FILE *out, const struct trainer *tr, int r, struct timeline_phase *phases) {
    const struct config *c = tr->cfg;
    struct rank_place place = rank_place_of(c, tr->grid->world_size, r);
    struct model_layout lay;
    rank_place_layout(c, place, &lay);
    struct timeline_theory th = theory_trainer_timeline_peak(c, place, phases);
    char holds[64];
    rank_holds_text(&lay.rank, holds, sizeof holds);
    fprintf(out, "\na unit's life, one step on rank %d (--explain 2): ZeRO-%d over N = %d, overlap %s; it holds %s "
                 "(tp rank %d of %d, pp stage %d of %d, %s schedule); bytes live, from the timeline's theory "
                 "(docs/MEMORY.md), measured after the run\n",
            r, c->zero, place.dp, c->overlap ? "on" : "off", holds, place.tp_rank, place.tp, place.pp_rank, place.pp,
            schedule_name(c->schedule));
    fprintf(out, "  %-36s %12s %12s %12s  %s\n", "phase", "comm", "activations", "total", "ZeRO's collectives");
    double comm_before = 0;
    bool skipped = false;
    int shown = th.phases < TIMELINE_MAX_PHASES ? th.phases : TIMELINE_MAX_PHASES;
    for (int i = 0; i < shown; i++) {
        const struct timeline_phase *p = &phases[i];
        if (p->micro_batch >= SHOWN_MICRO_BATCHES) {
            if (!skipped)
                fprintf(out, "  ... micro-batches %d..%d not shown: their rows repeat micro-batch %d's\n",
                        SHOWN_MICRO_BATCHES, c->grad_accum - 1, SHOWN_MICRO_BATCHES - 1);
            skipped = true;
            continue;
        }
        char name[96], life[LIFE_TEXT_LEN];
        timeline_phase_name(p, name, sizeof name);
        life_at(tr, &lay.rank, r == tr->grid->world_rank, p, life, sizeof life);
        double comm = p->bytes[MEM_COMM];
        fprintf(out, "  %-36s %12.0f %12.0f %12.0f  %s%s\n", name, comm, p->bytes[MEM_ACTIVATIONS], timeline_total(p),
                life, comm > comm_before ? " (comm up)" : comm < comm_before ? " (comm down)" : "");
        comm_before = comm;
    }
    char peak[96];
    timeline_phase_name(&th.peak, peak, sizeof peak);
    fprintf(out, "  peak %.0f B at '%s': model states %.0f + scratch %.0f + activations %.0f + gathered units %.0f + "
                 "buckets %.0f%s\n",
            timeline_total(&th.peak), peak, th.states, th.scratch, th.activations, th.gathered, th.buckets,
            th.exact ? "" : " (the recorder counts an interleaved rank's slots by its first chunk: its numbers differ)");
}

void report_unit_life(FILE *out, const struct trainer *tr) {
    struct timeline_phase *phases = calloc(TIMELINE_MAX_PHASES, sizeof *phases);
    if (!phases) return;
    for (int r = 0; r < tr->grid->world_size; r++) rank_life(out, tr, r, phases);
    free(phases);
}
