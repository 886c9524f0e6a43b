/* The ZeRO step over this rank's units, one micro-batch at a time, as
 * Rajbhandari et al. 2020 write it:
 *   forward:  for each unit, all_gather its parameters, run its forward,
 *             release them;
 *   backward: for each unit, from the last, all_gather, run its backward,
 *             reduce_scatter its gradients, release;
 *   then the sharded update (engine_reduce_grads, engine_all_reduce_grad_norm,
 *   engine_update, engine_all_gather_updated, at the end of this file).
 * The stage's row (include/zero_stages.h) says which of these move bytes:
 * below ZeRO-3 all_gather reads the resident params and release does
 * nothing; DDP and ZeRO-1 keep the gradients whole until the step's end.
 * With overlap, the next unit's all_gather is posted early
 * (all_gather_ahead). The collectives are parallel/zero/comm.c's; the
 * trace and the memory timeline observe each unit's span (unit_begin,
 * unit_end, phase_done). */
#include "engine.h"

#include <stdio.h>

#include "bufops.h"
#include "context_parallel.h"
#include "conversions.h"

static const char *const unit_names[] = {[UNIT_EMBED] = "embedding", [UNIT_HEAD] = "head", [UNIT_LAYER] = "layer"};

/* Whether the model reads the bf16 params as they are (struct
 * unit_weights, include/gpt.h): bf16 params and bf16 GEMMs on the host,
 * or on a GPU whose backend reads bf16 (flops->device.reads_bf16: its
 * GEMMs read bf16 weights as they are; its embedding lookup is
 * embedding_rows_forward_bf16 on the device). Then only a unit's vectors
 * (LayerNorms, biases, wpe) are widened, packed (the layout's
 * *_vec_offset); a GPU backend that widens gets every tensor widened. */
static bool params_direct(const struct engine *e) {
    return e->o.zero.param_dtype == DTYPE_BF16 && e->o.gemm_dtype == DTYPE_BF16 &&
           (e->space == MEM_HOST || (e->flops && e->flops->device.reads_bf16));
}

/* A unit of kind k's tensor offsets, count, and packed vectors' offsets. */
struct unit_tensors {
    const size_t *off, *vec;
    int n;
    size_t vec_size;
};

static struct unit_tensors unit_tensors(const struct model_layout *lay, enum unit_kind k) {
    if (k == UNIT_EMBED) return (struct unit_tensors){lay->embed_offset, lay->embed_vec_offset, EMB_NUM_TENSORS, lay->embed_vec_size};
    if (k == UNIT_HEAD) return (struct unit_tensors){lay->head_offset, lay->head_vec_offset, HEAD_NUM_TENSORS, lay->head_vec_size};
    return (struct unit_tensors){lay->layer_offset, lay->layer_vec_offset, LAYER_NUM_TENSORS, lay->layer_vec_size};
}

int engine_init(struct engine *e, const struct engine_options *o, const struct model_layout *lay,
                struct grid *grid, struct mem_tracker *mem, enum mem_space space, struct exec_ctx *flops,
                char *err, size_t err_len) {
    struct collectives *dp = &grid->dp_comm;
    *e = (struct engine){.o = *o, .lay = *lay, .grid = grid, .dp = dp, .mem = mem, .space = space, .flops = flops};
    if (lay->rank.tp != grid->tp_comm.size || lay->rank.tp_rank != grid->tp_comm.rank) {
        snprintf(err, err_len, "the layout's tensor-parallel rank %d of %d does not match the grid's tp group (rank %d of %d)",
                 lay->rank.tp_rank, lay->rank.tp, grid->tp_comm.rank, grid->tp_comm.size);
        return -1;
    }
    /* context parallelism: the model runs this rank's T/cp positions of
     * every sequence (the load-balanced split, include/context_parallel.h):
     * its layout is the rank's at T/cp (e->lay, the units', keeps T); its
     * weights are whole, their gradients summed over dp x cp (dp_comm) */
    int cp = grid->cp_comm.size;
    if (cp > 1 && lay->shape.T % (2 * cp) != 0) {
        snprintf(err, err_len, "context parallelism cuts each sequence into 2 cp chunks: seq_len (%d) must be a "
                 "multiple of 2 cp = %d", lay->shape.T, 2 * cp);
        return -1;
    }
    if (cp > 1 && o->attention != ATTENTION_FLASH) {
        snprintf(err, err_len, "context parallelism (cp = %d) needs --attention flash (ring attention merges by "
                 "log-sum-exp)", cp);
        return -1;
    }
    e->model_lay = *lay;
    e->model_lay.shape.T = lay->shape.T / cp;
    if (o->sequence_parallel && e->model_lay.shape.T % lay->rank.tp != 0) {
        snprintf(err, err_len, "sequence parallelism splits the sequence over the tp ranks: tp = %d must divide "
                 "seq_len/cp (%d)", lay->rank.tp, e->model_lay.shape.T);
        return -1;
    }
    if (zero_init(&e->z, &o->zero, &e->lay, dp, mem, space, flops) != 0) {
        mem_failure_message(mem, err, err_len);
        return -1;
    }
    bool bf16_params = o->zero.param_dtype == DTYPE_BF16;
    /* fp32 grads at stages 0-1 accumulate straight into the grads */
    bool accumulators = o->zero.grad_dtype == DTYPE_BF16 || zero_stage_row(o->zero.stage)->shards_grads;
    for (int kind = 0; kind <= UNIT_LAYER; kind++) {
        int u = layout_kind_unit(&e->lay, (enum unit_kind)kind);
        if (u < 0) continue;
        struct unit_info ui = layout_unit(&e->lay, u);
        size_t padded = shard_unit_padded(&e->z.sh, u);
        char name[MEM_NAME_LEN];
        if (bf16_params && params_direct(e)) { /* the vectors only */
            snprintf(name, sizeof name, "%s vectors (fp32)", unit_names[ui.kind]);
            e->w32[ui.kind] = mem_alloc(mem, space, MEM_SCRATCH, name, unit_tensors(&e->lay, ui.kind).vec_size * 4);
        } else if (bf16_params) {
            snprintf(name, sizeof name, "%s weights (fp32)", unit_names[ui.kind]);
            e->w32[ui.kind] = mem_alloc(mem, space, MEM_SCRATCH, name, padded * 4);
        }
        if (accumulators) {
            snprintf(name, sizeof name, "%s grad accumulator (fp32)", unit_names[ui.kind]);
            e->dw32[ui.kind] = mem_alloc(mem, space, MEM_SCRATCH, name, padded * 4);
        }
    }
    int slots[RANK_MAX_CHUNKS] = {o->slots}, total = 0;
    for (int c = 0; c < e->lay.rank.n_chunks; c++) {
        if (o->chunk_slots[c] > 0) slots[c] = o->chunk_slots[c];
        total += slots[c];
    }
    if (total > GPT_MAX_SLOTS) {
        snprintf(err, err_len, "%d activation slots over %d chunks: more than the %d a rank holds", total,
                 e->lay.rank.n_chunks, GPT_MAX_SLOTS);
        return -1;
    }
    gpt_init_chunks(&e->model, &e->model_lay, o->micro_batch, slots, o->act_dtype, o->gemm_dtype, o->recompute,
                    o->attention, o->sequence_parallel, grid->cp_comm.size, mem, space, flops);
    /* tensor parallelism: the model's f and g run over the tp group, and
     * the gradient norm sums the slices' squares over it */
    e->model.tp = &grid->tp_comm;
    gpt_set_context_parallel(&e->model, &grid->cp_comm, mem); /* ring attention over the cp group */
    e->z.norm_groups[NORM_OVER_TP] = &grid->tp_comm;
    /* pipeline stages: the tied wte's two copies and the norm over stages */
    e->z.norm_groups[NORM_OVER_PP] = &grid->pp_comm;
    if (layout_ties(&e->lay)) { /* first or last of several stages */
        bool embed = e->lay.rank.has_embed;
        struct tensor_info t = embed ? layout_embed_tensor(&e->lay, EMB_WTE) : layout_head_tensor(&e->lay, HEAD_WTE);
        size_t at = t.offset - layout_unit_offset(&e->lay, t.unit);
        zero_tie_init(&e->z, &grid->tie_comm, t.unit, at, at + t.numel, embed);
    }
    if (mem_failed(mem)) {
        mem_failure_message(mem, err, err_len);
        return -1;
    }
    return 0;
}

void engine_free(struct engine *e) {
    gpt_free(&e->model, e->mem);
    zero_free(&e->z);
    for (int k = 0; k <= UNIT_LAYER; k++) {
        mem_free(e->mem, e->w32[k]);
        mem_free(e->mem, e->dw32[k]);
    }
}

void engine_params_changed(struct engine *e) {
    for (int k = 0; k <= UNIT_LAYER; k++) e->w32_fresh[k] = false;
}

size_t engine_unit_staging_bytes(const struct engine *e) { return shard_max_unit_padded(&e->z.sh) * 4; }

/* Values drawn or read on the host reach a model in device memory through
 * a device buffer of the unit's size (dev; NULL when the model is on the
 * host, whose values then serve as they are). */
static const float *to_model_space(float *dev, const float *w, size_t n) {
    if (!dev) return w;
    buf_copy(MEM_DEVICE, dev, w, n * sizeof *w);
    return dev;
}

static float *device_staging(struct engine *e, const char *name, size_t n) {
    return e->space == MEM_HOST ? NULL : mem_alloc(e->mem, e->space, MEM_SCRATCH, name, n * sizeof(float));
}

void engine_set_unit(struct engine *e, int u, const float *w) {
    size_t n = layout_unit_size(&e->lay, u);
    float *dev = device_staging(e, "unit staging (fp32, device)", n);
    zero_set_unit(&e->z, u, 0, n, to_model_space(dev, w, n));
    mem_free(e->mem, dev);
    engine_params_changed(e);
}

void engine_init_params(struct engine *e) {
    size_t most = 0; /* the largest part of a unit this rank stores */
    for (int u = 0; u < e->lay.n_units; u++) {
        size_t lo, hi;
        zero_unit_stored(&e->z, u, &lo, &hi);
        most = hi - lo > most ? hi - lo : most;
    }
    float *w = mem_alloc(e->mem, MEM_HOST, MEM_SCRATCH, "init staging (fp32)", most * sizeof *w);
    float *dev = device_staging(e, "init staging (fp32, device)", most);
    for (int u = 0; u < e->lay.n_units; u++) {
        size_t lo, hi;
        zero_unit_stored(&e->z, u, &lo, &hi); /* only what this rank keeps is drawn */
        gpt_init_unit(&e->lay, u, lo, hi, w, e->o.init_std, e->o.zero.seed); /* on the host: rng.h */
        zero_set_unit(&e->z, u, lo, hi, to_model_space(dev, w, hi - lo));
    }
    mem_free(e->mem, dev);
    mem_free(e->mem, w);
    engine_params_changed(e);
}

/* Widens the tensors of unit u (kind k, params p) that the model reads as
 * fp32: all of them, or with params_direct its vectors, packed. */
static void widen_unit(struct engine *e, int u, enum unit_kind k, const bf16 *p) {
    if (!params_direct(e)) {
        conv_widen(e->flops, e->w32[k], p, layout_unit_size(&e->lay, u));
        return;
    }
    struct unit_tensors ts = unit_tensors(&e->lay, k);
    size_t end = layout_unit_size(&e->lay, u);
    for (int t = 0; t < ts.n; t++) {
        size_t hi = t + 1 < ts.n ? ts.off[t + 1] : end;
        if (!layout_gemm_tensor(k, t)) conv_widen(e->flops, e->w32[k] + ts.vec[t], p + ts.off[t], hi - ts.off[t]);
    }
}

/* all_gather: unit u's weights, whole, as the model reads them (struct
 * unit_weights, include/gpt.h), from the params the stage's row keeps resident or
 * gathers (ZeRO-3: the collective, include/zero.h). fp32 views, widened
 * from bf16 params or the fp32 params themselves, and with params_direct
 * the bf16 params beside them. Resident, the embedding and the head are
 * widened once per update: they serve every micro-batch. */
static struct unit_weights all_gather(struct engine *e, int u) {
    enum unit_kind k = layout_unit(&e->lay, u).kind;
    const void *p = zero_all_gather(&e->z, u);
    if (e->o.zero.param_dtype == DTYPE_FP32) return (struct unit_weights){operand_f32(p, e->space), p};
    struct operand params = params_direct(e) ? operand_bf16(p, e->space) : operand_f32(e->w32[k], e->space);
    struct unit_weights w = {params, e->w32[k]};
    if (e->w32_fresh[k]) return w;
    widen_unit(e, u, k, p);
    if (k != UNIT_LAYER && !e->z.row->shards_params) e->w32_fresh[k] = true;
    return w;
}

/* ZeRO-3 with overlap: the all_gather of unit u (the next to run; u < 0:
 * none) posted early, so that it moves while this unit computes. */
static void all_gather_ahead(struct engine *e, int u) { zero_all_gather_ahead(&e->z, u); }

/* ZeRO-3: unit u's gathered weights are read no more (u < 0: none). */
static void release(struct engine *e, int u) { zero_release(&e->z, u); }

/* Unit u's gradient dw for this micro-batch, reduced over the data-parallel
 * ranks as the row says: ZeRO-2/3 reduce_scatter it now; DDP and ZeRO-1
 * keep it in the full grads (DDP's buckets all_reduce as the step's last
 * backward fills them, ZeRO-1 reduce_scatters once before the update). */
static void reduce_scatter(struct engine *e, int u, const float *dw) { zero_reduce_scatter(&e->z, u, dw); }

/* fp32 gradient accumulator for unit u: the grads themselves when they are
 * fp32 and full, else a zeroed unit buffer. */
static float *unit_grads_begin(struct engine *e, int u) {
    enum unit_kind k = layout_unit(&e->lay, u).kind;
    if (!e->dw32[k]) return zero_unit_grads(&e->z, u);
    buf_zero(e->space, e->dw32[k], shard_unit_padded(&e->z.sh, u) * sizeof(float));
    return e->dw32[k];
}

void *engine_stage_input(struct engine *e, int slot) { return gpt_stage_input(&e->model, slot); }
void *engine_stage_output(struct engine *e, int slot) { return gpt_stage_output(&e->model, slot); }
size_t engine_stage_numel(const struct engine *e) { return gpt_stage_numel(&e->model); }

int engine_chunk_slot(const struct engine *e, int chunk, int k) { return gpt_chunk_slot(&e->model, chunk, k); }

/* What slot s's chunk runs: its layers, the embedding (chunk 0 of the
 * first stage), the head (the last chunk of the last stage). */
struct chunk_units {
    int l0, l1, eu, hu; /* eu, hu: the units, -1 when this chunk does not run them */
};

static struct chunk_units chunk_units(const struct engine *e, int slot) {
    const struct rank_desc *r = &e->lay.rank;
    int c = e->model.slot[slot].chunk;
    return (struct chunk_units){.l0 = r->chunk[c].l0, .l1 = r->chunk[c].l1,
                                .eu = c == 0 ? layout_embed_unit(&e->lay) : -1,
                                .hu = c == r->n_chunks - 1 ? layout_head_unit(&e->lay) : -1};
}

void engine_zero_grads(struct engine *e) {
    zero_zero_grads(&e->z);
    e->backwards = 0;
}

/* The head's GEMM weight: an untied head's own lm_head (llama); the tied
 * wte, the embedding's, or the head's own copy on another stage. */
static struct operand head_wte(const struct engine *e, struct unit_weights w_embed, struct unit_weights w_head) {
    if (!shape_tied(&e->lay.shape)) return operand_at(w_head.params, e->lay.head_offset[HEAD_LM]);
    return e->lay.rank.has_embed ? operand_at(w_embed.params, e->lay.embed_offset[EMB_WTE])
                                 : operand_at(w_head.params, e->lay.head_offset[HEAD_WTE]);
}

/* Its gradient accumulator, in the embedding's or the head's. */
static float *head_wte_grads(const struct engine *e, float *dw_embed, float *dw_head) {
    if (!shape_tied(&e->lay.shape)) return dw_head + e->lay.head_offset[HEAD_LM];
    return dw_embed ? dw_embed + e->lay.embed_offset[EMB_WTE] : dw_head + e->lay.head_offset[HEAD_WTE];
}

/* What the step's observers see of a unit (include/step_hooks.h): the
 * boundary after its forward or backward (phase_done), and its span,
 * inside which its collectives run (the wait for its params' all_gather,
 * the post of its gradient's reduce_scatter). */
static void phase_done(const struct engine *e, enum phase_kind k, int u) {
    step_hook(e->o.zero.hooks,
              (struct step_event){.at = PHASE_DONE, .phase = k, .unit = u, .micro_batch = e->micro_batch});
}

static void unit_begin(const struct engine *e, enum phase_kind k, int u) {
    step_hook(e->o.zero.hooks,
              (struct step_event){.at = UNIT_BEGINS, .phase = k, .unit = u, .micro_batch = e->micro_batch});
}

static void unit_end(const struct engine *e, enum phase_kind k, int u) {
    step_hook(e->o.zero.hooks,
              (struct step_event){.at = UNIT_ENDS, .phase = k, .unit = u, .micro_batch = e->micro_batch});
}

float engine_forward(struct engine *e, int slot, const struct mb_input *in, void *x_out, float dloss) {
    const struct model_layout *lay = &e->lay;
    struct gpt *m = &e->model;
    size_t act_bytes = gpt_stage_numel(m) * dtype_size(e->o.act_dtype);
    struct chunk_units cu = chunk_units(e, slot);
    int hu = cu.hu, l0 = cu.l0, l1 = cu.l1;
    bool tied = shape_tied(&lay->shape); /* llama's head reads its own lm_head: no wte kept for it */
    struct unit_weights we = {0};
    /* a backend that queues the step (device.targets_with_batch): the
     * targets go to the device with the batch, before this micro-batch's
     * kernels are queued (else in the head's forward, a host copy that
     * waits for the whole forward mid-step) */
    bool targets_early = hu >= 0 && e->flops && e->flops->device.targets_with_batch;
    if (targets_early) gpt_upload_targets(m, slot, in->targets);
    if (cu.eu >= 0) {
        unit_begin(e, PHASE_FORWARD, cu.eu);
        we = all_gather(e, cu.eu); /* stays valid for a tied head on this rank */
        all_gather_ahead(e, l0 < l1 ? layout_layer_unit(lay, l0) : hu);
        m->blocks->embed_forward(m, slot, we, in->inputs);
        phase_done(e, PHASE_FORWARD, cu.eu);
        if (hu < 0 || !tied) release(e, cu.eu); /* else kept: the tied head reads its wte */
        unit_end(e, PHASE_FORWARD, cu.eu);
    } else {
        all_gather_ahead(e, l0 < l1 ? layout_layer_unit(lay, l0) : hu);
        if (in->x_in) buf_copy(e->space, gpt_stage_input(m, slot), in->x_in, act_bytes);
    }
    for (int l = l0; l < l1; l++) {
        int u = layout_layer_unit(lay, l);
        unit_begin(e, PHASE_FORWARD, u);
        struct unit_weights w = all_gather(e, u);
        all_gather_ahead(e, l + 1 < l1 ? layout_layer_unit(lay, l + 1) : hu);
        zero_progress(&e->z);
        m->blocks->layer_forward(m, slot, l, w);
        phase_done(e, PHASE_FORWARD, u);
        release(e, u);
        unit_end(e, PHASE_FORWARD, u);
    }
    if (hu < 0) {
        if (x_out) buf_copy(e->space, x_out, gpt_stage_output(m, slot), act_bytes);
        return 0.0f;
    }
    unit_begin(e, PHASE_FORWARD, hu);
    struct unit_weights wh = all_gather(e, hu);
    double BT = (double)e->o.micro_batch * e->model_lay.shape.T; /* this rank's tokens (T/cp each) */
    float loss = m->blocks->head_forward(m, slot, wh, head_wte(e, we, wh), targets_early ? NULL : in->targets,
                                  (float)(dloss / BT));
    phase_done(e, PHASE_FORWARD, hu);
    release(e, hu);
    if (tied) release(e, cu.eu);
    unit_end(e, PHASE_FORWARD, hu);
    return loss;
}

void engine_backward(struct engine *e, int slot, const void *dx_in, void *dx_out) {
    const struct model_layout *lay = &e->lay;
    struct gpt *m = &e->model;
    struct chunk_units cu = chunk_units(e, slot);
    int eu = cu.eu, hu = cu.hu, l0 = cu.l0, l1 = cu.l1;
    e->backwards++;
    zero_backward_begins(&e->z, e->o.micro_batches > 0 && e->backwards == e->o.micro_batches);
    int first_layer = l0 < l1 ? layout_layer_unit(lay, l1 - 1) : -1;
    float *dwe = eu >= 0 ? unit_grads_begin(e, eu) : NULL;
    if (hu >= 0) {
        unit_begin(e, PHASE_BACKWARD, hu);
        /* ZeRO-3: the head's params gathered again, and a tied head's wte,
         * the embedding's (an untied head reads only its own unit) */
        int teu = shape_tied(&lay->shape) ? eu : -1;
        all_gather_ahead(e, hu);
        all_gather_ahead(e, teu);
        struct unit_weights wh = all_gather(e, hu), we = teu >= 0 ? all_gather(e, teu) : (struct unit_weights){0};
        all_gather_ahead(e, first_layer);
        float *dwh = unit_grads_begin(e, hu);
        m->blocks->head_backward(m, slot, wh, head_wte(e, we, wh), dwh, head_wte_grads(e, eu >= 0 ? dwe : NULL, dwh));
        reduce_scatter(e, hu, dwh);
        phase_done(e, PHASE_BACKWARD, hu);
        release(e, hu);
        release(e, teu);
        unit_end(e, PHASE_BACKWARD, hu);
    } else {
        all_gather_ahead(e, first_layer);
        gpt_stage_grad_in(m, dx_in);
    }
    for (int l = l1 - 1; l >= l0; l--) {
        int u = layout_layer_unit(lay, l);
        unit_begin(e, PHASE_BACKWARD, u);
        struct unit_weights w = all_gather(e, u);
        all_gather_ahead(e, l > l0 ? layout_layer_unit(lay, l - 1) : -1);
        zero_progress(&e->z);
        float *dw = unit_grads_begin(e, u);
        m->blocks->layer_backward(m, slot, l, w, dw);
        reduce_scatter(e, u, dw);
        phase_done(e, PHASE_BACKWARD, u);
        release(e, u);
        unit_end(e, PHASE_BACKWARD, u);
    }
    if (eu >= 0) { /* its backward reads the token ids only: no params */
        unit_begin(e, PHASE_BACKWARD, eu);
        m->blocks->embed_backward(m, slot, dwe);
        reduce_scatter(e, eu, dwe);
        phase_done(e, PHASE_BACKWARD, eu);
        unit_end(e, PHASE_BACKWARD, eu);
    } else {
        gpt_stage_grad_out(m, dx_out);
    }
}

void engine_next_batch(struct engine *e, const struct batch_source *src, int32_t *inputs, int32_t *targets) {
    loader_next(src->loader, inputs, targets);
    if (e->grid->cp == 1) return; /* every position is this rank's */
    /* context parallelism: this cp rank's positions of each sequence (B, T/cp) */
    struct cp_split s = {.T = e->lay.shape.T, .cp = e->grid->cp, .rank = e->grid->cp_rank};
    cp_keep_positions(s, inputs, e->o.micro_batch);
    cp_keep_positions(s, targets, e->o.micro_batch);
}

/* The compute of micro-batch k's chunk c begins or ends (include/step_hooks.h). */
static void micro_batch(const struct batch_source *src, enum step_point at, enum phase_kind dir, int k, int c) {
    step_hook(src->hooks, (struct step_event){.at = at, .phase = dir, .micro_batch = k, .chunk = c, .unit = -1});
}

float engine_micro_batch_forward(struct engine *e, const struct batch_source *src, int k, int c, int slot,
                                 const struct mb_input *in, float dloss) {
    micro_batch(src, MICRO_BATCH_BEGINS, PHASE_FORWARD, k, c);
    e->micro_batch = k;
    float loss = engine_forward(e, slot, in, NULL, dloss);
    micro_batch(src, MICRO_BATCH_ENDS, PHASE_FORWARD, k, c);
    return loss;
}

void engine_micro_batch_backward(struct engine *e, const struct batch_source *src, int k, int c, int slot,
                                 const void *dx_in, void *dx_out) {
    micro_batch(src, MICRO_BATCH_BEGINS, PHASE_BACKWARD, k, c);
    e->micro_batch = k;
    engine_backward(e, slot, dx_in, dx_out);
    micro_batch(src, MICRO_BATCH_ENDS, PHASE_BACKWARD, k, c);
}

void engine_reduce_grads(struct engine *e) { zero_reduce_grads(&e->z); }
double engine_all_reduce_grad_norm(struct engine *e) { return zero_all_reduce_grad_norm(&e->z); }
void engine_all_gather_updated(struct engine *e) { zero_all_gather_updated(&e->z); }

void engine_update(struct engine *e, int step, double grad_norm) {
    zero_update(&e->z, step, grad_norm);
    engine_params_changed(e); /* the widened copies of the embedding and head are stale */
}
