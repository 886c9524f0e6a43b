/* The memory timeline's section of the report (train/measure/timeline.h): per
 * rank, the peak of bytes in use, its phase, and the theory's peak for the
 * layout beside it; the top phases of rank 0; JSON records of every phase
 * of every rank. */
#include <stdlib.h>

#include "../theory/accounting.h"
#include "report.h"

enum { TOP_PHASES = 5 };

/* theory: the same phase of the theory's walk (its rank's layout and
 * schedule), or NULL where the walk's phase is not this one: "theory_total"
 * is then null. */
static void json_phase(FILE *json, int rank, int step, const struct timeline_phase *p,
                       const struct timeline_phase *theory) {
    char name[96];
    timeline_phase_name(p, name, sizeof name);
    fprintf(json, "{\"type\":\"memory_phase\",\"rank\":%d,\"step\":%d,\"phase\":\"%s\",\"index\":%d,\"bytes\":{", rank,
            step, name, p->index);
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++)
        fprintf(json, "%s\"%s\":%.0f", c ? "," : "", mem_category_name((enum mem_category)c), p->bytes[c]);
    fprintf(json, "},\"total\":%.0f,\"theory_total\":", timeline_total(p));
    if (theory)
        fprintf(json, "%.0f}\n", timeline_total(theory));
    else
        fprintf(json, "null}\n");
}

/* The phases of one rank with the largest totals, largest first (the
 * earlier phase first among equals). */
static void top_phases(FILE *out, const struct mem_timeline *t) {
    int order[TIMELINE_MAX_PHASES];
    for (int i = 0; i < t->n; i++) order[i] = i;
    int shown = t->n < TOP_PHASES ? t->n : TOP_PHASES;
    for (int i = 0; i < shown; i++) /* partial selection sort: a handful of a few hundred */
        for (int j = i + 1; j < t->n; j++)
            if (timeline_total(&t->phase[order[j]]) > timeline_total(&t->phase[order[i]])) {
                int s = order[i];
                order[i] = order[j];
                order[j] = s;
            }
    fprintf(out, "  top phases of rank 0 (bytes in use):\n    %-40s %14s %12s %12s %12s\n", "phase", "total", "activations",
            "comm", "states+scr");
    for (int i = 0; i < shown; i++) {
        const struct timeline_phase *p = &t->phase[order[i]];
        char name[96];
        timeline_phase_name(p, name, sizeof name);
        double rest = timeline_total(p) - p->bytes[MEM_ACTIVATIONS] - p->bytes[MEM_COMM];
        fprintf(out, "    %-40s %14.0f %12.0f %12.0f %12.0f\n", name, timeline_total(p), p->bytes[MEM_ACTIVATIONS],
                p->bytes[MEM_COMM], rest);
    }
}

void report_timeline(FILE *out, FILE *json, const struct trainer *tr, const struct mem_timeline *ranks, int n) {
    const struct config *c = tr->cfg;
    if (ranks[0].step <= 0) return; /* no step ran */
    fprintf(out, "\nmemory timeline (bytes in use by phase, docs/MEMORY.md):\n");
    for (int r = 0; r < n; r++) {
        const struct mem_timeline *t = &ranks[r];
        struct timeline_theory th = theory_trainer_timeline_peak(c, rank_place_of(c, n, r), NULL);
        char name[96], tname[96];
        timeline_phase_name(&t->peak, name, sizeof name);
        timeline_phase_name(&th.peak, tname, sizeof tname);
        double peak = timeline_total(&t->peak), theory = timeline_total(&th.peak);
        /* the recorder counts an interleaved rank's slots by its first chunk
         * (measure_timeline.c): the walk, which counts each chunk's, differs */
        bool exact = th.exact && peak == theory && t->peak.index == th.peak.index;
        fprintf(out, "  memory timeline of step %d on rank %d: peak %.0f bytes at phase '%s' (theory: %.0f = %s %.0f + "
                     "scratch %.0f + gathered units %.0f + buckets %.0f + live activations %.0f at '%s'): %s\n",
                t->step, r, peak, name, theory, c->zero >= 3 ? "own shards" : "model states", th.states, th.scratch,
                th.gathered, th.buckets, th.activations, tname,
                exact ? "exact" : th.exact ? "DIFFERS" : "DIFFERS: the recorder counts an interleaved rank's slots by its "
                                                         "first chunk");
        if (t->dropped)
            fprintf(out, "    (%d of %d phases not kept: TIMELINE_MAX_PHASES = %d; the peak is of all)\n", t->dropped,
                    t->n + t->dropped, TIMELINE_MAX_PHASES);
    }
    top_phases(out, &ranks[0]);
    if (!json) return;
    static struct timeline_phase theory[TIMELINE_MAX_PHASES]; /* one rank's walk at a time: too big for the stack */
    for (int r = 0; r < n; r++) {
        struct timeline_theory th = theory_trainer_timeline_peak(c, rank_place_of(c, n, r), theory);
        for (int i = 0; i < ranks[r].n; i++) {
            /* the walk's phase i is the recorder's phase i: the rank's own layout and schedule
             * (tests/mpi/test_timeline.c, tests/mpi/own_numbers.sh) */
            const struct timeline_phase *m = &ranks[r].phase[i];
            bool same = i < th.phases && theory[i].kind == m->kind && theory[i].unit == m->unit &&
                        theory[i].micro_batch == m->micro_batch;
            json_phase(json, r, ranks[r].step, m, same ? &theory[i] : NULL);
        }
    }
    fflush(json);
}
