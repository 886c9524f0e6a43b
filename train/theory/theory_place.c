/* A rank's place in the grid (struct rank_place, train/theory/accounting.h)
 * and what follows from it alone: its model layout (its stage's layers,
 * its tp slice), the positions a cp rank holds, and whether sequence
 * parallelism acts. The rank theory (theory_rank.c, theory_acts.c) and
 * the planner start from here. */
#include "accounting.h"

#include "grid.h"
#include "layout.h"
#include "schedule.h"
#include "theory_rank_parts.h"
#include "../measure/trainer.h"

struct rank_place rank_place_of(const struct config *c, int world, int world_rank) {
    int tp = c->tp, cp = c->cp, pp = c->pp, dp = world / (tp * cp * pp);
    struct grid_coords at = grid_coords_of(world_rank, dp, cp, tp);
    return (struct rank_place){.dp = dp * cp, .dp_rank = at.dp_rank * cp + at.cp_rank, .tp = tp,
                               .tp_rank = at.tp_rank, .pp = pp, .pp_rank = at.pp_rank, .cp = cp,
                               .cp_rank = at.cp_rank};
}

struct rank_place rank_place_of_grid(const struct grid *g) {
    return (struct rank_place){.dp = g->dp_comm.size, .dp_rank = g->dp_comm.rank, .tp = g->tp, .tp_rank = g->tp_rank,
                               .pp = g->pp, .pp_rank = g->pp_rank, .cp = g->cp, .cp_rank = g->cp_rank};
}

int rank_layout(const struct config *c, struct rank_place p, struct model_layout *lay) {
    int counts[PIPELINE_MAX_STAGES * RANK_MAX_CHUNKS], v = config_chunks(c);
    char err[256];
    bool given = c->pp_layers[0] != 0;
    if (given && pipeline_parse_layers(c->pp_layers, p.pp * v, c->n_layer, counts, err, sizeof err) != 0) return -1;
    struct rank_desc d;
    if (pipeline_rank_desc_v(c->n_layer, p.pp, v, p.pp_rank, p.tp, p.tp_rank, given ? counts : NULL, &d) != 0)
        return -1;
    return layout_init(lay, trainer_model_shape(c), d);
}

void rank_place_layout(const struct config *c, struct rank_place p, struct model_layout *lay) {
    if (rank_layout(c, p, lay) != 0) layout_init_whole(lay, trainer_model_shape(c));
}

struct model_layout theory_layout_of(const struct config *c, struct rank_place p) {
    struct model_layout lay;
    rank_place_layout(c, p, &lay);
    return lay;
}

struct config theory_at_rank_positions(const struct config *c, struct rank_place p) {
    struct config local = *c;
    local.seq_len = c->seq_len / rank_place_cp(p);
    return local;
}

bool theory_sp_on(const struct config *c, struct rank_place p) { return c->sequence_parallel && p.tp > 1; }
