/* build/plan --ranks: every rank's own theory on a grid of --devices
 * ranks (the config's tp, cp and pp, dp the rest): model states by line,
 * activations, communication buffers and scratch, and each group's bytes
 * per step by collective. Every number comes from the functions the
 * trainer's report prints beside what it measures (train/theory/accounting.h),
 * so a run's --log_json records and these must agree to the byte
 * (tests/mpi/plan_ranks.sh); --json writes them as the trainer's records. */
#include <stdlib.h>

#include "accounting.h"
#include "plan.h"
#include "theory_rank_parts.h"

/* The table lists every rank; past this many (the seeds' LLaMA 3 405B job
 * is 16384 GPUs) a run that could be measured beside it is not the point. */
enum { PLAN_MAX_RANKS = 16384 };

/* One rank's numbers, in the trainer's categories and groups. */
struct rank_row {
    struct rank_place place;
    struct state_theory states;
    double activations, comm_buffers, scratch, total;
    double comm[GROUP_NUM][COLL_NUM_KINDS]; /* -1: no theory of that kind (the scalars) */
};

static void rank_row_of(const struct config *c, int world, int rank, struct rank_row *row) {
    row->place = rank_place_of(c, world, rank);
    row->states = theory_trainer_states(c, row->place);
    row->activations = theory_trainer_activations(c, row->place).total;
    row->comm_buffers = theory_trainer_comm_buffers(c, row->place);
    row->scratch = theory_trainer_scratch(c, row->place).persistent;
    row->total = row->activations + row->comm_buffers + row->scratch;
    for (int i = 0; i < row->states.n; i++) row->total += row->states.lines[i].psi_bytes + row->states.lines[i].padding_bytes;
    for (int g = 0; g < GROUP_NUM; g++)
        for (int k = 0; k < COLL_NUM_KINDS; k++)
            row->comm[g][k] = theory_trainer_group_comm(c, row->place, (enum grid_group)g, (enum coll_kind)k);
}

/* The grid the trainer would build on `world` ranks, checked as it checks
 * it (config_check_grid, config_check_sizes); -1 after the message. */
static int plan_grid(const struct config *c, double devices, struct grid *g, FILE *err) {
    const int model_ranks = c->tp * c->cp * c->pp;
    if (devices > PLAN_MAX_RANKS || (long long)devices % model_ranks) {
        fprintf(err, "plan: --ranks needs --devices (the world size, at most %d) to be a multiple of tp x cp x pp = "
                "%d x %d x %d; got %.0f\n", PLAN_MAX_RANKS, c->tp, c->cp, c->pp, devices);
        return -1;
    }
    *g = (struct grid){.world_size = (int)devices, .dp = (int)devices / model_ranks, .cp = c->cp, .tp = c->tp,
                       .pp = c->pp};
    char msg[CONFIG_ERR_LEN];
    if (config_check_sizes(c, msg) != 0 || config_check_grid(c, g, msg) != 0) {
        fprintf(err, "plan: the trainer would refuse this run: %s\n", msg);
        return -1;
    }
    return 0;
}

static void json_ranks(FILE *f, const struct config *c, const struct grid *g, const struct rank_row *rows) {
    fprintf(f, "{\"type\":\"plan_ranks\",\"world\":%d,\"dp\":%d,\"cp\":%d,\"tp\":%d,\"pp\":%d,\"zero\":%d}\n",
            g->world_size, g->dp, g->cp, g->tp, g->pp, c->zero);
    for (int r = 0; r < g->world_size; r++) {
        const struct rank_row *w = &rows[r];
        for (int i = 0; i < w->states.n; i++)
            fprintf(f, "{\"type\":\"memory\",\"rank\":%d,\"category\":\"%s\",\"theory_bytes\":%.0f}\n", r,
                    mem_category_name(w->states.lines[i].category),
                    w->states.lines[i].psi_bytes + w->states.lines[i].padding_bytes);
        const struct {
            enum mem_category category;
            double bytes;
        } other[] = {{MEM_ACTIVATIONS, w->activations}, {MEM_COMM, w->comm_buffers}, {MEM_SCRATCH, w->scratch}};
        for (size_t i = 0; i < sizeof other / sizeof *other; i++)
            fprintf(f, "{\"type\":\"memory\",\"rank\":%d,\"category\":\"%s\",\"theory_bytes\":%.0f}\n", r,
                    mem_category_name(other[i].category), other[i].bytes);
        for (int gr = 0; gr < GROUP_NUM; gr++)
            for (int k = 0; k < COLL_NUM_KINDS; k++)
                if (w->comm[gr][k] >= 0)
                    fprintf(f, "{\"type\":\"comm\",\"rank\":%d,\"group\":\"%s\",\"kind\":\"%s\","
                               "\"theory_bytes_per_step\":%.17g}\n",
                            r, grid_group_name((enum grid_group)gr), coll_kind_name((enum coll_kind)k), w->comm[gr][k]);
    }
}

/* Whether some rank's theory of kind k in group g is above zero: a column. */
static bool comm_column(const struct rank_row *rows, int n, int g, int k) {
    for (int r = 0; r < n; r++)
        if (rows[r].comm[g][k] > 0) return true;
    return false;
}

static void text_ranks(FILE *f, const struct config *c, const char *config_path, const struct grid *g,
                       const struct rank_row *rows) {
    const int n = g->world_size;
    fprintf(f, "plan --ranks: %s on %d ranks = dp %d x cp %d x tp %d x pp %d, ZeRO-%d over the %d ranks of dp x cp\n",
            config_path ? config_path : "(defaults)", n, g->dp, g->cp, g->tp, g->pp, c->zero, g->dp * g->cp);
    fprintf(f, "each rank's own theory, from the functions the trainer prints beside what it measures "
               "(train/theory/accounting.h); a run's tables and --log_json must equal these to the byte\n");
    fprintf(f, "(its activations and scratch follow this machine's GEMM path and --threads, as a run's do on the "
               "machine it runs on; bf16 GEMMs here: %s; threads %d)\n\n", theory_direct_gemms(c) ? "yes" : "no",
            c->threads);
    fprintf(f, "memory per rank, bytes (activations at their peak, the rest as allocated)\n  %5s %3s %3s %3s %3s",
            "rank", "dp", "cp", "tp", "pp");
    for (int i = 0; i < rows[0].states.n; i++) fprintf(f, " %12s", mem_category_name(rows[0].states.lines[i].category));
    fprintf(f, " %12s %12s %12s %12s\n", "activations", "comm", "scratch", "total");
    for (int r = 0; r < n; r++) {
        const struct rank_row *w = &rows[r];
        fprintf(f, "  %5d %3d %3d %3d %3d", r, w->place.dp_rank / rank_place_cp(w->place),
                w->place.cp_rank, w->place.tp_rank, w->place.pp_rank);
        for (int i = 0; i < w->states.n; i++)
            fprintf(f, " %12.0f", w->states.lines[i].psi_bytes + w->states.lines[i].padding_bytes);
        fprintf(f, " %12.0f %12.0f %12.0f %12.0f\n", w->activations, w->comm_buffers, w->scratch, w->total);
    }
    fprintf(f, "\ncommunication per optimizer step, bytes each rank sends (ring volumes; recv: received)\n  %5s", "rank");
    for (int gr = 0; gr < GROUP_NUM; gr++)
        for (int k = 0; k < COLL_NUM_KINDS; k++)
            if (comm_column(rows, n, gr, k)) {
                char name[32];
                snprintf(name, sizeof name, "%s %s", grid_group_name((enum grid_group)gr),
                         coll_kind_name((enum coll_kind)k));
                fprintf(f, " %17s", name);
            }
    fputc('\n', f);
    for (int r = 0; r < n; r++) {
        fprintf(f, "  %5d", r);
        for (int gr = 0; gr < GROUP_NUM; gr++)
            for (int k = 0; k < COLL_NUM_KINDS; k++)
                if (comm_column(rows, n, gr, k)) fprintf(f, " %17.0f", rows[r].comm[gr][k] > 0 ? rows[r].comm[gr][k] : 0);
        fputc('\n', f);
    }
}

int plan_print_ranks(FILE *f, FILE *err, const struct plan_opts *o, const struct config *c) {
    struct grid g;
    if (plan_grid(c, o->in.devices, &g, err) != 0) return -1;
    struct rank_row *rows = calloc((size_t)g.world_size, sizeof *rows);
    if (!rows) {
        fprintf(err, "plan: out of memory for %d ranks' rows\n", g.world_size);
        return -1;
    }
    for (int r = 0; r < g.world_size; r++) rank_row_of(c, g.world_size, r, &rows[r]);
    if (o->json) json_ranks(f, c, &g, rows);
    else text_ranks(f, c, o->config_path, &g, rows);
    free(rows);
    return 0;
}
