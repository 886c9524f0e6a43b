/* Theory for this trainer's own buffers. The general formulas (ZeRO,
 * Korthikanti, PaLM) live in theory_*.c; here they are specialised to what
 * this code allocates and issues, so measured and theory can match exactly. */
#include "accounting.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "grid.h"
#include "layers.h"
#include "llama_layers.h"
#include "layout.h"
#include "schedule.h"
#include "segments.h"
#include "shard.h"
#include "zero_stages.h"
#include "tensor_parallel.h"
#include "theory.h"
#include "theory_rank_parts.h"
#include "../measure/trainer.h"
#include "../measure/trace_file.h"
#include "zero.h"

struct vocab_rows rank_vocab_rows(const struct model_layout *lay) {
    struct vocab_slice s = tp_vocab_slice(lay); /* the model's slice (model/tensor_parallel/slice.c) */
    return (struct vocab_rows){.v0 = (int)s.v0, .v1 = (int)(s.v0 + s.Vl),
                               .padding = (int)(s.Vl - vocab_slice_real_rows(s))};
}

/* Parameters this rank holds, without the padding rows of its wte slice
 * (in the embedding and in the head's copy of it). */
static double rank_psi(const struct model_layout *lay) {
    int copies = lay->rank.has_embed + lay->head_wte_copy;
    return (double)lay->total - (double)copies * rank_vocab_rows(lay).padding * lay->shape.C;
}

/* The tied wte's gradient summed across stages (parallel/zero/comm.c). */
static bool ties(const struct model_layout *lay) { return layout_ties(lay); }

/* The optimizer's view of a rank as the engine builds it (parallel/zero/):
 * its segments and, for adafactor, the plan of its statistics. */
struct rank_optim {
    struct opt_segment *seg;
    struct opt_segments g;
    struct factored_tensor *ft;
    struct factored_plan f;
};

static void *theory_alloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { /* theory of a model too big to describe is not worth a crash */
        fprintf(stderr, "error: out of memory for the optimizer's segment table (theory)\n");
        exit(1);
    }
    return p;
}

static void rank_optim_build(struct rank_optim *r, const struct config *c, const struct model_layout *lay,
                             const struct shard_layout *sh) {
    struct optim_options o = {.kind = c->optimizer, .decay_targets = c->decay_targets,
                              .min_8bit_size = c->min_8bit_size};
    r->seg = theory_alloc(opt_segments_capacity(lay) * sizeof *r->seg);
    opt_segments_build(&r->g, r->seg, lay, sh, zero_stage_row(c->zero), &o);
    r->ft = theory_alloc(factored_capacity(&r->g) * sizeof *r->ft);
    factored_plan_build(&r->f, r->ft, lay, sh, &r->g, zero_stage_row(c->zero)->shards_optimizer);
}

static void rank_optim_free(struct rank_optim *r) {
    free(r->seg);
    free(r->ft);
}

/* Adafactor's tied wte statistics sent from the first stage (factored.c):
 * floats per step, 0 where none are. */
static size_t tie_floats(const struct config *c, const struct model_layout *lay, struct rank_place p) {
    if (c->optimizer != OPTIM_ADAFACTOR || !zero_stage_row(c->zero)->shards_optimizer || p.dp < 2) return 0;
    struct shard_layout sh;
    shard_layout_init(&sh, lay, p.dp, p.dp_rank);
    struct rank_optim ro;
    rank_optim_build(&ro, c, lay, &sh);
    size_t n = ro.f.tie_floats;
    rank_optim_free(&ro);
    return n;
}

struct state_theory theory_trainer_states(const struct config *c, struct rank_place p) {
    struct model_layout lay = theory_layout_of(c, p);
    int N = p.dp;
    struct shard_layout sh;
    shard_layout_init(&sh, &lay, N, p.dp_rank);
    struct state_theory s = {0};
    s.N = N;
    s.psi = rank_psi(&lay);
    s.padding = (double)sh.total_padded - s.psi;
    s.shard_padding = (double)sh.total_shard - s.psi / N;
    bool bf16_params = c->param_dtype == DTYPE_BF16;
    double w_p = (double)dtype_size(c->param_dtype), w_g = (double)dtype_size(c->grad_dtype);
    const struct zero_stage *row = zero_stage_row(c->zero); /* include/zero_stages.h */
    struct {
        enum mem_category cat;
        double w;
        bool sharded;
        const char *rule;
        bool present;
    } rows[] = {
        {MEM_PARAMS, w_p, row->shards_params, bf16_params ? "w_p = 2 B x Psi (bf16)" : "w_p = 4 B x Psi (fp32)", true},
        {MEM_MASTER, 4, row->shards_optimizer, "4 B x Psi (fp32 master, part of K)", bf16_params},
        {MEM_GRADS, w_g, row->shards_grads, w_g == 2 ? "w_g = 2 B x Psi (bf16)" : "w_g = 4 B x Psi (fp32)", true},
        {MEM_OPTIMIZER, 8, row->shards_optimizer, "8 B x Psi (Adam m, v fp32; K = 12 with master, 8 without)",
         c->optimizer == OPTIM_ADAMW},
        {MEM_OPTIMIZER, 4, row->shards_optimizer, "4 B x Psi (SGD momentum fp32; K = 8 with master)", c->optimizer == OPTIM_SGD},
        {MEM_OPTIMIZER, 4, row->shards_optimizer, "4 B x Psi (Lion m fp32; K = 8 with master)", c->optimizer == OPTIM_LION},
        {MEM_OPTIMIZER, 4, row->shards_optimizer, "4 B x Psi (Adafactor's first moment, adafactor_beta1 > 0)",
         c->optimizer == OPTIM_ADAFACTOR && c->adafactor_beta1 > 0.0f},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (!rows[i].present) continue;
        double w = rows[i].w;
        bool sh_ = rows[i].sharded;
        s.lines[s.n++] = (struct state_line){rows[i].cat, w, sh_, w * s.psi / (sh_ ? N : 1),
                                             w * (sh_ ? s.shard_padding : s.padding), rows[i].rule};
    }
    const struct optim_rule *rule = optim_rule(c->optimizer);
    if (rule->quantized || c->optimizer == OPTIM_ADAFACTOR) {
        struct rank_optim ro;
        rank_optim_build(&ro, c, &lay, &sh);
        const double per = s.psi / (row->shards_optimizer ? N : 1);
        if (rule->quantized) {
            /* the same segments the engine walks, per state: a code byte per
             * element, an fp32 absmax per 256-element block, 4 B per element of
             * the tensors that keep 32-bit states (Dettmers et al. 2021,
             * THEORY.md 2.5) */
            double bytes = optim_state_bytes(rule, ro.g.n_q, ro.g.n_blocks, ro.g.n_f32);
            s.lines[s.n++] = (struct state_line){
                MEM_OPTIMIZER, bytes / per, row->shards_optimizer, bytes, 0,
                rule->states == 2 ? "2 B x Psi_8bit + 8 B per 256-block + 8 B x Psi_small (K = 4 + 2 + 8/256)"
                                  : "1 B x Psi_8bit + 4 B per 256-block + 4 B x Psi_small (K = 4 + 1 + 4/256)"};
        } else {
            /* Shazeer & Stern 2018: R and C of each matrix (the rows this
             * rank touches, all columns), v of each vector element */
            double bytes = 4.0 * (double)ro.f.stat_floats;
            s.lines[s.n++] = (struct state_line){MEM_OPTIMIZER, bytes / per, row->shards_optimizer, bytes, 0,
                                                 "4 B x (own rows + cols) per matrix + 4 B x Psi_vectors "
                                                 "(Adafactor; K = 4 + about 0)"};
        }
        rank_optim_free(&ro);
    }
    return s;
}

struct comm_theory theory_trainer_comm(const struct config *c, struct rank_place p) {
    struct model_layout lay = theory_layout_of(c, p);
    int N = p.dp;
    struct shard_layout sh;
    shard_layout_init(&sh, &lay, N, 0);
    double M = (double)sh.total_padded, f = (double)(N - 1) / N, k = c->grad_accum;
    double psi = rank_psi(&lay);
    double w_p = (double)dtype_size(c->param_dtype), w_g = (double)dtype_size(c->grad_dtype);
    struct comm_theory t = {0};
    switch (c->zero) {
    case 0:
        t.all_reduce = 2 * f * M * w_g;
        t.zero_formula = 2 * f * psi * w_g;
        t.rule = "DDP: all-reduce grads once, 2(N-1)/N Psi w_g";
        break;
    case 1:
        t.reduce_scatter = f * M * w_g;
        t.all_gather = f * M * w_p;
        t.zero_formula = f * psi * (w_g + w_p);
        t.rule = "ZeRO-1: reduce-scatter grads, all-gather params, (N-1)/N Psi (w_g + w_p)";
        break;
    case 2:
        t.reduce_scatter = k * f * M * w_g;
        t.all_gather = f * M * w_p;
        t.zero_formula = f * psi * (k * w_g + w_p);
        t.rule = "ZeRO-2: reduce-scatter per micro-batch, (N-1)/N Psi (k w_g + w_p)";
        break;
    default:
        t.reduce_scatter = k * f * M * w_g;
        t.all_gather = k * 2 * f * M * w_p;
        /* a first stage without the head, or any with an untied head,
         * gathers its embedding for the forward only: its backward (a
         * scatter-add) reads no weights */
        if (lay.rank.has_embed && (!lay.rank.has_head || !shape_tied(&lay.shape)))
            t.all_gather -= k * f * (double)shard_unit_padded(&sh, layout_embed_unit(&lay)) * w_p;
        t.zero_formula = k * f * psi * (w_g + 2 * w_p);
        t.rule = "ZeRO-3: gather fwd + bwd, reduce-scatter, per micro-batch: k (N-1)/N Psi (w_g + 2 w_p)";
        break;
    }
    /* adafactor: the columns' and cut rows' sums, fp32, all-reduced once a
     * step (parallel/zero/factored.c; its RMS sums go with the scalars) */
    if (c->optimizer == OPTIM_ADAFACTOR && zero_stage_row(c->zero)->shards_optimizer && N > 1)
        t.all_reduce += 2 * f * (double)factored_slot_floats(&lay, N) * 4;
    /* and at the first of several stages the tied wte's R and C, assembled
     * for the last stage (include/factored.h) */
    if (c->optimizer == OPTIM_ADAFACTOR && zero_stage_row(c->zero)->shards_optimizer && N > 1 && lay.rank.has_embed && ties(&lay))
        t.all_reduce += 2 * f * (double)tie_floats(c, &lay, p) * 4;
    /* the tied wte across stages: at stages >= 1 its unit's reduced chunks
     * are all-gathered over dp before the sum (parallel/zero/comm.c) */
    if (ties(&lay) && zero_stage_row(c->zero)->shards_optimizer) {
        int u = lay.rank.has_embed ? layout_embed_unit(&lay) : layout_head_unit(&lay);
        t.all_gather += f * (double)shard_unit_padded(&sh, u) * w_g;
    }
    t.total = t.all_reduce + t.reduce_scatter + t.all_gather;
    return t;
}


struct tp_comm_theory theory_trainer_tp_comm(const struct config *whole, struct rank_place p) {
    struct model_layout lay = theory_layout_of(whole, p);
    struct config local = theory_at_rank_positions(whole, p); /* cp: the rank's T/cp positions */
    const struct config *c = &local;
    struct tp_comm_theory t = {.sp = theory_sp_on(c, p)};
    double B = c->micro_batch, BT = B * c->seq_len, m = c->grad_accum, n = rank_layers(&lay.rank);
    double act = BT * c->d_model * 4; /* one (B,T,C) fp32 tensor: the conjugates reduce fp32 (model/gpt.c) */
    struct theory_model tm;
    theory_model_from_config(&tm, c);
    enum recompute_mode r = c->recompute;
    t.layer = theory_tp_layer_collectives(r, t.sp);
    t.layer_all_reduces = t.layer.all_reduces;
    t.per_layer = theory_tp_layer_bytes(&tm, c->micro_batch, p.tp, 4, r, t.sp);
    if (p.tp < 2) return t; /* f and g are identities: no calls */
    int E = lay.rank.has_embed, H = lay.rank.has_head;
    if (c->optimizer == OPTIM_ADAFACTOR) { /* parallel/zero/factored.c: one fp32 all-reduce a step */
        struct shard_layout sh;
        shard_layout_init(&sh, &lay, p.dp, p.dp_rank);
        struct rank_optim ro;
        rank_optim_build(&ro, c, &lay, &sh);
        t.optimizer = theory_allreduce_bytes(4.0 * (double)ro.f.tp_floats, p.tp);
        rank_optim_free(&ro);
    }
    t.ce_sum = H ? m * theory_allreduce_bytes(2 * BT * 4, p.tp) : 0;
    t.all_reduce_max = H ? m * theory_allreduce_bytes(BT * 4, p.tp) : 0;
    t.calls_max = m * H;
    if (!t.sp) {
        double ring = theory_allreduce_bytes(act, p.tp);
        t.layers = m * n * t.per_layer;
        t.embedding = E ? m * ring : 0; /* g after the rows' lookup */
        t.head = H ? m * ring : 0;      /* f's backward: dlnf over the vocabulary slices */
        t.all_reduce = t.layers + t.embedding + t.head + t.ce_sum + t.optimizer;
        t.calls = m * (n * t.layer_all_reduces + E + 2 * H) + (t.optimizer > 0);
        return t;
    }
    /* one (B,T,C) reduce-scatter or all-gather: (t-1)/t M, one call per sequence */
    double chunk = theory_reduce_scatter_bytes(act, p.tp);
    double rs_layer = t.layer.reduce_scatters, ag_layer = t.layer.all_gathers;
    double rs = n * rs_layer + E + H, ag = n * ag_layer + E + 2 * H; /* per micro-batch */
    t.reduce_scatter = m * rs * chunk;
    t.all_gather = m * ag * chunk;
    t.calls_reduce_scatter = m * rs * B;
    t.calls_all_gather = m * ag * B;
    /* the LayerNorms' gradients: 4C per layer (theory_tp_norm_grad_bytes), 2C the final one's, fp32 */
    double lnf = (tm.rmsnorm ? 1.0 : 2.0) * c->d_model * 4; /* RMSNorm: its weight only */
    t.norm_grads = m * (n * t.layer.norm_all_reduces * theory_allreduce_bytes(theory_tp_norm_grad_bytes(&tm), p.tp) +
                        H * theory_allreduce_bytes(lnf, p.tp));
    t.all_reduce = t.norm_grads + t.ce_sum + t.optimizer;
    t.calls = m * (n * t.layer.norm_all_reduces + 2 * H) + (t.optimizer > 0);
    t.sp_layers = m * n * t.per_layer;
    t.sp_embedding = E ? m * 2 * chunk : 0;
    t.sp_head = H ? m * (3 * chunk + theory_allreduce_bytes(lnf, p.tp)) : 0;
    return t;
}

struct pipe_comm_theory theory_trainer_pp_comm(const struct config *whole, struct rank_place p) {
    struct model_layout lay = theory_layout_of(whole, p);
    struct config local = theory_at_rank_positions(whole, p); /* cp: a boundary carries the rank's T/cp positions */
    const struct config *c = &local;
    struct theory_model tm;
    theory_model_from_config(&tm, c);
    /* one boundary carries the planner's bytes, half each way: activations
     * on, gradients back (with sp each tp rank its T/tp positions). Each of
     * the rank's v chunks (virtual stages) has a boundary after it but the
     * model's last, and one before it but the model's first; the
     * interleaved schedule's wrap-around (the last rank's chunk c to rank
     * 0's c + 1) is one of them */
    double boundary = theory_pp_boundary_bytes(&tm, c->micro_batch, c->grad_accum, p.tp, theory_sp_on(c, p),
                                               (double)dtype_size(c->act_dtype));
    int v = config_chunks(c);
    int boundaries = (v - (p.pp_rank == p.pp - 1)) + (v - (p.pp_rank == 0));
    struct pipe_comm_theory t = {.send = boundaries * boundary / 2, .recv = boundaries * boundary / 2};
    if (ties(&lay)) {
        struct tensor_info w = lay.rank.has_embed ? layout_embed_tensor(&lay, EMB_WTE) : layout_head_tensor(&lay, HEAD_WTE);
        t.tie_all_reduce = theory_allreduce_bytes((double)w.numel * (double)dtype_size(c->grad_dtype), 2) +
                           theory_allreduce_bytes(4.0 * (double)tie_floats(c, &lay, p), 2);
    }
    return t;
}

struct flop_theory theory_trainer_flops(const struct config *c, struct rank_place p) {
    struct model_layout lay = theory_layout_of(c, p);
    double t = lay.rank.tp;
    double B = c->micro_batch, T = c->seq_len, C = c->d_model, L = rank_layers(&lay.rank), k = c->grad_accum;
    /* the LM head's GEMM, on the last stage: the rank's Vp/t vocabulary columns */
    double Vl = lay.rank.has_head ? (double)(lay.shape.Vp / lay.rank.tp) : 0;
    struct flop_theory f;
    double cp = rank_place_cp(p); /* a cp rank's tokens: T/cp of each sequence, with the same causal work (the split) */
    f.tokens = B * T * k / cp;
    /* every layer GEMM is the rank's 1/t: QKV and FC its output features,
     * the projections its input features; a layer's GEMMs read
     * theory_layer_gemm_weights (GPT-2: 12 C^2) */
    struct theory_model shape;
    theory_model_from_config(&shape, c);
    f.gemm = 6 * f.tokens * (L * theory_layer_gemm_weights(&shape) / t + Vl * C);
    /* attention GEMMs as issued, full T x T squares: per head QK^T and PV,
     * 2 T^2 hs each, so 4 B T^2 C per layer forward (the rank's NH/t heads:
     * C/t); backward dP, dV, dQ, dK, twice that */
    double attention_forward = 4 * L * B * C * T * T * k / t / cp;
    f.attention = 3 * attention_forward;
    /* flash on the CPU (model/cpu/attention_lse.c): the causal products
     * only, B NH T (T+1)/2 scores of 2 hs each: forward QK^T and PV,
     * 2 B C T (T+1) per layer; backward QK^T again, dP, dV, dQ, dK,
     * 5 B C T (T+1). (A GPU's flash kernel issues whole 64 x 64 tiles,
     * flash_attention.h: more than this.) */
    if (theory_flash(c)) {
        attention_forward = 2 * L * B * C * T * (T + 1) * k / t / cp;
        f.attention = attention_forward * 7 / 2;
    }
    /* recomputation: full re-runs a layer's forward up to the activation
     * (GELU; LLaMA's SwiGLU): every GEMM but the down projection's (C F),
     * whose output is not needed (GPT-2: 12 C^2 - 4 C^2, 16 C^2 FLOPs per
     * token); both modes re-run the attention's forward GEMMs (flash: only
     * full; its backward's QK^T is counted above) */
    const double full_gemm = 2 * L * (theory_layer_gemm_weights(&shape) - C * shape.F) * f.tokens / t;
    bool att_again = c->recompute == RECOMPUTE_FULL || (c->recompute == RECOMPUTE_SELECTIVE && !theory_flash(c));
    f.recompute = 0;
    if (c->recompute == RECOMPUTE_FULL) f.recompute += full_gemm;
    if (att_again) f.recompute += attention_forward;
    f.gemm += c->recompute == RECOMPUTE_FULL ? full_gemm : 0;
    f.attention += att_again ? attention_forward : 0;
    /* Model FLOPs: the stage's at tp = 1, over t. The embedding is a
     * lookup (no FLOPs); the tied wte counts once, in the LM head's GEMM on
     * the last stage; vocabulary padding is no model FLOP. */
    struct rank_place whole = p;
    whole.tp = 1, whole.tp_rank = 0;
    struct model_layout st = theory_layout_of(c, whole);
    double lookup = st.rank.has_embed ? (double)st.embed_size : 0; /* wte (and wpe) rows looked up */
    double head_padding = st.rank.has_head ? (double)(st.shape.Vp - st.shape.V) * C : 0;
    /* the tied head's GEMM reads wte, which the stage's count holds once (llama's lm_head is its own) */
    double head_wte = shape_tied(&st.shape) && st.rank.has_head && !st.head_wte_copy ? (double)st.shape.Vp * C : 0;
    f.n_gemm_params = (double)st.total - lookup + head_wte - head_padding;
    f.model = f.tokens * (6 * f.n_gemm_params + 6 * L * C * T) / t;
    f.attention_model = f.tokens * (6 * L * C * T) / t; /* the causal half of 12 L C T per token */
    return f;
}

double theory_trainer_group_comm(const struct config *c, struct rank_place p, enum grid_group g, enum coll_kind k) {
    if (g == GROUP_DP) {
        struct comm_theory d = theory_trainer_comm(c, p);
        return k == COLL_ALL_REDUCE ? d.all_reduce : k == COLL_REDUCE_SCATTER ? d.reduce_scatter
             : k == COLL_ALL_GATHER ? d.all_gather : -1;
    }
    if (g == GROUP_TP) {
        struct tp_comm_theory t = theory_trainer_tp_comm(c, p);
        return k == COLL_ALL_REDUCE ? t.all_reduce : k == COLL_ALL_REDUCE_MAX ? t.all_reduce_max
             : k == COLL_REDUCE_SCATTER ? t.reduce_scatter : k == COLL_ALL_GATHER ? t.all_gather : -1;
    }
    if (g == GROUP_CP) {
        struct cp_comm_theory r = theory_trainer_cp_comm(c, p);
        return k == COLL_SEND ? r.send : k == COLL_RECV ? r.recv : -1;
    }
    struct pipe_comm_theory q = theory_trainer_pp_comm(c, p);
    if (g == GROUP_PP) return k == COLL_SEND ? q.send : k == COLL_RECV ? q.recv : -1;
    if (g == GROUP_TIE && k == COLL_ALL_REDUCE) return p.pp_rank == 0 || p.pp_rank == p.pp - 1 ? q.tie_all_reduce : 0;
    return -1;
}

double theory_trainer_comm_buffers(const struct config *c, struct rank_place p) {
    struct model_layout lay = theory_layout_of(c, p);
    struct shard_layout sh;
    shard_layout_init(&sh, &lay, p.dp, 0);
    double w_p = (double)dtype_size(c->param_dtype), w_g = (double)dtype_size(c->grad_dtype);
    double bytes = 0;
    if (zero_stage_row(c->zero)->params == PARAMS_ALL_GATHER_IN_USE) { /* one gathered unit of each kind; with overlap a second layer, the next one */
        int kinds[] = {layout_embed_unit(&lay), layout_head_unit(&lay), layout_kind_unit(&lay, UNIT_LAYER)};
        for (int k = 0; k < 3; k++)
            if (kinds[k] >= 0) bytes += (double)shard_unit_padded(&sh, kinds[k]) * w_p;
        if (c->overlap && kinds[2] >= 0) bytes += (double)shard_unit_padded(&sh, kinds[2]) * w_p;
    }
    /* the reduce-scatter bucket and its ring's receive; with overlap two, one in flight while the next fills */
    if (zero_stage_row(c->zero)->grads == GRADS_REDUCE_SCATTER_UNIT) bytes += (c->overlap ? 2.0 : 1.0) * (double)shard_bucket_elems(&sh) * w_g;
    return bytes; /* stage 0's buckets are ranges of the grads: no buffer */
}

/* model/gpt.c's scratch (GPT-2's blocks), at the rank's local sizes. */
static double gpt2_model_scratch(const struct config *c, const struct model_layout *lay, bool sp) {
    double B = c->micro_batch, T = c->seq_len, C = c->d_model, BT = B * T, n = BT * C;
    int tp = lay->rank.tp;
    /* the rank's heads; a (B,T,C/t) tensor; the rank's part of the stream:
     * (B,T,C), or (B,T/t,C) with sp */
    double NHl = c->n_head / tp, nl = n / tp, ns = sp ? nl : n;
    bool bf16_acts = c->act_dtype == DTYPE_BF16;
    double bytes = 0;
    /* model/gpt.c, at the rank's local sizes: a layer's block widened
     * (bf16, kept in the stores; on the bf16 data path only its tensors
     * still read or written in fp32), the residual in and out and the final
     * LayerNorm output widened (bf16 but not the data path; the stream's
     * part), backward's d
     * residual (the stream's part) and C temp (whole), d fc (4C/t) and
     * d qkv (3C/t), and the attention backward's T x T score gradient per
     * thread sharing the rank's heads (model/cpu/attention.c: at most
     * B NH/t threads; flash: D, B NH/t T); with sp the gathered (B,T,C)
     * and one micro-batch's LayerNorm gradients (4C), fp32 (d residual,
     * d fc and d qkv bf16 on the bf16 data path with its attention). The
     * widened block holds the probabilities where the store does (not
     * selective's, never flash's fp32 lse) */
    if (bf16_acts && c->recompute != RECOMPUTE_FULL)
        bytes += theory_work_block_per_token(c, tp, sp, c->recompute == RECOMPUTE_NONE && !theory_flash(c)) * BT * 4;
    if (bf16_acts && !theory_acts_direct(c, sp)) /* residual in, out; final LN out (the data path: none) */
        bytes += (lay->rank.has_head ? 3 : 2) * ns * 4;
    double head_threads = c->threads < B * NHl ? c->threads : B * NHl;
    /* the bf16 attention's tiles per thread (attention_bf16_scratch: P
     * and dS, T x T, q, k, v and the output, T x hs; flash's
     * attention_lse_bf16_scratch: q, k, v, the output, dk and dv) */
    double hs = C / c->n_head, tiles = !theory_acts_direct(c, sp) ? 0 : theory_flash(c) ? 6 * T * hs : 2 * T * T + 4 * T * hs;
    double att = theory_flash(c) ? B * NHl * T + head_threads * tiles : head_threads * (tiles ? tiles : T * T);
    /* a GPU's flash on the bf16 data path (--gpu_path v2's FlashAttention-2
     * backward): D, dout in bf16 and the per-key-block dQ partials */
    if (theory_flash(c) && theory_acts_direct(c, sp) && c->device == DEVICE_CUDA)
        att = (double)attention_lse_bf16_scratch_in(MEM_DEVICE, (int64_t)B, (int64_t)T, (int64_t)(C / tp),
                                                    (int64_t)NHl);
    /* d residual, d fc and d qkv: bf16 on the bf16 data path with its
     * attention (model/gpt_acts.c's acts_direct), else fp32; d temp fp32 */
    bytes += (ns + 7 * nl) * (theory_acts_direct(c, sp) ? 2 : 4) + n * 4 + att * 4;
    if (sp) bytes += (n + 4 * C) * 4;
    return bytes;
}

/* model/llama.c's, on a rank of tp: d residual (the stream's part: with sp
 * T/t positions) and two (B,T,C) temporaries (the gate's share of d ln2
 * apart), whole; with sp g's gathered (B,T,C) and the points' norm grads
 * (4C); d up and d gate (2F/t) and d qkv at GQA width / t; the
 * attention's dS (T x T per thread of a KV group, attention_gqa_backward_
 * scratch at KV/t heads; the ring's flash: D, B NH/t T, and its tiles on the bf16 stores); with bf16 stores
 * and fp32 GEMMs a GEMM's widened input and its fp32 output; RoPE's hs/2 frequencies and (B,T) positions. */
static double llama_model_scratch(const struct config *c, struct rank_place p, int tp) {
    struct theory_model m;
    theory_model_from_config(&m, c);
    double B = c->micro_batch, T = c->seq_len, BT = B * T;
    double qkv = (double)(m.a + 2 * m.n_kv) * m.d_h / tp;
    bool bf16_stores = c->act_dtype == DTYPE_BF16; /* the data path: dqkv bf16, the attention's tiles */
    /* the ring's D, B NH/t T, and on the stores each thread's tiles */
    double att = !theory_flash(c) ? (double)llama_attention_scratch((int64_t)B, (int64_t)T, m.a / tp, m.n_kv / tp,
                                                                    m.d_h, bf16_stores, c->threads)
               : bf16_stores ? (double)attention_lse_bf16_scratch_for((int64_t)B, (int64_t)T, m.h / tp, m.a / tp,
                                                                      c->threads)
                             : (double)attention_lse_backward_scratch((int64_t)B, (int64_t)T, m.a / tp);
    bool sp = theory_sp_on(c, p);
    double floats = (sp ? BT * m.h / tp : BT * m.h) + 2 * BT * m.h + 2 * BT * m.F / tp + m.d_h / 2 + att;
    if (bf16_stores && !theory_direct_gemms(c)) /* fp32 GEMMs on the stores: gemm_in, gemm_out */
        floats += BT * fmax(m.h, m.F / tp) + BT * fmax(qkv, m.F / tp);
    if (sp) floats += BT * m.h + 4.0 * m.h; /* g's gathered (B,T,C), the points' norm grads (4C) */
    return floats * 4 + BT * qkv * (bf16_stores ? sizeof(bf16) : sizeof(float)) + BT * sizeof(int32_t);
}

struct scratch_theory theory_trainer_scratch(const struct config *whole, struct rank_place p) {
    struct model_layout lay = theory_layout_of(whole, p);
    struct shard_layout sh;
    shard_layout_init(&sh, &lay, p.dp, p.dp_rank);
    struct config local = theory_at_rank_positions(whole, p); /* cp: the rank's T/cp positions */
    const struct config *c = &local;
    double B = c->micro_batch;
    int tp = lay.rank.tp;
    bool sp = theory_sp_on(c, p);
    struct scratch_theory s = {0};
    s.persistent = (double)opt_segments_capacity(&lay) * sizeof(struct opt_segment);
    /* parallel/engine.c: one fp32 view and one fp32 accumulator per unit
     * kind; the view holds only the unit's vectors, packed, where the model
     * reads the bf16 params as they are (params_direct: bf16 GEMMs on the
     * CPU, or on a GPU under --gpu_path v2) */
    double kinds = 0, vectors = 0;
    int units[] = {layout_embed_unit(&lay), layout_head_unit(&lay), layout_kind_unit(&lay, UNIT_LAYER)};
    size_t vec_sizes[] = {lay.embed_vec_size, lay.head_vec_size, lay.layer_vec_size};
    for (int k = 0; k < 3; k++)
        if (units[k] >= 0) {
            kinds += (double)shard_unit_padded(&sh, units[k]) * 4;
            vectors += (double)vec_sizes[k] * 4;
        }
    if (c->param_dtype == DTYPE_BF16) s.persistent += theory_direct_gemms(c) ? vectors : kinds;
    if (c->grad_dtype == DTYPE_BF16 || zero_stage_row(c->zero)->shards_grads) s.persistent += kinds;
    /* the model's own (its blocks') */
    s.persistent += c->arch == ARCH_LLAMA ? llama_model_scratch(c, p, tp) : gpt2_model_scratch(c, &lay, sp);
    /* train/run/run_loop.c: the batch's inputs and targets, whole sequences
     * (a cp rank keeps its positions in place) */
    s.persistent += 2 * B * whole->seq_len * sizeof(int32_t);
    /* model/context_parallel/ring.c: the ring's K,V blocks (in the stores'
     * dtype when the kernels read them as they are: acts_stores_direct),
     * dK,dV blocks and a block's output (fp32) */
    if (rank_place_cp(p) > 1)
        s.persistent += (double)gpt_ring_bytes((int)B, c->seq_len, c->d_model / tp,
                                               kv_heads(&lay.shape) / tp * (c->d_model / c->n_head), c->n_head / tp,
                                               theory_stores_direct(c, sp) ? sizeof(bf16) : sizeof(float));
    /* parallel/pipeline/schedule.c: the step's order, 2 m v operations */
    s.persistent += 2.0 * c->grad_accum * config_chunks(c) * sizeof(struct pipe_op);
    s.persistent += (double)trace_capacity(c) * sizeof(struct trace_event); /* --trace: the recorder's events */
    if (optim_rule(c->optimizer)->quantized) s.persistent += optim_rule(c->optimizer)->states * (double)sizeof(struct qmap_index);
    if (c->optimizer == OPTIM_ADAFACTOR) { /* parallel/zero/zero.c: its plan and the step's sums */
        struct rank_optim ro;
        rank_optim_build(&ro, c, &lay, &sh);
        s.persistent += (double)factored_capacity(&ro.g) * sizeof(struct factored_tensor) +
                        4.0 * (double)(ro.f.slot_floats + ro.f.rowsum_floats + ro.f.tp_floats + ro.f.tie_floats) +
                        8.0 * ro.f.tensors * (c->device == DEVICE_CUDA ? 2 : 1); /* a GPU: the squares there too */
        rank_optim_free(&ro);
    }
    /* parallel/zero/comm.c: stage 0's all-reduce bucket table, one entry per unit at most */
    if (zero_stage_row(c->zero)->grads == GRADS_ALL_REDUCE_BUCKETS) s.persistent += (double)lay.n_units * sizeof(struct ddp_bucket);
    s.staging = (double)shard_max_unit_padded(&sh) * 4;
    return s;
}

struct memory_need theory_trainer_memory(const struct config *c, struct rank_place p) {
    struct memory_need m = {0};
    struct state_theory st = theory_trainer_states(c, p);
    for (int i = 0; i < st.n; i++) m.bytes[st.lines[i].category] += st.lines[i].psi_bytes + st.lines[i].padding_bytes;
    m.bytes[MEM_ACTIVATIONS] = theory_trainer_activations(c, p).total;
    m.bytes[MEM_COMM] = theory_trainer_comm_buffers(c, p);
    struct scratch_theory sc = theory_trainer_scratch(c, p);
    m.staging = sc.staging;
    m.bytes[MEM_SCRATCH] = sc.persistent + sc.staging;
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++) m.total += m.bytes[k];
    return m;
}
