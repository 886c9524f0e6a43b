/* model/gpt.c's activation-storage policy (model/gpt_acts.h): where each
 * saved tensor of a layer lives and in which dtype (the per-layer block in
 * act_dtype, the one-layer fp32 working copies, the bf16 stores the bf16
 * data path's kernels read and write as they are), the predicates that
 * choose the path (gemm_reads_store, acts_direct), and the residual
 * stream's entries as the layers read them; the slots' buffers (gpt_per_slot)
 * and their targets (gpt_upload_targets), for GPT-2's blocks and LLaMA's;
 * GPT-2's buffers themselves (gpt2_init_chunks, for gpt_init_chunks; LLaMA's
 * are model/llama.c's), a chunk's slot (gpt_chunk_slot) and gpt_free. */
#include "gpt_acts.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "bufops.h"
#include "conversions.h"
#include "layers.h"
#include "tensor_parallel/tp.h"

size_t gpt_layer_act_numel(const struct model_shape *s, int B, int tp, bool sp, enum layer_act a) {
    size_t n = (size_t)B * s->T * s->C, local = n / (size_t)tp; /* (B,T,C/tp) */
    switch (a) {
    case ACT_QKV: return 3 * local;
    case ACT_ATT: return (size_t)B * (size_t)(s->NH / tp) * s->T * s->T;
    case ACT_ATTY: return local;
    case ACT_FCH:
    case ACT_FCH_GELU: return (size_t)B * s->T * (size_t)(mlp_width(s) / tp);
    default: return sp ? local : n; /* ln1, res2, ln2: whole on every rank, or (B,T/tp,C) */
    }
}

/* This rank's size of saved tensor a (flash: ACT_ATT is the lse, B NH/tp T). */
size_t acts_numel(const struct gpt *m, enum layer_act a) {
    if (a == ACT_ATT && flash(m)) return (size_t)m->B * (size_t)m->NHl * (size_t)m->shape.T;
    return gpt_layer_act_numel(&m->shape, m->B, m->lay->rank.tp, m->sp, a);
}

/* Whether tensor a is in the per-layer block (act_dtype; fp32 in full
 * recompute's one-layer buffer). Selective recompute keeps the
 * probabilities out (recomputed into att_recompute); flash's fp32 lse
 * lives beside the block (slot.layer_lse) unless the whole layer is fp32. */
bool acts_in_block(const struct gpt *m, enum layer_act a) {
    if (a != ACT_ATT) return true;
    if (flash(m)) return m->recompute == RECOMPUTE_FULL;
    return m->recompute != RECOMPUTE_SELECTIVE;
}

/* Elements before tensor a of those a buffer keeps (`kept`), in order. */
static size_t offset_in(const struct gpt *m, enum layer_act a, bool (*kept)(const struct gpt *, enum layer_act)) {
    size_t off = 0;
    for (int i = 0; i < (int)a; i++)
        if (kept(m, (enum layer_act)i)) off += acts_numel(m, (enum layer_act)i);
    return off;
}

static size_t act_offset(const struct gpt *m, enum layer_act a) { return offset_in(m, a, acts_in_block); }

size_t acts_block_total(const struct gpt *m) { return act_offset(m, ACT_NUM); }

static void acts_widen(const struct gpt *m, float *dst, const bf16 *src, size_t n) { conv_widen(m->flops, dst, src, n); }

/* Rounds a just-computed saved tensor p (n values) to what act_dtype can
 * hold; with a bf16 store (NULL: none) also writes it there. */
void acts_round_saved(const struct gpt *m, float *p, size_t n, bf16 *store) {
    if (!acts_bf16(m)) return;
    conv_round(m->flops, p, store, n);
}

/* Whether the layer GEMMs read their saved inputs from the bf16 store
 * (gpt_init_chunks' gemm_dtype): bf16 GEMMs and bf16 stores, whose copies are what
 * the GEMM would round the fp32 view to. Not with full recompute (no
 * store) or sequence parallelism (the GEMM reads the gathered fp32 view). */
bool acts_gemm_reads_store(const struct gpt *m) {
    return m->gemm_dtype == DTYPE_BF16 && acts_bf16(m) && m->recompute != RECOMPUTE_FULL && !m->sp;
}

/* The saved tensors whose one forward reader is a layer GEMM. */
static bool gemm_input(enum layer_act a) {
    return a == ACT_LN1 || a == ACT_ATTY || a == ACT_LN2 || a == ACT_FCH_GELU;
}

/* The bf16 data path: where the GEMMs read the stores, on the host, or on
 * a GPU whose backend reads bf16 (exec_ctx.device.reads_bf16; a GPU
 * backend that does not keeps the fp32 working copies; the trainer
 * refuses at start-up what the reading backend cannot run,
 * train/config/config_model.c: config_check_gpu_path), every kernel reads
 * and writes the bf16 stores as they are, loads bf16, computes in fp32
 * and rounds once as it stores (layers.h states each rounding point):
 * - the LayerNorms and residual adds (layernorm_*_bf16,
 *   residual_forward_bf16): the residual stream, ln1, res2 and ln2 are
 *   never widened or kept in fp32;
 * - the attention (attention_*_bf16, attention_lse_*_bf16, and with context
 *   parallelism the ring's cp_ring_attention_*_bf16): qkv's GEMM writes its
 *   bf16 store (matmul_forward_mixed's bf16 output), and qkv, the
 *   probabilities and the attention output have no fp32 copy: the kernel
 *   widens one head at a time into its threads' tiles (att_scratch);
 * - the activation gradients passed between kernels (the stream's dresid,
 *   the FC features' dfc, dqkv; layernorm_backward_bf16,
 *   gelu_backward_bf16_grads, attention_*backward_bf16,
 *   cp_ring_attention_backward_bf16, the GEMMs' bf16 dinp, which read them
 *   as they are): the stream's gradient is rounded at each LayerNorm's
 *   accumulation into it, the FC feature gradient where its GEMM writes it
 *   and GELU's backward stores it, dqkv where the attention stores it. */
bool acts_direct(const struct gpt *m) {
    return acts_gemm_reads_store(m) && (m->space == MEM_HOST || (m->flops && m->flops->device.reads_bf16));
}

bool acts_stores_direct(const struct gpt *m) {
    return m->shape.arch == ARCH_LLAMA ? m->act_dtype == DTYPE_BF16 : acts_direct(m);
}

/* The head's logits in bf16 (device memory whose backend reads bf16, at
 * tp = 1):
 * the head's GEMM writes them bf16 (matmul_forward_mixed's bf16 output),
 * crossentropy_forward_backward_bf16 turns them into bf16 dlogits in place
 * and the head's backward GEMM reads those as they are (bf16 dout): half
 * the bytes of the largest activation at GPT-2's vocabulary, and no fp32
 * pass over it. Not on the host (the CPU's head keeps fp32 logits: its
 * numerics), nor on a GPU backend that widens, nor at tp > 1, whose vocabulary-parallel
 * cross-entropy (crossentropy_row_max, exp_sum, finish) runs in fp32 on
 * fp32 logits. train/theory/theory_acts.c prices the logits by the same
 * rule (theory_logits_bf16). */
bool acts_logits_bf16(const struct gpt *m) {
    return acts_direct(m) && m->space == MEM_DEVICE && m->lay->rank.tp == 1;
}

/* The saved tensors the backward reads only from the store when the GEMMs
 * do: the GEMMs' inputs but the attention output (which also feeds flash
 * attention's D = rowsum(dout * out)), GELU's input (gelu_backward_bf16),
 * and with acts_direct ln2's input res2 (layernorm_backward_bf16). */
static bool backward_reads_store(const struct gpt *m, enum layer_act a) {
    return a == ACT_LN1 || a == ACT_LN2 || a == ACT_FCH_GELU || a == ACT_FCH || (a == ACT_RES2 && acts_direct(m));
}

/* Whether saved tensor a has an fp32 copy in the one-layer working buffer
 * (work_acts): every tensor of the block, or under acts_direct only those
 * a kernel still reads or writes in fp32: the FC output, which its GEMM
 * writes. */
static bool in_work(const struct gpt *m, enum layer_act a) {
    if (!acts_in_block(m, a)) return false;
    return !acts_direct(m) || a == ACT_FCH;
}

static size_t work_offset(const struct gpt *m, enum layer_act a) { return offset_in(m, a, in_work); }

size_t acts_work_total(const struct gpt *m) { return work_offset(m, ACT_NUM); }

/* Layer tensor a of view v: rounded, and kept where the view keeps it; a
 * GEMM input the GEMM reads from the store is only kept (its fp32 view is
 * not read again). */
void acts_round(const struct gpt *m, struct layer_view *v, enum layer_act a, size_t n) {
    if (acts_gemm_reads_store(m) && gemm_input(a)) conv_narrow(m->flops, v->store[a], v->act[a], n);
    else acts_round_saved(m, v->act[a], n, v->store[a]);
}

/* The residual stream entering layer i of slot s's chunk (i = its
 * n_layers: the chunk's output), in act_dtype. */
void *acts_resid_at(struct gpt *m, int s, int i) {
    return (char *)m->slot[s].resid + (size_t)i * btc_l(m) * dtype_size(m->act_dtype);
}

/* fp32 view of residual-stream entry i; `work` serves when stored as bf16. */
float *acts_resid_view(struct gpt *m, int s, int i, float *work, bool load) {
    if (!acts_bf16(m)) return acts_resid_at(m, s, i);
    if (load) acts_widen(m, work, acts_resid_at(m, s, i), btc_l(m));
    return work;
}

/* Residual-stream entry i's bf16 store (NULL when the stream is fp32:
 * the view is the store). */
bf16 *acts_resid_store(struct gpt *m, int s, int i) { return acts_bf16(m) ? acts_resid_at(m, s, i) : NULL; }

/* Residual-stream entry i as the layer reads it: its bf16 store as it is
 * (acts_direct), else its fp32 view (widened into `work` when bf16). */
struct operand acts_stream_in(struct gpt *m, int s, int i, float *work) {
    if (acts_direct(m)) return acts_op_bf16(m, acts_resid_at(m, s, i));
    return acts_op_f32(m, acts_resid_view(m, s, i, work, true));
}

/* fp32 pointers to local layer i's saved tensors in slot s. Full
 * recompute: the one-layer buffer (filled by the recompute). bf16: the
 * working copy, widened from the store when `load`, and the store itself
 * in v.store. fp32: the store. */
struct layer_view acts_layer_view(struct gpt *m, int s, int i, bool load) {
    struct layer_view v;
    bool full = m->recompute == RECOMPUTE_FULL, work = full || acts_bf16(m);
    size_t base = (size_t)i * acts_block_total(m);
    for (int a = 0; a < ACT_NUM; a++) {
        size_t off = act_offset(m, (enum layer_act)a);
        v.store[a] = NULL;
        if (!acts_in_block(m, (enum layer_act)a))
            v.act[a] = flash(m) ? m->slot[s].layer_lse + (size_t)i * acts_numel(m, ACT_ATT) : m->att_recompute;
        else if (!work) v.act[a] = (float *)m->slot[s].layer_acts + base + off;
        else v.act[a] = in_work(m, (enum layer_act)a) ? m->work_acts + work_offset(m, (enum layer_act)a) : NULL;
        if (acts_in_block(m, (enum layer_act)a) && !full && acts_bf16(m))
            v.store[a] = (bf16 *)m->slot[s].layer_acts + base + off;
    }
    if (!full && acts_bf16(m) && load) {
        if (!acts_gemm_reads_store(m)) {
            acts_widen(m, m->work_acts, (const bf16 *)m->slot[s].layer_acts + base, acts_block_total(m));
        } else { /* the GEMMs' own inputs stay in the store */
            for (int a = 0; a < ACT_NUM; a++)
                if (v.store[a] && v.act[a] && !backward_reads_store(m, (enum layer_act)a))
                    acts_widen(m, v.act[a], v.store[a], acts_numel(m, (enum layer_act)a));
        }
    }
    float *stats = full ? m->full_stats : m->slot[s].layer_stats + (size_t)i * STAT_NUM * bt_l(m);
    for (int k = 0; k < STAT_NUM; k++) v.stat[k] = stats + (size_t)k * bt_l(m);
    return v;
}

float *acts_lnf_view(struct gpt *m, int s, bool load) {
    if (!acts_bf16(m)) return (float *)m->slot[s].lnf;
    if (load) acts_widen(m, m->work_lnf, m->slot[s].lnf, btc_l(m));
    return m->work_lnf;
}

/* include/gpt.h: a row of the logits on the host, widened exactly when
 * they are bf16 (acts_logits_bf16). */
void gpt_logits_row(const struct gpt *m, int s, int b, int t, float *row, int64_t n) {
    size_t at = ((size_t)b * m->shape.T + t) * (size_t)tp_vocab_slice(m->lay).Vl;
    if (!acts_logits_bf16(m)) {
        buf_copy(m->space, row, (const float *)m->slot[s].logits + at, (size_t)n * sizeof *row);
        return;
    }
    bf16 *h = malloc((size_t)n * sizeof *h);
    if (!h) {
        fprintf(stderr, "error: gpt_logits_row: no host memory for %lld bf16 logits\n", (long long)n);
        exit(EXIT_FAILURE);
    }
    buf_copy(m->space, h, (const bf16 *)m->slot[s].logits + at, (size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) row[i] = bf16_to_f32(h[i]);
    free(h);
}

void *gpt_per_slot(struct gpt *m, struct mem_tracker *mem, enum mem_category c, const char *name, size_t per_layer,
                   size_t fixed, int only_chunk, size_t slot_member) {
    size_t total = 0;
    for (int s = 0; s < m->n_slots; s++)
        if (only_chunk == GPT_EVERY_CHUNK || m->slot[s].chunk == only_chunk)
            total += per_layer * (size_t)m->slot[s].n_layers + fixed;
    /* slot 0 always points at the buffer's start, which gpt_free frees;
     * a slot without this kind at where the next part starts */
    char *p = mem_alloc(mem, m->space, c, name, total), *at = p;
    for (int s = 0; s < m->n_slots; s++) {
        void **member = (void **)((char *)&m->slot[s] + slot_member);
        *member = at;
        if (p && (only_chunk == GPT_EVERY_CHUNK || m->slot[s].chunk == only_chunk))
            at += per_layer * (size_t)m->slot[s].n_layers + fixed;
    }
    return p;
}

void gpt_upload_targets(struct gpt *m, int s, const int32_t *targets) {
    buf_copy(m->space, m->slot[s].targets, targets, bt(m) * sizeof *targets);
}

#define SLOT_MEMBER(f) offsetof(struct gpt_slot, f)

void gpt2_init_chunks(struct gpt *m, struct mem_tracker *mem) {
    const struct model_layout *lay = m->lay;
    int B = m->B;
    enum recompute_mode recompute = m->recompute;
    enum mem_space space = m->space;
    bool sp = m->sp;
    int head_chunk = lay->rank.has_head ? lay->rank.n_chunks - 1 : -2, embed_chunk = lay->rank.has_embed ? 0 : -2;
    size_t e = dtype_size(m->act_dtype), n = btc_l(m);
    bool full = recompute == RECOMPUTE_FULL;
    enum mem_category A = MEM_ACTIVATIONS;
    /* the stream: each layer's input, then the chunk's output */
    gpt_per_slot(m, mem, A, "residual stream", n * e, n * e, GPT_EVERY_CHUNK, SLOT_MEMBER(resid));
    if (full) {
        m->work_acts = mem_alloc(mem, space, A, "recompute buffer (one layer, fp32)", acts_block_total(m) * 4);
        m->full_stats = mem_alloc(mem, space, A, "layernorm stats (one layer, fp32)", STAT_NUM * bt_l(m) * 4);
    } else {
        gpt_per_slot(m, mem, A, "layer tensors", acts_block_total(m) * e, 0, GPT_EVERY_CHUNK, SLOT_MEMBER(layer_acts));
        gpt_per_slot(m, mem, A, "layernorm stats (fp32)", STAT_NUM * bt_l(m) * 4, 0, GPT_EVERY_CHUNK,
                 SLOT_MEMBER(layer_stats));
        if (flash(m))
            gpt_per_slot(m, mem, A, "attention lse (fp32)", acts_numel(m, ACT_ATT) * 4, 0, GPT_EVERY_CHUNK,
                     SLOT_MEMBER(layer_lse));
        if (acts_bf16(m))
            m->work_acts = mem_alloc(mem, space, MEM_SCRATCH, "one layer's tensors (fp32)", acts_work_total(m) * 4);
    }
    if (recompute == RECOMPUTE_SELECTIVE && !flash(m))
        m->att_recompute = mem_alloc(mem, space, A, "attention probabilities (one layer, fp32)",
                                     acts_numel(m, ACT_ATT) * 4);
    if (lay->rank.has_head) {
        gpt_per_slot(m, mem, A, "final layernorm out", 0, n * e, head_chunk, SLOT_MEMBER(lnf));
        gpt_per_slot(m, mem, A, "final layernorm stats (fp32)", 0, 2 * bt_l(m) * 4, head_chunk,
                 SLOT_MEMBER(lnf_stats));
        bool l16 = acts_logits_bf16(m);
        gpt_per_slot(m, mem, A, l16 ? "logits (bf16)" : "logits (fp32)", 0,
                 bt(m) * (size_t)m->vocab.Vl * (l16 ? sizeof(bf16) : sizeof(float)), head_chunk,
                 SLOT_MEMBER(logits));
        gpt_per_slot(m, mem, A, "losses (fp32)", 0, bt(m) * 4, head_chunk, SLOT_MEMBER(losses));
    }
    if (lay->rank.has_embed)
        gpt_per_slot(m, mem, A, "token ids", 0, bt(m) * sizeof(int32_t), embed_chunk, SLOT_MEMBER(inputs));
    if (lay->rank.has_head)
        gpt_per_slot(m, mem, A, "target ids", 0, bt(m) * sizeof(int32_t), head_chunk, SLOT_MEMBER(targets));
    if (acts_bf16(m) && !acts_direct(m)) { /* acts_direct reads and writes the stream's stores */
        m->work_resid_in = mem_alloc(mem, space, MEM_SCRATCH, "residual in (fp32)", n * 4);
        m->work_resid_out = mem_alloc(mem, space, MEM_SCRATCH, "residual out (fp32)", n * 4);
        if (lay->rank.has_head)
            m->work_lnf = mem_alloc(mem, space, MEM_SCRATCH, "final layernorm out (fp32)", n * 4);
    }
    if (acts_direct(m)) {
        m->dresid16 = mem_alloc(mem, space, MEM_SCRATCH, "d residual (bf16)", n * sizeof(bf16));
        m->dfc16 = mem_alloc(mem, space, MEM_SCRATCH, "d fc (bf16)", acts_numel(m, ACT_FCH) * sizeof(bf16));
        m->dqkv16 = mem_alloc(mem, space, MEM_SCRATCH, "d qkv (bf16)", acts_numel(m, ACT_QKV) * sizeof(bf16));
    } else {
        m->dresid = mem_alloc(mem, space, MEM_SCRATCH, "d residual (fp32)", n * 4);
        m->dfc = mem_alloc(mem, space, MEM_SCRATCH, "d fc (fp32)", acts_numel(m, ACT_FCH) * 4);
        m->dqkv = mem_alloc(mem, space, MEM_SCRATCH, "d qkv (fp32)", acts_numel(m, ACT_QKV) * 4);
    }
    m->dtemp_btc = mem_alloc(mem, space, MEM_SCRATCH, "d layer temp (fp32)", btc(m) * 4); /* whole: GEMM in/out */
    if (sp) {
        m->gathered = mem_alloc(mem, space, MEM_SCRATCH, "sequence-parallel gathered (fp32)", btc(m) * 4);
        m->ln_grads = mem_alloc(mem, space, MEM_SCRATCH, "sequence-parallel layernorm grads (fp32)",
                                4 * (size_t)m->shape.C * 4);
    }
    if (flash(m) && acts_direct(m))
        m->att_scratch = mem_alloc(mem, space, MEM_SCRATCH, "attention D, tiles (fp32)",
                                   attention_lse_bf16_scratch_in(space, B, m->shape.T, m->Cl, m->NHl) * 4);
    else if (flash(m))
        m->att_scratch = mem_alloc(mem, space, MEM_SCRATCH, "attention D (fp32, B NH T)",
                                   attention_lse_backward_scratch(B, m->shape.T, m->NHl) * 4);
    else if (acts_direct(m))
        m->att_scratch = mem_alloc(mem, space, MEM_SCRATCH, "attention tiles (fp32, per thread)",
                                   attention_bf16_scratch(B, m->shape.T, m->Cl, m->NHl) * 4);
    else
        m->att_scratch = mem_alloc(mem, space, MEM_SCRATCH, "attention dS (fp32, T x T per thread)",
                                   attention_backward_scratch(B, m->shape.T, m->NHl) * 4);
}

int gpt_chunk_slot(const struct gpt *m, int chunk, int k) {
    return m->chunk_slot0[chunk] + k % m->chunk_slots[chunk];
}

void gpt_free(struct gpt *m, struct mem_tracker *mem) {
    /* slot 0's pointers are the starts of the per-slot buffers */
    struct gpt_slot *s = &m->slot[0];
    void *bufs[] = {s->resid,       s->layer_acts,   s->layer_stats,   s->layer_lse, s->lnf,    s->lnf_stats,
                    s->logits,      s->losses,       s->inputs,        s->targets,  m->full_stats,
                    m->att_recompute, m->work_acts,  m->work_resid_in, m->work_resid_out, m->work_lnf,
                    m->dresid,      m->dfc,         m->dqkv,          m->dtemp_btc,     m->att_scratch,
                    m->gathered,    m->ln_grads,     m->ring,          m->dresid16,      m->dfc16,
                    m->dqkv16,      m->dtemp2_btc,   m->rope_freqs,    m->rope_pos,      m->gemm_in,
                    m->gemm_out};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(mem, bufs[i]);
    *m = (struct gpt){0};
}
