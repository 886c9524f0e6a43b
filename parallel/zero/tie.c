/* The tied embedding across pipeline stages (include/zero.h): the first
 * stage's wte and the last stage's copy get their gradients summed over
 * the tie group once per step, after the data-parallel reduction (as
 * Megatron-LM's embedding group does), so both updates see the same
 * gradient and the two copies stay bitwise equal. The sum is linear, so
 * summing after the dp reduction equals summing before it.
 *
 * Where the reduced gradient of the tied unit lives depends on the stage:
 * stage 0 keeps the whole unit reduced in the full grads; stage 1 keeps
 * this rank's chunk at the unit's start of the full grads (the in-place
 * reduce-scatter); stages 2-3 keep it in the grad shard. Each copy is
 * sharded over dp at its own unit's boundaries (the embedding unit also
 * holds wpe, the head unit the final LayerNorm), so at stages >= 1 each
 * rank first all-gathers its unit's reduced chunks into a whole unit,
 * sums the wte range across the pair, and keeps its chunk again: the extra
 * traffic is one all-gather of the unit over dp and one all-reduce of
 * Vp C over the tie group per step. */
#include "zero_parts.h"

#include "bufops.h"

static size_t gsize(const struct zero *z) { return dtype_size(z->o.grad_dtype); }

void zero_tie_init(struct zero *z, struct collectives *tie, int unit, size_t lo, size_t hi, bool in_norm) {
    z->tie = (struct zero_tie){.group = tie, .unit = unit, .lo = lo, .hi = hi, .in_norm = in_norm};
}

bool zero_tie_active(const struct zero *z) { return z->tie.group && z->tie.group->size > 1; }

void zero_tie_grads(struct zero *z) {
    if (!zero_tie_active(z)) return;
    const struct zero_tie *t = &z->tie;
    enum dtype gd = z->o.grad_dtype;
    size_t gs = gsize(z), unit_at = shard_padded_offset(&z->sh, t->unit);
    if (z->row->grads == GRADS_ALL_REDUCE_BUCKETS) { /* the whole unit is reduced in place */
        t->group->all_reduce_sum(t->group, (char *)z->st.grads + (unit_at + t->lo) * gs, t->hi - t->lo, gd);
        return;
    }
    size_t chunk = shard_unit_chunk(&z->sh, t->unit), mine = (size_t)z->sh.rank * chunk;
    /* stage 1: the unit's own region of the full grads is the work buffer
     * (past the reduced chunk it holds stale partial sums); stages 2-3: the
     * reduce-scatter bucket, idle at the step */
    bool in_place = z->row->grads == GRADS_REDUCE_SCATTER_STEP;
    char *reduced = in_place ? (char *)z->st.grads + unit_at * gs
                                    : (char *)z->st.grads + shard_offset(&z->sh, t->unit) * gs;
    char *work = in_place ? reduced : z->bucket[0];
    if (work + mine * gs != reduced) /* disjoint: mine >= chunk */
        buf_copy(z->space, work + mine * gs, reduced, chunk * gs);
    z->dp->all_gather(z->dp, work, chunk, gd);
    t->group->all_reduce_sum(t->group, work + t->lo * gs, t->hi - t->lo, gd);
    if (work + mine * gs != reduced) buf_copy(z->space, reduced, work + mine * gs, chunk * gs);
}
