/* Model states under ZeRO stages 0-3 (include/zero.h): their allocation,
 * full or this rank's shard by the stage's row, with every update rule's
 * optimizer states (one or two per element, fp32 or block-wise 8-bit
 * codes with an fp32 maximum per block; Adafactor's statistics), and the
 * optimizer step's phases after the schedule's forwards and backwards: the
 * step's reductions, the gradient norm, the sharded update segment by
 * segment, the all_gather of the updated params. Where an element lives is
 * places.c's; the collectives during forward and backward are comm.c's;
 * moving states in and out a unit at a time (checkpoints, initial values)
 * is states_io.c's. */
#include "zero_parts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bufops.h"

/* ---- the states: allocation (optimizer states by the rule) and zeroing */

/* Adafactor: its plan (include/factored.h), statistics, the first moment
 * when asked, and the step's sums (scratch in the states' space, where
 * the step runs). */
static void factored_alloc(struct zero *z) {
    struct mem_tracker *mem = z->mem;
    const bool sh = zero_optim_sharded(z);
    struct factored_tensor *table = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, "adafactor tensor table",
                                              factored_capacity(&z->segs) * sizeof *table);
    if (!table) return;
    factored_plan_build(&z->fac, table, z->lay, &z->sh, &z->segs, sh);
    const struct factored_plan *p = &z->fac;
    z->st.s1 = mem_alloc(mem, z->space, MEM_OPTIMIZER, sh ? "adafactor R, C of own rows, v (fp32, shard)"
                                                          : "adafactor R, C, v (fp32)", p->stat_floats * 4);
    if (z->o.optim.adafactor_beta1 > 0.0f)
        z->st.s2 = mem_alloc(mem, z->space, MEM_OPTIMIZER, sh ? "adafactor m (fp32, shard)" : "adafactor m (fp32)",
                             (sh ? z->sh.total_shard : z->sh.total_padded) * 4);
    const enum mem_space sp = z->space; /* the step runs there (factored.c) */
    z->fac_sums = mem_alloc(mem, sp, MEM_SCRATCH, "adafactor column and cut-row sums (fp32)", p->slot_floats * 4);
    z->fac_rowsums = mem_alloc(mem, sp, MEM_SCRATCH, "adafactor row sums (fp32)", p->rowsum_floats * 4);
    if (p->tp_floats)
        z->fac_tpsums = mem_alloc(mem, sp, MEM_SCRATCH, "adafactor slices' sums over tp (fp32)", p->tp_floats * 4);
    if (p->tie_floats)
        z->fac_tiesums = mem_alloc(mem, sp, MEM_SCRATCH, "adafactor tied wte's R and C (fp32)", p->tie_floats * 4);
    const size_t squares = (size_t)p->tensors * sizeof *z->fac_squares;
    z->fac_squares = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, "adafactor update squares (fp64 per tensor)", squares);
    z->fac_squares_at = sp == MEM_HOST ? z->fac_squares
                                       : mem_alloc(mem, sp, MEM_SCRATCH, "adafactor update squares (device)", squares);
}

/* Allocation failures are left in the tracker (the caller checks). */
static void optstate_alloc(struct zero *z) {
    struct mem_tracker *mem = z->mem;
    enum mem_space sp = z->space;
    const struct optim_rule *r = z->rule;
    if (z->o.optim.kind == OPTIM_ADAFACTOR) {
        factored_alloc(z);
        return;
    }
    float **f32[2] = {&z->st.s1, &z->st.s2};
    char name[MEM_NAME_LEN];
    if (!r->quantized) {
        size_t n = zero_optim_sharded(z) ? z->sh.total_shard : z->sh.total_padded;
        for (int k = 0; k < r->states; k++) {
            snprintf(name, sizeof name, "%s (fp32%s)", r->state_name[k], zero_optim_sharded(z) ? ", shard" : "");
            *f32[k] = mem_alloc(mem, sp, MEM_OPTIMIZER, name, n * 4);
        }
        return;
    }
    const struct opt_segments *g = &z->segs;
    uint8_t **codes[2] = {&z->st.q1, &z->st.q2};
    float **absmax[2] = {&z->st.absmax1, &z->st.absmax2};
    struct qmap_index **index[2] = {&z->qindex_signed, &z->qindex_unsigned};
    float *map[2] = {z->qmap_signed, z->qmap_unsigned};
    for (int k = 0; k < r->states; k++) {
        qmap_dynamic(map[k], k == 0);
        /* host memory whatever sp is: the host builds the index and only the
         * CPU's quantizer reads it (the CUDA one searches the map itself) */
        snprintf(name, sizeof name, "8-bit code search index (%s)", r->state_name[k]);
        *index[k] = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, name, sizeof **index[k]);
        if (*index[k]) qmap_index_build(*index[k], map[k]);
        snprintf(name, sizeof name, "%s (8-bit codes)", r->state_name[k]);
        *codes[k] = mem_alloc(mem, sp, MEM_OPTIMIZER, name, g->n_q);
        snprintf(name, sizeof name, "%s absmax (fp32 per 256)", r->state_name[k]);
        *absmax[k] = mem_alloc(mem, sp, MEM_OPTIMIZER, name, g->n_blocks * 4);
        if (g->n_f32) {
            snprintf(name, sizeof name, "%s (fp32, small tensors)", r->state_name[k]);
            *f32[k] = mem_alloc(mem, sp, MEM_OPTIMIZER, name, g->n_f32 * 4);
        }
    }
}

static void optstate_free(struct zero *z) {
    void *bufs[] = {z->st.s1,        z->st.s2,          z->st.q1,        z->st.q2,       z->st.absmax1,
                    z->st.absmax2,   z->qindex_signed,  z->qindex_unsigned, z->fac.t,    z->fac_sums,
                    z->fac_rowsums,  z->fac_tpsums,     z->fac_tiesums, z->fac_squares,
                    z->fac_squares_at != z->fac_squares ? z->fac_squares_at : NULL};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(z->mem, bufs[i]);
}

int zero_init(struct zero *z, const struct zero_options *o, const struct model_layout *lay, struct collectives *dp,
              struct mem_tracker *mem, enum mem_space space, struct exec_ctx *flops) {
    *z = (struct zero){.o = *o, .row = zero_stage_row(o->stage),
                       .rule = optim_rule(o->optim.kind), .lay = lay, .dp = dp, .mem = mem, .space = space,
                       .flops = flops};
    shard_layout_init(&z->sh, lay, dp->size, dp->rank);
    struct opt_segment *table = mem_alloc(mem, MEM_HOST, MEM_SCRATCH, "optimizer segment table",
                                          opt_segments_capacity(lay) * sizeof *table);
    if (!table) return -1; /* the tracker holds the message */
    opt_segments_build(&z->segs, table, lay, &z->sh, z->row, &o->optim);
    size_t full = z->sh.total_padded, shard = z->sh.total_shard;
    size_t np = zero_params_sharded(z) ? shard : full, ng = zero_grads_sharded(z) ? shard : full;
    size_t no = zero_optim_sharded(z) ? shard : full;
    z->st.params = mem_alloc(mem, space, MEM_PARAMS, zero_params_sharded(z) ? "params (shard)" : "params", np * zero_psize(z));
    if (o->param_dtype == DTYPE_BF16)
        z->st.master = mem_alloc(mem, space, MEM_MASTER, zero_optim_sharded(z) ? "master (fp32, shard)" : "master (fp32)",
                                 no * 4);
    z->st.grads = mem_alloc(mem, space, MEM_GRADS, zero_grads_sharded(z) ? "grads (shard)" : "grads", ng * zero_gsize(z));
    optstate_alloc(z);
    zero_comm_init(z);
    return 0;
}

void zero_free(struct zero *z) {
    optstate_free(z);
    zero_comm_free(z);
    void *bufs[] = {z->st.params, z->st.master, z->st.grads};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(z->mem, bufs[i]);
    mem_free(z->mem, z->segs.seg);
    buf_sumsq_close(z->norm_list);
    z->norm_list = NULL;
}

void *zero_unit_grads(struct zero *z, int u) {
    return zero_grads_sharded(z) ? NULL : (char *)z->st.grads + zero_full_index(z, u, 0) * zero_gsize(z);
}

void zero_zero_grads(struct zero *z) {
    buf_zero(z->space, z->st.grads, (zero_grads_sharded(z) ? z->sh.total_shard : z->sh.total_padded) * zero_gsize(z));
}

/* ---- the gradient norm: this rank's squares, then the groups' sum */

/* Whether segment g counts in this rank's sum of squares: its segments
 * partition exactly the elements it owns (every unit at stage 0). Under
 * tensor parallelism a replicated tensor's gradient is the same on every
 * rank of the group, so only tp rank 0 counts it; the split tensors' parts
 * sum over the group (norm_groups). */
static bool norm_counts(const struct zero *z, const struct opt_segment *g) {
    const struct zero_tie *t = &z->tie;
    /* segments never cross a tensor: one inside the uncounted copy is skipped whole */
    if (zero_tie_active(z) && !t->in_norm && g->unit == t->unit && g->lo >= t->lo && g->hi <= t->hi) return false;
    return !(g->tp_replicated && z->lay->rank.tp_rank > 0);
}

/* The one-pass norm's list of the counted segments, in segment order (the
 * order the per-segment sums add them in); NULL when out of host memory. */
static struct sumsq_list *open_norm_list(const struct zero *z) {
    int n = z->segs.n > 0 ? z->segs.n : 1;
    const void **data = calloc((size_t)n, sizeof *data);
    size_t *len = calloc((size_t)n, sizeof *len);
    struct sumsq_list *l = NULL;
    if (data && len) {
        int k = 0;
        for (int i = 0; i < z->segs.n; i++) {
            const struct opt_segment *g = &z->segs.seg[i];
            if (!norm_counts(z, g)) continue;
            data[k] = zero_segment_grad(z, g);
            len[k++] = g->hi - g->lo;
        }
        l = buf_sumsq_open(z->space, data, z->o.grad_dtype, len, k);
    }
    free(data);
    free(len);
    return l;
}

/* Sum of squares of the reduced gradients this rank updates (norm_counts).
 * A buf_sum_squares per segment (on a GPU a call and a device-to-host copy
 * each), or where the backend has a one-pass norm (exec_ctx.device.
 * one_pass_norm, a GPU's) one pass over the list's device table and one
 * copy (buf_sumsq_run); the segments' sums added here in the same order. */
static double local_grad_sum_squares(struct zero *z) {
    double s = 0.0;
    if (z->flops && z->flops->device.one_pass_norm) {
        if (!z->norm_list) z->norm_list = open_norm_list(z);
        if (!z->norm_list) {
            fprintf(stderr, "error: the gradient norm's segment list (one pass on the device) could not be made: out of memory\n");
            exit(EXIT_FAILURE);
        }
        const double *sums = buf_sumsq_run(z->norm_list);
        for (int k = 0; k < buf_sumsq_count(z->norm_list); k++) s += sums[k];
        return s;
    }
    for (int k = 0; k < z->segs.n; k++) {
        const struct opt_segment *g = &z->segs.seg[k];
        if (norm_counts(z, g)) s += buf_sum_squares(z->space, zero_segment_grad(z, g), z->o.grad_dtype, g->hi - g->lo);
    }
    return s;
}

/* ---- the optimizer step's phases, in order (parallel/step.c: step_run) */

/* The step's phase k is done (include/step_hooks.h: the memory timeline samples it). */
static void phase_done(const struct zero *z, enum phase_kind k) {
    step_hook(z->o.hooks, (struct step_event){.at = PHASE_DONE, .phase = k, .unit = -1, .micro_batch = -1});
}

void zero_reduce_grads(struct zero *z) {
    phase_done(z, PHASE_REDUCE_GRADS); /* before: what is in flight is still held */
    zero_reduce_step_grads(z);
    zero_all_reduce_tied_grads(z);
}

double zero_all_reduce_grad_norm(struct zero *z) {
    double sq = local_grad_sum_squares(z);
    if (z->row->shards_optimizer) z->dp->all_reduce_scalars(z->dp, &sq, 1); /* each rank summed its own segments */
    for (int k = 0; k < NORM_GROUP_NUM; k++)
        if (z->norm_groups[k] && z->norm_groups[k]->size > 1) z->norm_groups[k]->all_reduce_scalars(z->norm_groups[k], &sq, 1);
    return sqrt(sq);
}

/* One segment's update by the rule: w (fp32 master or params) and grad
 * point at the segment's first element; params_out at its bf16 params (or
 * NULL). */
static void optstate_update(struct zero *z, const struct opt_segment *g, const struct adamw_hparams *h, float *w,
                            const void *grad, bf16 *params_out, int64_t step) {
    const struct optim_options *o = &z->o.optim;
    enum dtype gd = z->o.grad_dtype;
    size_t n = g->hi - g->lo;
    struct param_writeback out = {.params = params_out, .rounding = z->o.rounding, .seed = z->o.seed,
                                  .noise_index = (uint64_t)step * z->lay->ref_total + g->global};
    struct adamw_hparams hh = *h;
    hh.weight_decay = g->decay ? o->weight_decay : 0.0f;
    const struct sgd_hparams sh = {.lr = h->lr, .momentum = o->momentum, .weight_decay = hh.weight_decay,
                                   .grad_scale = h->grad_scale, .nesterov = o->nesterov, .first_step = step == 0};
    const struct lion_hparams lh = {.lr = h->lr, .beta1 = h->beta1, .beta2 = h->beta2,
                                    .weight_decay = hh.weight_decay, .grad_scale = h->grad_scale};
    const size_t k = zero_opt_f32_index(z, g);
    /* (no offsets on the NULL of a state the rule does not have) */
    const bool q = g->quantized, two = z->rule->states == 2;
    uint8_t *q1 = q ? z->st.q1 + g->q_offset : NULL, *q2 = q && two ? z->st.q2 + g->q_offset : NULL;
    float *a1 = q ? z->st.absmax1 + g->block_offset : NULL, *a2 = q && two ? z->st.absmax2 + g->block_offset : NULL;
    /* a quantized rule's small tensors run its 32-bit twin on the fp32 states */
    enum optimizer_kind kind = q || !z->rule->quantized ? o->kind : z->rule->twin;
    switch (kind) {
    case OPTIM_ADAMW: adamw_update(&hh, n, w, z->st.s1 + k, z->st.s2 + k, grad, gd, &out, z->flops); break;
    case OPTIM_ADAMW8BIT:
        adamw8bit_update(&hh, n, w, q1, q2, a1, a2, z->qmap_signed, z->qmap_unsigned, z->qindex_signed,
                         z->qindex_unsigned, grad, gd, &out, z->flops);
        break;
    case OPTIM_SGD: sgd_update(&sh, n, w, z->st.s1 + k, grad, gd, &out, z->flops); break;
    case OPTIM_SGD8BIT:
        sgd8bit_update(&sh, n, w, q1, a1, z->qmap_signed, z->qindex_signed, grad, gd, &out, z->flops);
        break;
    case OPTIM_LION: lion_update(&lh, n, w, z->st.s1 + k, grad, gd, &out, z->flops); break;
    case OPTIM_LION8BIT:
        lion8bit_update(&lh, n, w, q1, a1, z->qmap_signed, z->qindex_signed, grad, gd, &out, z->flops);
        break;
    case OPTIM_ADAFACTOR: /* zero_update runs it whole (factored.c) */
    case OPTIM_NUM_KINDS: break;
    }
}

void zero_update(struct zero *z, int step, double grad_norm) {
    const struct optim_options *op = &z->o.optim;
    struct adamw_hparams h = {.lr = lr_at(&op->lr, step), .beta1 = op->beta1, .beta2 = op->beta2, .eps = op->eps,
                              .grad_scale = clip_scale(grad_norm, op->grad_clip), .t = (int64_t)step + 1};
    if (op->kind == OPTIM_ADAFACTOR) { /* whole tensors at a time, not segment by segment */
        factored_update(z, &h, step);
    } else {
        for (int k = 0; k < z->segs.n; k++) {
            const struct opt_segment *g = &z->segs.seg[k];
            bf16 *out;
            float *w = zero_segment_weights(z, g, &out);
            optstate_update(z, g, &h, w, zero_segment_grad(z, g), out, step);
        }
    }
    phase_done(z, PHASE_UPDATE);
}

void zero_all_gather_updated(struct zero *z) {
    if (z->row->params != PARAMS_ALL_GATHER_UPDATED) return; /* DDP: every rank updated all; ZeRO-3: gathered in use */
    for (int u = 0; u < z->lay->n_units; u++) {
        step_hook(z->o.hooks, (struct step_event){.at = UNIT_MOVES, .unit = u}); /* the trace names the unit */
        z->dp->all_gather(z->dp, (char *)z->st.params + zero_full_index(z, u, 0) * zero_psize(z), shard_unit_chunk(&z->sh, u),
                          z->o.param_dtype);
        step_hook(z->o.hooks, (struct step_event){.at = UNIT_MOVED, .unit = u});
    }
    phase_done(z, PHASE_GATHER_PARAMS);
}
