/* Checkpoints across the grid: holders and the route to world rank 0
 * (train/ckpt/ckpt_grid.h). */
#include "ckpt_grid.h"

#include "../theory/accounting.h"

int ckpt_holder_layout(const struct config *c, const struct grid *g, int stage, int tp_rank,
                       struct model_layout *lay) {
    struct rank_place p = {.dp = g->dp_comm.size, .cp = g->cp, .tp = g->tp, .tp_rank = tp_rank, .pp = g->pp, .pp_rank = stage};
    return rank_layout(c, p, lay);
}

bool ckpt_is_holder(const struct grid *g, int stage, int tp_rank) {
    return g->pp_rank == stage && g->tp_rank == tp_rank;
}

/* This rank holds (stage, tp_rank)'s units and is their source (dp rank 0). */
static bool ckpt_is_source(const struct grid *g, int stage, int tp_rank) {
    return ckpt_is_holder(g, stage, tp_rank) && g->dp_comm.rank == 0; /* dp 0, cp 0 */
}

size_t ckpt_unit_elems(const struct model_layout *lay, int u, bool with_wte_copy) {
    if (!with_wte_copy && u == layout_head_unit(lay) && lay->head_wte_copy) return lay->head_offset[HEAD_WTE];
    return layout_unit_size(lay, u);
}

size_t ckpt_staging_bytes(const struct config *c, const struct grid *g, size_t own_bytes) {
    if (g->pp_rank != 0 || g->dp_comm.rank != 0) return own_bytes;
    size_t most = own_bytes / 4;
    for (int s = 0; s < g->pp; s++)
        for (int t = 0; t < g->tp; t++) {
            struct model_layout lay;
            if (ckpt_holder_layout(c, g, s, t, &lay) != 0) continue; /* trainer_open refused it */
            for (int u = 0; u < lay.n_units; u++)
                most = layout_unit_size(&lay, u) > most ? layout_unit_size(&lay, u) : most;
        }
    return most * 4;
}

enum {
    ROUTE_TAG = 7,
    ROUTE_PIECE_WORDS = 1 << 28 /* fp32 words per message: a count fits an int */
};

/* Point to point on group c, uncounted, in pieces; bytes travel as fp32
 * words (bitwise: the transfer does not convert). */
static void send_words(struct collectives *c, const void *buf, size_t words, int peer) {
    struct coll_uncounted u = coll_uncounted_begin(c);
    for (size_t at = 0; at < words; at += ROUTE_PIECE_WORDS) {
        size_t n = words - at < ROUTE_PIECE_WORDS ? words - at : ROUTE_PIECE_WORDS;
        c->send(c, (const float *)buf + at, n, DTYPE_FP32, peer, ROUTE_TAG);
    }
    coll_uncounted_end(u);
}

static void recv_words(struct collectives *c, void *buf, size_t words, int peer) {
    struct coll_uncounted u = coll_uncounted_begin(c);
    for (size_t at = 0; at < words; at += ROUTE_PIECE_WORDS) {
        size_t n = words - at < ROUTE_PIECE_WORDS ? words - at : ROUTE_PIECE_WORDS;
        c->recv(c, (float *)buf + at, n, DTYPE_FP32, peer, ROUTE_TAG);
    }
    coll_uncounted_end(u);
}

void ckpt_route_to_root(struct grid *g, int stage, int tp_rank, void *buf, size_t bytes) {
    if (stage == 0 && tp_rank == 0) return; /* the source is world rank 0 */
    size_t words = (bytes + 3) / 4;
    bool root = g->world_rank == 0;
    /* hop 1, along the pp group: the source to (stage 0, dp 0, tp_rank) */
    if (stage != 0) {
        if (ckpt_is_source(g, stage, tp_rank)) send_words(&g->pp_comm, buf, words, 0);
        else if (ckpt_is_source(g, 0, tp_rank)) recv_words(&g->pp_comm, buf, words, stage);
    }
    /* hop 2, along the tp group of stage 0, dp 0: to tp rank 0 */
    if (tp_rank != 0) {
        if (ckpt_is_source(g, 0, tp_rank)) send_words(&g->tp_comm, buf, words, 0);
        else if (root) recv_words(&g->tp_comm, buf, words, tp_rank);
    }
}
