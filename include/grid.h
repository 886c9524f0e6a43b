/* The process grid: world = dp x cp x tp x pp, built once with
 * MPI_Comm_split. Rank order, tp innermost, then cp, then dp, pp outermost
 * (Megatron's): world rank =
 *   ((pp_rank x dp + dp_rank) x cp + cp_rank) x tp + tp_rank,
 * so a tensor-parallel group is consecutive ranks (one node's fast links),
 * a context-parallel ring the next-nearest, and a pipeline stage is a
 * block. The model's f and g run over the tp group
 * (model/tensor_parallel/tp.h), its ring attention over the cp group
 * (model/context_parallel/cp.h). One process without mpirun is a
 * 1 x 1 x 1 x 1 grid.
 *
 * Five groups, each its own collectives table and counters:
 *   dp   same pp_rank and tp_rank: the dp x cp ranks that hold the same
 *        weights (cp ranks see other positions of the same sequences), so
 *        gradients are reduced, and ZeRO shards, over all of them (as
 *        Megatron-LM's distributed optimizer does); its rank is
 *        dp_rank x cp + cp_rank, its size dp x cp. dp_rank alone picks
 *        the data (the loader's stride), and cp_rank the positions.
 *   cp   same pp_rank, dp_rank and tp_rank: the ring of ring attention.
 *   tp   same pp_rank, dp_rank and cp_rank.
 *   pp   same dp_rank, cp_rank and tp_rank.
 *   tie: the ranks that hold the tied token embedding
 * (used by the first pipeline stage) and LM head (the last stage), whose
 * gradients must be summed between the two. For one (dp_rank, tp_rank)
 * that is stage 0 (tie rank 0) and stage pp-1 (tie rank 1): 2 ranks when
 * pp >= 2, and at pp = 1 this rank alone (size 1). A middle stage holds
 * neither: tie_member is false and tie_comm is a group of that rank
 * alone, so collectives on it are identities and cost nothing. */
#ifndef SHARDLAB_GRID_H
#define SHARDLAB_GRID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "collectives.h"

enum { GRID_ERR_LEN = 512 };

enum grid_group { GROUP_DP, GROUP_TP, GROUP_PP, GROUP_TIE, GROUP_CP, GROUP_NUM };

struct grid {
    int world_rank, world_size;
    int dp, cp, tp, pp;
    int dp_rank, cp_rank, tp_rank, pp_rank;
    struct collectives dp_comm, tp_comm, pp_comm; /* dp_comm: dp x cp ranks (above) */
    struct collectives tie_comm;
    struct collectives cp_comm;
    bool tie_member;  /* this rank is the first or the last pipeline stage */
    bool nccl;        /* the tables are NCCL's (train/run/run_device_grid.h) */
};

/* World rank world_rank's index along each axis of a dp x cp x tp x pp
 * grid, in the order above (tp innermost, then cp, then dp, pp outermost). */
struct grid_coords {
    int dp_rank, cp_rank, tp_rank, pp_rank;
};
static inline struct grid_coords grid_coords_of(int world_rank, int dp, int cp, int tp) {
    return (struct grid_coords){.dp_rank = world_rank / (tp * cp) % dp, .cp_rank = world_rank / tp % cp,
                                .tp_rank = world_rank % tp, .pp_rank = world_rank / (tp * cp * dp)};
}
/* The inverse: the world rank at those coordinates. */
static inline int grid_world_rank(struct grid_coords at, int dp, int cp, int tp) {
    return ((at.pp_rank * dp + at.dp_rank) * cp + at.cp_rank) * tp + at.tp_rank;
}

/* The table of group k, so reports and teardown can loop over groups. */
static inline struct collectives *grid_group(struct grid *g, enum grid_group k) {
    switch (k) {
    case GROUP_DP: return &g->dp_comm;
    case GROUP_TP: return &g->tp_comm;
    case GROUP_PP: return &g->pp_comm;
    case GROUP_TIE: return &g->tie_comm;
    case GROUP_CP: return &g->cp_comm;
    default: return NULL;
    }
}

/* "dp", "tp", "pp", "tie", "cp"; "?" for a value outside the enum. */
static inline const char *grid_group_name(enum grid_group k) {
    static const char *const names[GROUP_NUM] = {
        [GROUP_DP] = "dp", [GROUP_TP] = "tp", [GROUP_PP] = "pp", [GROUP_TIE] = "tie", [GROUP_CP] = "cp"};
    return (unsigned)k < GROUP_NUM ? names[k] : "?";
}

/* Every group's calls recorded into t (include/trace.h), each under its
 * own name; NULL detaches (before t's buffer is freed). */
static inline void grid_attach_trace(struct grid *g, struct trace *t) {
    for (int k = 0; k < GROUP_NUM; k++) {
        struct collectives *c = grid_group(g, (enum grid_group)k);
        c->trace = t;
        c->trace_group = k;
    }
}

/* In place: the sum over every rank of the world of n doubles, summed over
 * the dp (dp x cp), then the tp, then the pp group. Host doubles through
 * all_reduce_scalars, which every backend takes (NCCL's included).
 * Bookkeeping (agreement, checkpoints), uncounted. Collective over the grid. */
static inline void grid_sum_uncounted(struct grid *g, double *values, int n) {
    struct collectives *groups[] = {&g->dp_comm, &g->tp_comm, &g->pp_comm};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        struct coll_uncounted u = coll_uncounted_begin(groups[i]);
        groups[i]->all_reduce_scalars(groups[i], values, n);
        coll_uncounted_end(u);
    }
}

/* Checks world_size == dp x cp x tp x pp for the given tp, cp and pp (dp
 * is what remains) and splits the five groups. Collective: call on every
 * rank. */
int grid_init(struct grid *g, int tp, int cp, int pp, char err[GRID_ERR_LEN]);
void grid_free(struct grid *g);

/* Agreement across the grid, two sums of grid_sum_uncounted (above), so
 * on any backend and tests/grid_single.h's grid alike; its bytes are not
 * counted as a step's traffic. */

/* Every rank's rc agreed over the grid: nonzero anywhere fails every rank,
 * so no rank waits forever in a collective the failed one never reaches.
 * A rank that did not fail gets -1 and a message saying another did; a
 * failed rank keeps its rc and its own message. Collective. */
static inline int grid_agree(struct grid *g, int rc, char *err, size_t err_len) {
    double failed = rc != 0;
    grid_sum_uncounted(g, &failed, 1);
    if (failed > 0 && rc == 0) {
        snprintf(err, err_len, "another rank failed (its message says why)");
        return -1;
    }
    return rc;
}

/* The largest of every rank's value, clamped to [0, GRID_AGREE_MAX_VALUES)
 * (signal numbers), agreed over the grid. Collective. A sum of one-hot
 * rows: the highest value some rank holds is the last nonzero count. */
enum { GRID_AGREE_MAX_VALUES = 64 };
static inline int grid_agree_max(struct grid *g, int mine) {
    double hot[GRID_AGREE_MAX_VALUES] = {0};
    hot[mine < 0 ? 0 : mine >= GRID_AGREE_MAX_VALUES ? GRID_AGREE_MAX_VALUES - 1 : mine] = 1.0;
    grid_sum_uncounted(g, hot, GRID_AGREE_MAX_VALUES);
    int v = GRID_AGREE_MAX_VALUES - 1;
    while (v > 0 && hot[v] == 0.0) v--;
    return v;
}

#endif
