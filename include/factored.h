/* Adafactor's statistics on a rank (the plan: parallel/zero/factored_plan.c;
 * the step: parallel/zero/factored.c): which tensors it updates, where
 * their statistics live, and the sums it shares with the other ranks of
 * its data-parallel group. A rank holds, of each n x m matrix it updates a
 * part of, R for the rows it touches and all m of C; of each vector, one
 * value per element it updates. The columns' sums and the sums of the rows
 * a shard boundary cuts are added over the dp group in one all-reduce per
 * step (fp32, counted as model traffic), the squares of each tensor's
 * update (the clipping RMS) in a second one of doubles (counted with the
 * scalars). Both buffers are indexed by the layout's tensors, the same on
 * every rank: a tensor's slots are the matrix's m columns, then two per dp
 * rank (its first and last row's part), so each rank adds its own and
 * reads the others'. ZeRO-0 (every rank
 * updates everything) shares nothing over dp.
 *
 * Under tensor parallelism (tp > 1) a rank holds a slice of each split
 * matrix: a column-parallel or vocabulary slice (QKV, FC, wte) has some
 * whole rows, so its column sums are added over the tp group; a
 * row-parallel slice (the projections) has every row's part, so its row
 * sums and its part of sum(C) are added over tp. Those go in a third
 * fp32 all-reduce, over the tp group after the dp one (counted as the
 * [tp] group's model traffic: theory_trainer_tp_comm), and each tensor's
 * update squares are added over tp with the dp sum's result (replicated
 * tensors, the same on every tp rank, counted once: tp rank 0's).
 *
 * Under pp with ZeRO >= 1 over dp > 1 the first and the last stage each
 * update a copy of the tied wte, cut over dp at other boundaries (the
 * embedding unit holds wpe after it, the head unit the final LayerNorm
 * before it), so their sums would round apart and the copies drift. The
 * last stage's copy takes the first stage's statistics instead: after R
 * and C move, the first stage assembles its wte's whole R (each row from
 * the rank that holds its first element) and C (from the rank that holds
 * element 0) in one fp32 all-reduce over dp, and the tie group adds it to
 * the last stage's zeros (exact) in another; the wte's update squares go
 * the same way over the tie group with the scalars. The gradients are
 * equal already (parallel/zero/comm.c), so the copies' updates are equal bit for bit.
 *
 * The step runs in the states' space: on a GPU the statistics, the sums
 * and these buffers are device memory and the collectives take them there
 * (parallel/zero/factored.c; compiled, not yet run on a GPU). */
#ifndef SHARDLAB_FACTORED_H
#define SHARDLAB_FACTORED_H

#include <stdbool.h>
#include <stddef.h>

#include "segments.h"
#include "shard.h"

/* One tensor this rank updates a part of. */
struct factored_tensor {
    int tensor;            /* in the layout's table */
    int first_seg, n_segs; /* its segments, consecutive in the rank's table */
    bool factored;         /* a matrix: rows and columns; else one value per element */
    int ncols;             /* m (factored) */
    size_t t0;             /* the tensor's first element in its unit */
    size_t a, b;           /* the tensor-local elements this rank updates, [a, b) */
    size_t r0, nrows;      /* factored: the rows [r0, r0 + nrows) they touch */
    size_t stat_at;        /* its statistics in the rank's array: R then C, or the elements */
    size_t rowsum_at;      /* factored: its rows' partial sums in the scratch */
    size_t slot_at;        /* factored: its slots in the shared sums (by layout tensor) */
    enum tp_split split;   /* its tp slice (include/layout.h) */
    size_t tp_at;          /* factored, split: its sums in the tp buffer (m columns; or R's rows, then sum C) */
    double whole;          /* the whole tensor's elements (the RMS's count): its slices' over tp, the vocabulary
                            * padded as one process pads it */
};

struct factored_plan {
    struct factored_tensor *t;
    int n;
    int ranks, rank;       /* who shares the sums: the dp group when states are sharded, else this rank alone */
    size_t stat_floats;    /* this rank's statistics (MEM_OPTIMIZER) */
    size_t slot_floats;    /* the shared sums: every matrix of the layout, m + 2 ranks */
    size_t rowsum_floats;  /* partial row sums of the matrices this rank touches */
    int tensors;           /* the layout's tensors: the RMS sums (doubles) */
    int tp, tp_rank;       /* the tp group (lay->rank): its sums, when tp > 1 */
    size_t tp_floats;      /* the sums added over tp, padded to a multiple of tp; 0 at tp 1 */
    /* the tied wte's statistics from the first stage (first or last stage
     * of several, states sharded over dp > 1): its tensor index, rows
     * (this tp slice's) and columns; tie_floats = rows + cols padded to a
     * multiple of the dp ranks, 0 where nothing is shared */
    int tie_tensor, tie_rows, tie_cols;
    bool tie_first;        /* the first stage's copy (the source) */
    size_t tie_floats;
};

/* The shared sums' floats: every matrix of the layout, its columns and
 * two slots per rank sharing them, padded to a multiple of the ranks. */
size_t factored_slot_floats(const struct model_layout *lay, int ranks);

/* Floats tensor e adds over tp (its tp_at's share of tp_floats): a
 * row-parallel slice its rows' sums and its part of sum(C), a
 * column-parallel or vocabulary one its columns'. */
static inline size_t factored_tp_sums(const struct factored_tensor *e, int tp) {
    if (tp == 1 || !e->factored || e->split == SPLIT_REPLICATED) return 0;
    return e->split == SPLIT_ROW ? e->nrows + 1 : (size_t)e->ncols;
}

/* Tensors at most: one per segment. */
static inline size_t factored_capacity(const struct opt_segments *s) { return (size_t)s->n; }

/* Whether the statistics can be saved as they are (STATE_FACTORED) on
 * this model at its tp: every slice of a matrix has 2 rows and 2 columns
 * at least (C_0 sits at (1, 1)), and the last tp rank's vocabulary slice
 * starts with 2 real rows (a resume state holds no padding rows). The
 * same on every rank: from the shape and tp alone. */
bool factored_raw_usable(const struct model_layout *lay);

/* Fills p over `table` (factored_capacity entries) from the rank's
 * segments; sharded: the states are the dp group's shards (ZeRO >= 1). */
void factored_plan_build(struct factored_plan *p, struct factored_tensor *table, const struct model_layout *lay,
                         const struct shard_layout *sh, const struct opt_segments *segs, bool sharded);

#endif
