/* The pipeline table (train/report/report.h): each stage's share of the model,
 * its activation slots and boundary traffic beside the schedule's
 * formulas, and the bubble it measured beside the one the schedule
 * predicts. */
#include <stdio.h>

#include "../theory/accounting.h"
#include "report.h"
#include "../theory/theory.h"

void report_pipeline(FILE *out, FILE *json, const struct trainer *tr, const struct rank_stats *ranks, int n,
                     int steps) {
    const struct config *c = tr->cfg;
    if (c->pp == 1 || steps <= 0) return;
    int m = c->grad_accum;
    int v = config_chunks(c);
    double predicted = theory_pipeline_bubble(c->pp, m, v); /* the planner's formula */
    fprintf(out, "\npipeline: %s, pp = %d stages, v = %d chunk%s per stage, m = %d micro-batches per step, averaged "
            "over %d steps\n", schedule_name(c->schedule), c->pp, v, v == 1 ? "" : "s", m, steps);
    fprintf(out, "  %-5s %-5s %-13s %5s %14s %14s %12s %12s %8s %8s %8s\n", "rank", "stage", "holds", "slots",
            "activations", "theory", "sent/step", "theory", "busy ms", "wait ms", "bubble");
    bool exact = true;
    for (int r = 0; r < n; r++) {
        struct rank_place p = rank_place_of(c, n, r);
        struct model_layout lay;
        rank_place_layout(c, p, &lay);
        struct activation_theory at = theory_trainer_activations(c, p);
        struct pipe_comm_theory pt = theory_trainer_pp_comm(c, p);
        const struct rank_stats *k = &ranks[r];
        double sent = k->comm[GROUP_PP].bytes[COLL_SEND] / steps;
        double bubble = k->pipe_total > 0 ? 1.0 - k->pipe_busy / k->pipe_total : 0.0;
        exact = exact && k->peak[MEM_ACTIVATIONS] == at.total && sent == pt.send;
        char holds[160];
        rank_holds_text(&lay.rank, holds, sizeof holds);
        fprintf(out, "  %-5d %-5d %-17s %5d %14.0f %14.0f %12.0f %12.0f %8.1f %8.1f %7.1f%%\n", r, p.pp_rank, holds,
                at.slots, k->peak[MEM_ACTIVATIONS], at.total, sent, pt.send, 1e3 * k->pipe_busy / steps,
                1e3 * k->pipe_waiting / steps, 100.0 * bubble);
        if (json)
            fprintf(json,
                    "{\"type\":\"pipeline\",\"rank\":%d,\"stage\":%d,\"l0\":%d,\"l1\":%d,\"chunks\":%d,\"slots\":%d,"
                    "\"activation_bytes\":%.0f,\"activation_theory\":%.0f,\"sent_per_step\":%.0f,"
                    "\"sent_theory\":%.0f,\"busy_s\":%.6f,\"wait_s\":%.6f,\"total_s\":%.6f,\"bubble\":%.5f,"
                    "\"bubble_theory\":%.5f}\n",
                    r, p.pp_rank, lay.rank.chunk[0].l0, lay.rank.chunk[lay.rank.n_chunks - 1].l1, lay.rank.n_chunks,
                    at.slots, k->peak[MEM_ACTIVATIONS], at.total, sent,
                    pt.send, k->pipe_busy, k->pipe_waiting, k->pipe_total, bubble, predicted);
    }
    fprintf(out, "  holds: E embedding, first-last layer (of each chunk), H head; activations: peak tracked bytes; "
                 "per chunk, slots x (chunk layers x per layer + chunk output [+ head] [+ ids]): every rank = its "
                 "theory to the byte: %s\n",
            exact ? "yes" : "NO");
    fprintf(out, "  bubble: 1 - busy / time in the schedule, per rank; theory (p - 1) / (v m + p - 1) = %.1f%% if every "
                 "stage took the same time (the last also runs the LM head and the loss; on shared cores ranks "
                 "also wait for a core)\n",
            100.0 * predicted);
    if (json) fflush(json);
}
