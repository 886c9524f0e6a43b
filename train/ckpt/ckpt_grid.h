/* Checkpoints across the grid (dp x tp x pp): which rank holds which part
 * of the model, and how a part reaches the one rank that writes files.
 *
 * A holder is a (pipeline stage, tp rank) pair: the ranks at that pair,
 * one per dp rank, hold the same units (sharded over their dp group by the
 * ZeRO stage). Every rank can compute every holder's layout, so every rank
 * knows every unit's size and place in a file without asking.
 *
 * Files are written by world rank 0 (stage 0, dp 0, tp 0). A unit of
 * another holder is gathered over that holder's dp group to its dp rank 0
 * (the source), then sent point to point to world rank 0: along the pp
 * group to stage 0 and along the tp group to tp rank 0, relayed by the
 * rank at (stage 0, dp 0, tp t) when both differ. Ranks walk the holders
 * and their units in one order (stage, tp rank, unit), so every transfer
 * meets its receive; no rank holds more than one unit in transit. The
 * traffic is bookkeeping: the groups' counters are put back, as for the
 * dp gathers of checkpoints (include/zero.h). */
#ifndef SHARDLAB_CKPT_GRID_H
#define SHARDLAB_CKPT_GRID_H

#include <stdbool.h>
#include <stddef.h>

#include "grid.h"
#include "../config/config.h"
#include "layout.h"

/* The layout of holder (stage, tp_rank) for the config's model over this
 * grid: the split trainer_open uses (pp_layers, or the even split). -1 when the model cannot be
 * split so (trainer_open refuses it first). */
int ckpt_holder_layout(const struct config *c, const struct grid *g, int stage, int tp_rank,
                       struct model_layout *lay);

/* This rank holds (stage, tp_rank)'s units. */
bool ckpt_is_holder(const struct grid *g, int stage, int tp_rank);

/* Elements of unit u that a checkpoint takes from its holder: the whole
 * unit, less the head's copy of wte (the last tensor of the head) where
 * the copy is written from the embedding. */
size_t ckpt_unit_elems(const struct model_layout *lay, int u, bool with_wte_copy);

/* Staging bytes for a checkpoint on this rank: own_bytes (its largest
 * unit, padded, as the dp gathers need), or, on the ranks that receive
 * (world rank 0 and the relays: stage 0, dp 0), at least the largest unit
 * of any holder in fp32. */
size_t ckpt_staging_bytes(const struct config *c, const struct grid *g, size_t own_bytes);

/* Moves `bytes` bytes from the source of holder (stage, tp_rank) to world
 * rank 0 (nothing when that source is world rank 0). Called by every rank
 * in the common order: the source passes its data in buf, world rank 0 and
 * a relay a buffer of at least `bytes` rounded up to 4, which on world
 * rank 0 then holds the data; the other ranks return at once. */
void ckpt_route_to_root(struct grid *g, int stage, int tp_rank, void *buf, size_t bytes);

#endif
