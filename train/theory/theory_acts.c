/* Theory of what one rank's model saves for the backward (the per-layer
 * blocks, the head's tensors, the recompute buffers; model/gpt.c,
 * model/gpt_acts.c) and the path that decides their dtypes, the bf16 data
 * path (theory_acts_direct), beside Korthikanti et al.'s formulas
 * (theory_memory.c), specialised to what this code allocates so that
 * measured and theory match exactly. */
#include "accounting.h"

#include "../measure/machine.h"
#include "schedule.h"
#include "theory.h"
#include "theory_rank_parts.h"
#include "../measure/trainer.h"

/* Elements per token of the attention's saved tensor (model/gpt.c's
 * ACT_ATT): the probabilities NH/t T, or flash's lse NH/t (B NH/t T). */
static double att_per_token(const struct config *c, int tp) {
    return (double)(c->n_head / tp) * (theory_flash(c) ? 1 : c->seq_len);
}

/* Elements per token of one layer's tensors model/gpt.c keeps (the
 * per-layer block, without the residual stream's input): ln1, res2, ln2
 * whole (3C), or with sequence parallelism the rank's T/tp positions of
 * them (3C/t per token of the micro-batch); qkv 3C/t, atty C/t, fch and
 * gelu 4C/t each (12C/t); and, when `att`, the attention's tensor. */
static double layer_block_per_token(const struct config *c, int tp, bool sp, bool att) {
    double C = c->d_model, Cl = C / tp;
    return 3 * (sp ? Cl : C) + 12 * Cl + (att ? att_per_token(c, tp) : 0);
}

/* LLaMA's (model/llama.c; no recompute): elements per token of a layer's
 * split tensors (act_dtype) on a rank of tp: atty C/t; qkv at GQA width
 * (NH + 2 KV) hs / t; up, gate and their SwiGLU (3F/t). ln1, res2 and ln2
 * (3C) are on the stream's tokens (whole, or T/t of them with sp); beside
 * the block, fp32, the attention's tensor: the probabilities NH/t T (the
 * ring's flash: the lse, NH/t), att_per_token(c, t). */
static double llama_split_per_token(const struct config *c, int tp) {
    struct theory_model m;
    theory_model_from_config(&m, c);
    return ((double)m.h + (double)(m.a + 2 * m.n_kv) * m.d_h + 3.0 * m.F) / tp;
}

/* LLaMA's per-layer bytes (model/llama.c) and the one-layer recompute
 * buffers: ln1, res2, ln2 on the stream's tokens (3 C e), the split
 * tensors (llama_split_per_token, e), the attention's fp32 tensor (the
 * probabilities NH/t T or the ring's lse NH/t a token) and two fp32 rstd,
 * beside each layer's input on the stream (C e). Selective (plain
 * attention) keeps all but the probabilities, recomputed into one layer's
 * fp32 buffer; full keeps the input only, one layer's block (in the
 * stores' dtype), attention tensor and rstd recomputed. */
static void llama_layer(const struct config *c, int tp, enum recompute_mode mode, double e, double BT, double BTs,
                        double stats, double *per_layer, double *shared) {
    double C = c->d_model, input = C * e * BTs, att = att_per_token(c, tp) * 4 * BT;
    double block = 3 * C * e * BTs + llama_split_per_token(c, tp) * e * BT;
    *per_layer = input + block + att + stats, *shared = 0;
    if (mode == RECOMPUTE_SELECTIVE) *per_layer -= att, *shared = att;
    if (mode == RECOMPUTE_FULL) *per_layer = input, *shared = block + att + stats;
}

/* Whether the run's GEMMs are bf16 on the CPU: --gemm_dtype as the run
 * resolves it (config_gemm_dtype, this machine's flags) on --device cpu or
 * auto (the trainer stores the device it opened). */
static bool cpu_bf16_gemms(const struct config *c) {
    if (c->device == DEVICE_CUDA) return false;
    char flags[CPU_FLAGS_LEN];
    machine_cpu_flags(flags, sizeof flags);
    return config_gemm_dtype(c, false, flags) == DTYPE_BF16;
}

/* The GPU's bf16 GEMMs on --gpu_path v2 (config_check_gpu_path refuses a
 * v2 run that would not take its bf16 data path). */
static bool v2_bf16_gemms(const struct config *c) {
    return c->device == DEVICE_CUDA && c->gpu_path == GPU_PATH_V2 && config_gemm_dtype(c, true, "") == DTYPE_BF16;
}

bool theory_direct_gemms(const struct config *c) { return cpu_bf16_gemms(c) || v2_bf16_gemms(c); }

bool theory_acts_direct(const struct config *c, bool sp) {
    return c->act_dtype == DTYPE_BF16 && c->recompute != RECOMPUTE_FULL && !sp && theory_direct_gemms(c);
}

bool theory_stores_direct(const struct config *c, bool sp) {
    return c->arch == ARCH_LLAMA ? c->act_dtype == DTYPE_BF16 : theory_acts_direct(c, sp);
}

/* The vocabulary-parallel cross-entropy at tp > 1 keeps fp32 logits. */
bool theory_logits_bf16(const struct config *c, bool sp, int tp) {
    return theory_acts_direct(c, sp) && c->device == DEVICE_CUDA && tp == 1;
}

double theory_work_block_per_token(const struct config *c, int tp, bool sp, bool att) {
    if (!theory_acts_direct(c, sp)) return layer_block_per_token(c, tp, sp, att);
    return 4 * (double)c->d_model / tp;
}

/* GPT-2's per-layer bytes (model/gpt.c) and the one-layer recompute
 * buffers, by mode (flash's selective is none: nothing to drop). */
static void gpt2_layer(const struct config *c, int tp, bool sp, enum recompute_mode mode, double e, double BT,
                       double BTs, double stats, double lse, double *per_layer, double *shared) {
    double C = c->d_model, T = c->seq_len;
    *shared = 0;
    switch (mode) {
    case RECOMPUTE_NONE:
        *per_layer = C * e * BTs + layer_block_per_token(c, tp, sp, !theory_flash(c)) * e * BT + stats + lse;
        break;
    case RECOMPUTE_SELECTIVE: /* no probabilities; one layer's (its NH/t heads) recomputed in fp32 */
        *per_layer = C * e * BTs + layer_block_per_token(c, tp, sp, false) * e * BT + stats;
        *shared = (double)(c->n_head / tp) * T * 4 * BT;
        break;
    case RECOMPUTE_FULL: /* the layer input only; one layer's block (flash: the lse in it) + stats in fp32 */
        *per_layer = C * e * BTs;
        *shared = layer_block_per_token(c, tp, sp, true) * 4 * BT + stats;
        break;
    }
}

struct activation_theory theory_trainer_activations(const struct config *whole, struct rank_place p) {
    struct model_layout lay = theory_layout_of(whole, p);
    struct config local = theory_at_rank_positions(whole, p); /* cp: the rank's T/cp positions */
    const struct config *c = &local;
    int tp = lay.rank.tp;
    bool sp = theory_sp_on(c, p);
    double B = c->micro_batch, T = c->seq_len, C = c->d_model;
    double n = rank_layers(&lay.rank); /* this stage's layers */
    double e = (double)dtype_size(c->act_dtype), BT = B * T;
    /* the tokens of the stream a rank holds: B T, or its B T/t with sp */
    double BTs = sp ? B * (double)(c->seq_len / tp) : BT;
    struct activation_theory a = {0};
    int v = lay.rank.n_chunks;
    a.slots = v > 1 ? 0 : schedule_slots(c->schedule, p.pp, p.pp_rank, c->grad_accum);
    for (int ch = 0; v > 1 && ch < v; ch++)
        a.slots += schedule_chunk_slots(c->schedule, p.pp, p.pp_rank, c->grad_accum, v, ch);
    /* per token: the layer's input C (the residual stream) and its block
     * (tp = 1: 15C + NH T, so 16C + NH T); four fp32 LayerNorm statistics
     * of the rank's stream tokens */
    double stats = 4 * 4 * BTs, shared = 0;
    /* flash: the lse (NH/t per token) in fp32 beside the block, and
     * selective is none (include/gpt.h) */
    double lse = theory_flash(c) ? att_per_token(c, tp) * 4 * BT : 0;
    enum recompute_mode mode = theory_flash(c) && c->recompute == RECOMPUTE_SELECTIVE ? RECOMPUTE_NONE : c->recompute;
    if (c->arch == ARCH_LLAMA) /* two fp32 rstd a token; its own tensors (model/llama.c) */
        llama_layer(c, tp, mode, e, BT, BTs, 2 * 4 * BTs, &a.per_layer, &shared);
    else
        gpt2_layer(c, tp, sp, mode, e, BT, BTs, stats, lse, &a.per_layer, &shared);
    /* the stage's last residual (its output); the last stage: final LN
     * output (e; whole, or the slice with sp), its two fp32 stats, the
     * logits over the rank's Vp/t vocabulary columns for every token (fp32,
     * or bf16: theory_logits_bf16), fp32 losses, int32 targets; the first:
     * int32 inputs */
    double out = C * e * BTs, ids = 4 * BT;
    double le = theory_logits_bf16(c, sp, tp) ? sizeof(bf16) : sizeof(float);
    double lnf_stats = c->arch == ARCH_LLAMA ? 1 : 2; /* rstd; LayerNorm's mean too */
    double head = (C * e + lnf_stats * 4) * BTs + (le * (lay.shape.Vp / tp) + 4 + 4) * BT;
    a.head = out + (lay.rank.has_head ? head : 0) + (lay.rank.has_embed ? ids : 0);
    a.recompute_buffers = shared;
    a.per_slot = n * a.per_layer + a.head;
    struct theory_model m;
    theory_model_from_config(&m, c);
    a.korthikanti_layer = theory_activation_layer_bytes(&m, B, tp, sp, c->recompute);
    double output = theory_activation_output_bytes(&m, B, tp);
    if (v == 1) {
        a.layers = a.slots * n * a.per_layer + shared;
        a.total = a.slots * a.per_slot + shared;
        a.korthikanti_total = a.slots * (n * a.korthikanti_layer + (lay.rank.has_head ? output : 0));
        return a;
    }
    /* interleaved: each chunk's slots hold its layers and output, the head
     * only the last chunk's, the token ids only chunk 0's (model/gpt.c) */
    a.layers = shared;
    a.total = shared;
    for (int ch = 0; ch < v; ch++) {
        double slots = schedule_chunk_slots(c->schedule, p.pp, p.pp_rank, c->grad_accum, v, ch);
        double nc = lay.rank.chunk[ch].l1 - lay.rank.chunk[ch].l0;
        bool head_here = lay.rank.has_head && ch == v - 1, ids_here = lay.rank.has_embed && ch == 0;
        a.layers += slots * nc * a.per_layer;
        a.total += slots * (nc * a.per_layer + out + (head_here ? head : 0) + (ids_here ? ids : 0));
        a.korthikanti_total += slots * (nc * a.korthikanti_layer + (head_here ? output : 0));
    }
    return a;
}
