/* A rank's units and tensors (include/layout.h). */
#include "layout.h"

#include <stdint.h>
#include <stdio.h>

struct shape2d {
    const char *name;
    int rows, cols;
    enum tp_split split;
    int sections;  /* blocks the split dimension is made of (QKV: q, k, v), each split alike */
};

int padded_vocab(int V) { return (V + VOCAB_PAD - 1) / VOCAB_PAD * VOCAB_PAD; }

bool tp_divides(const struct model_shape *s, int tp, char *why, size_t len) {
    int64_t fc = mlp_width(s); /* in 64 bits below: a d_model from a file may be near INT_MAX */
    if (s->arch == ARCH_LLAMA) {
        if (s->NH % tp == 0 && kv_heads(s) % tp == 0 && fc % tp == 0 && s->V % tp == 0) return true;
        if (why)
            snprintf(why, len,
                     "tp = %d must divide n_head (%d), n_kv_head (%d), ffn_dim (%lld) and vocab_size (%d): each rank "
                     "holds n_head/tp query heads, n_kv_head/tp key/value heads, ffn_dim/tp of SwiGLU's features "
                     "and vocab_size/tp rows of wte and lm_head", tp, s->NH, kv_heads(s), (long long)fc, s->V);
        return false;
    }
    fc = 4 * (int64_t)s->C;
    if (s->NH % tp == 0 && fc % tp == 0 && s->C % tp == 0) return true;
    if (why)
        snprintf(why, len,
                 "tp = %d must divide n_head (%d), d_model (%d) and the FC width 4 x d_model (%lld): each rank holds "
                 "n_head/tp heads and 4 d_model/tp FC features",
                 tp, s->NH, s->C, (long long)fc);
    return false;
}

static int tp_padded_vocab(int V, int tp) { return (V + 128 * tp - 1) / (128 * tp) * (128 * tp); }

int reference_vocab(const struct model_shape *s) { return s->arch == ARCH_LLAMA ? s->V : padded_vocab(s->V); }

/* This rank's vocabulary rows in all: llama's V (tp must divide it), gpt2's
 * padded to VOCAB_PAD x tp. */
static int rank_vocab(const struct model_shape *s, int tp) {
    return s->arch == ARCH_LLAMA ? s->V : tp_padded_vocab(s->V, tp);
}

const char *tp_split_name(enum tp_split s) {
    static const char *const names[] = {"replicated", "column", "row", "vocab"};
    return names[s];
}

struct rank_desc rank_desc_range(int l0, int l1, int tp, int tp_rank, bool has_embed, bool has_head) {
    return (struct rank_desc){.n_chunks = 1, .chunk = {{l0, l1}}, .tp_rank = tp_rank, .tp = tp,
                              .has_embed = has_embed, .has_head = has_head};
}

struct rank_desc rank_desc_whole(const struct model_shape *s) { return rank_desc_range(0, s->L, 1, 0, true, true); }

int rank_layers(const struct rank_desc *r) {
    int n = 0;
    for (int c = 0; c < r->n_chunks; c++) n += r->chunk[c].l1 - r->chunk[c].l0;
    return n;
}

int rank_layer_at(const struct rank_desc *r, int i) {
    for (int c = 0; c < r->n_chunks; c++) {
        int n = r->chunk[c].l1 - r->chunk[c].l0;
        if (i < n) return r->chunk[c].l0 + i;
        i -= n;
    }
    return -1;
}

int rank_layer_index(const struct rank_desc *r, int layer) {
    int before = 0;
    for (int c = 0; c < r->n_chunks; c++) {
        if (layer >= r->chunk[c].l0 && layer < r->chunk[c].l1) return before + layer - r->chunk[c].l0;
        before += r->chunk[c].l1 - r->chunk[c].l0;
    }
    return -1;
}

void rank_holds_text(const struct rank_desc *r, char *buf, size_t len) {
    size_t at = (size_t)snprintf(buf, len, "%s", r->has_embed ? "E " : "");
    for (int c = 0; c < r->n_chunks && at < len; c++)
        at += (size_t)snprintf(buf + at, len - at, "%s%d-%d", c ? "," : "", r->chunk[c].l0, r->chunk[c].l1 - 1);
    if (at < len) snprintf(buf + at, len - at, "%s", r->has_head ? " H" : "");
}

/* Chunks ascending, disjoint, inside [0, L). */
static bool chunks_valid(const struct rank_desc *r, int L) {
    if (r->n_chunks < 1 || r->n_chunks > RANK_MAX_CHUNKS) return false;
    int end = 0;
    for (int c = 0; c < r->n_chunks; c++) {
        if (r->chunk[c].l0 < end || r->chunk[c].l1 < r->chunk[c].l0 || r->chunk[c].l1 > L) return false;
        end = r->chunk[c].l1;
    }
    return true;
}

/* Full shapes. Weights are (out, in), so y = x W^T as in llm.c. */
static struct shape2d embed_shape(const struct model_shape *s, enum embed_tensor t) {
    bool llama = s->arch == ARCH_LLAMA;
    switch (t) {
    case EMB_WTE: return (struct shape2d){"wte", s->Vp, s->C, SPLIT_VOCAB, 1};
    case EMB_WPE: return (struct shape2d){"wpe", llama ? 0 : shape_pos_rows(s), s->C, SPLIT_REPLICATED, 1};
    case EMB_NUM_TENSORS: break;
    }
    return (struct shape2d){"?", 0, 0, SPLIT_REPLICATED, 1};
}

static struct shape2d head_shape(const struct model_shape *s, enum head_tensor t) {
    bool llama = s->arch == ARCH_LLAMA;
    switch (t) {
    case HEAD_LNF_W: return (struct shape2d){"lnfw", 1, s->C, SPLIT_REPLICATED, 1};
    case HEAD_LNF_B: return (struct shape2d){"lnfb", llama ? 0 : 1, s->C, SPLIT_REPLICATED, 1};
    case HEAD_LM: return (struct shape2d){"lm_head", llama ? s->Vp : 0, s->C, SPLIT_VOCAB, 1};
    case HEAD_WTE: return (struct shape2d){"wte", llama ? 0 : s->Vp, s->C, SPLIT_VOCAB, 1};
    case HEAD_NUM_TENSORS: break;
    }
    return (struct shape2d){"?", 0, 0, SPLIT_REPLICATED, 1};
}

static struct shape2d layer_shape(const struct model_shape *s, enum layer_tensor t) {
    int C = s->C, F = mlp_width(s), hs = s->C / s->NH, QKV = (s->NH + 2 * kv_heads(s)) * hs;
    /* gpt2's biases and LayerNorm shifts; llama's gate */
    int gpt2 = s->arch == ARCH_LLAMA ? 0 : 1, llama = 1 - gpt2;
    switch (t) {
    case LAYER_LN1_W: return (struct shape2d){"ln1w", 1, C, SPLIT_REPLICATED, 1};
    case LAYER_LN1_B: return (struct shape2d){"ln1b", gpt2, C, SPLIT_REPLICATED, 1};
    /* q, k, v: three equal sections under tp (gpt2); llama's are q at NH,
     * k and v at KV heads' width (tp 1 only: config_grid.c) */
    case LAYER_QKV_W: return (struct shape2d){"qkvw", QKV, C, SPLIT_COLUMN, gpt2 ? 3 : 1};
    case LAYER_QKV_B: return (struct shape2d){"qkvb", gpt2, 3 * C, SPLIT_COLUMN, 3};
    case LAYER_ATTPROJ_W: return (struct shape2d){"attprojw", C, C, SPLIT_ROW, 1};
    case LAYER_ATTPROJ_B: return (struct shape2d){"attprojb", gpt2, C, SPLIT_REPLICATED, 1};
    case LAYER_LN2_W: return (struct shape2d){"ln2w", 1, C, SPLIT_REPLICATED, 1};
    case LAYER_LN2_B: return (struct shape2d){"ln2b", gpt2, C, SPLIT_REPLICATED, 1};
    case LAYER_FC_W: return (struct shape2d){"fcw", F, C, SPLIT_COLUMN, 1};
    case LAYER_FC_B: return (struct shape2d){"fcb", gpt2, F, SPLIT_COLUMN, 1};
    case LAYER_FC2_W: return (struct shape2d){"fc2w", llama * F, C, SPLIT_COLUMN, 1};
    case LAYER_FCPROJ_W: return (struct shape2d){"fcprojw", C, F, SPLIT_ROW, 1};
    case LAYER_FCPROJ_B: return (struct shape2d){"fcprojb", gpt2, C, SPLIT_REPLICATED, 1};
    case LAYER_NUM_TENSORS: break;
    }
    return (struct shape2d){"?", 0, 0, SPLIT_REPLICATED, 1};
}

/* The split dimension: rows of a matrix (column and vocab rules), columns
 * of a matrix (row rule), the one dimension of a vector. */
static bool splits_rows(const struct shape2d *d) {
    return d->rows > 1 && (d->split == SPLIT_COLUMN || d->split == SPLIT_VOCAB);
}

static struct shape2d local_shape(struct shape2d d, int tp) {
    if (d.split == SPLIT_REPLICATED) return d;
    if (splits_rows(&d)) d.rows /= tp;
    else d.cols /= tp;
    return d;
}

static size_t numel(struct shape2d d) { return (size_t)d.rows * (size_t)d.cols; }

/* Reference sizes: the whole model at tp = 1 in flat order (embedding,
 * head without the tied copy, layers), wte at reference_vocab rows. */
static struct model_shape ref_shape(const struct model_shape *s) {
    struct model_shape r = *s;
    r.Vp = reference_vocab(s);
    return r;
}

static size_t ref_embed_size(const struct model_shape *s) {
    struct model_shape r = ref_shape(s);
    return numel(embed_shape(&r, EMB_WTE)) + numel(embed_shape(&r, EMB_WPE));
}

static size_t ref_head_size(const struct model_shape *s) {
    struct model_shape r = ref_shape(s);
    return numel(head_shape(&r, HEAD_LNF_W)) + numel(head_shape(&r, HEAD_LNF_B)) + numel(head_shape(&r, HEAD_LM));
}

/* One whole layer's parameters (12 C^2 + 13 C for gpt2 at F = 4 C): its
 * tensors at full width, the stride of the reference numbering's layers. */
static size_t ref_layer_size(const struct model_shape *s) {
    size_t n = 0;
    for (int k = 0; k < LAYER_NUM_TENSORS; k++) n += numel(layer_shape(s, (enum layer_tensor)k));
    return n;
}

bool layout_gemm_tensor(enum unit_kind k, int t) {
    switch (k) {
    case UNIT_EMBED: return t == EMB_WTE;
    case UNIT_HEAD: return t == HEAD_WTE || t == HEAD_LM;
    default:
        return t == LAYER_QKV_W || t == LAYER_ATTPROJ_W || t == LAYER_FC_W || t == LAYER_FC2_W || t == LAYER_FCPROJ_W;
    }
}

/* Elements of a full shape in a double (the planner's shapes). */
static double elements(struct shape2d d) { return (double)d.rows * (double)d.cols; }

/* Of a shape with Vp rows (or none: gpt2's lm_head), the part in V rows
 * and the padding rows' part. */
static void vocab_rows(const struct model_shape *s, struct shape2d d, double *real, double *padding) {
    if (d.rows == 0) return;
    *real += (double)s->V * d.cols;
    *padding += elements(d) - (double)s->V * d.cols;
}

struct layout_param_parts layout_param_parts(const struct model_shape *s) {
    struct layout_param_parts p = {0};
    vocab_rows(s, embed_shape(s, EMB_WTE), &p.embedding, &p.padding);
    p.position = elements(embed_shape(s, EMB_WPE));
    p.norms = elements(head_shape(s, HEAD_LNF_W)) + elements(head_shape(s, HEAD_LNF_B));
    vocab_rows(s, head_shape(s, HEAD_LM), &p.embedding, &p.padding); /* HEAD_WTE: the tied copy, counted once */
    double attention = 0, ffn = 0, norms = 0;
    for (int t = 0; t < LAYER_NUM_TENSORS; t++) {
        double n = elements(layer_shape(s, (enum layer_tensor)t));
        switch ((enum layer_tensor)t) {
        case LAYER_LN1_W: case LAYER_LN1_B: case LAYER_LN2_W: case LAYER_LN2_B: norms += n; break;
        case LAYER_QKV_W: case LAYER_QKV_B: case LAYER_ATTPROJ_W: case LAYER_ATTPROJ_B: attention += n; break;
        default: ffn += n; break;
        }
        if (layout_gemm_tensor(UNIT_LAYER, t)) p.layer_gemm += n;
    }
    p.attention = s->L * attention;
    p.ffn = s->L * ffn;
    p.norms += s->L * norms;
    return p;
}

/* A unit's vectors packed: offsets vec[t] of its n tensors (sizes from the
 * offsets off[] and the unit's size) that are not a GEMM's; their sum. */
static size_t pack_vectors(enum unit_kind k, const size_t *off, int n, size_t size, size_t *vec) {
    size_t at = 0;
    for (int t = 0; t < n; t++) {
        vec[t] = 0;
        if (layout_gemm_tensor(k, t)) continue;
        vec[t] = at;
        at += (t + 1 < n ? off[t + 1] : size) - off[t];
    }
    return at;
}

/* The kinds of a unit whose full shape is not empty, in enum order. */
static int list_kinds(int *kinds, int n, struct shape2d (*shape_of)(const struct model_shape *, int),
                      const struct model_shape *s) {
    int k = 0;
    for (int t = 0; t < n; t++)
        if (numel(shape_of(s, t)) > 0) kinds[k++] = t;
    return k;
}

static struct shape2d embed_shape_i(const struct model_shape *s, int t) { return embed_shape(s, (enum embed_tensor)t); }
static struct shape2d head_shape_i(const struct model_shape *s, int t) { return head_shape(s, (enum head_tensor)t); }
static struct shape2d layer_shape_i(const struct model_shape *s, int t) { return layer_shape(s, (enum layer_tensor)t); }

/* Offsets of a unit's tensors (all kinds; an absent one takes no room) and its size. */
static size_t unit_offsets(size_t *off, int n, struct shape2d (*shape_of)(const struct model_shape *, int),
                           const struct model_shape *s, int tp) {
    size_t at = 0;
    for (int t = 0; t < n; t++) {
        off[t] = at;
        at += numel(local_shape(shape_of(s, t), tp));
    }
    return at;
}

int layout_init(struct model_layout *lay, struct model_shape shape, struct rank_desc r) {
    if (r.tp < 1 || r.tp_rank < 0 || r.tp_rank >= r.tp || !chunks_valid(&r, shape.L)) return -1;
    if (!tp_divides(&shape, r.tp, NULL, 0)) return -1;
    if (shape.maxT != 0 && shape.maxT < shape.T) return -1;
    if (shape.NH % kv_heads(&shape) != 0) return -1;
    shape.maxT = shape_pos_rows(&shape);
    shape.Vp = rank_vocab(&shape, r.tp);
    *lay = (struct model_layout){.shape = shape, .rank = r,
                                 .head_wte_copy = shape_tied(&shape) && r.has_head && !r.has_embed};
    lay->n_embed_kinds = list_kinds(lay->embed_kinds, EMB_NUM_TENSORS, embed_shape_i, &shape);
    lay->n_head_kinds = list_kinds(lay->head_kinds, HEAD_NUM_TENSORS, head_shape_i, &shape);
    if (!lay->head_wte_copy && lay->head_kinds[lay->n_head_kinds - 1] == HEAD_WTE) lay->n_head_kinds--;
    lay->n_layer_kinds = list_kinds(lay->layer_kinds, LAYER_NUM_TENSORS, layer_shape_i, &shape);
    lay->embed_size = unit_offsets(lay->embed_offset, EMB_NUM_TENSORS, embed_shape_i, &shape, r.tp);
    lay->head_size = unit_offsets(lay->head_offset, HEAD_NUM_TENSORS, head_shape_i, &shape, r.tp);
    if (!lay->head_wte_copy) lay->head_size = lay->head_offset[HEAD_WTE]; /* the last kind: not held */
    lay->layer_size = unit_offsets(lay->layer_offset, LAYER_NUM_TENSORS, layer_shape_i, &shape, r.tp);
    lay->embed_vec_size = pack_vectors(UNIT_EMBED, lay->embed_offset, EMB_NUM_TENSORS, lay->embed_size,
                                       lay->embed_vec_offset);
    lay->head_vec_size = pack_vectors(UNIT_HEAD, lay->head_offset, HEAD_NUM_TENSORS, lay->head_size,
                                      lay->head_vec_offset);
    lay->layer_vec_size = pack_vectors(UNIT_LAYER, lay->layer_offset, LAYER_NUM_TENSORS, lay->layer_size,
                                       lay->layer_vec_offset);
    lay->n_units = (r.has_embed ? 1 : 0) + (r.has_head ? 1 : 0) + rank_layers(&r);
    lay->total = (r.has_embed ? lay->embed_size : 0) + (r.has_head ? lay->head_size : 0) +
                 (size_t)rank_layers(&r) * lay->layer_size;
    lay->ref_total = ref_embed_size(&shape) + ref_head_size(&shape) + (size_t)shape.L * ref_layer_size(&shape);
    return 0;
}

void layout_init_whole(struct model_layout *lay, struct model_shape shape) {
    layout_init(lay, shape, rank_desc_whole(&shape));
}

int layout_embed_unit(const struct model_layout *lay) { return lay->rank.has_embed ? 0 : -1; }

int layout_head_unit(const struct model_layout *lay) {
    return lay->rank.has_head ? (lay->rank.has_embed ? 1 : 0) : -1;
}

int layout_layer_unit(const struct model_layout *lay, int layer) {
    int i = rank_layer_index(&lay->rank, layer);
    if (i < 0) return -1;
    return (lay->rank.has_embed ? 1 : 0) + (lay->rank.has_head ? 1 : 0) + i;
}

struct unit_info layout_unit(const struct model_layout *lay, int unit) {
    size_t off = 0;
    if (lay->rank.has_embed) {
        if (unit == 0) return (struct unit_info){UNIT_EMBED, -1, 0, lay->embed_size};
        off += lay->embed_size;
        unit--;
    }
    if (lay->rank.has_head) {
        if (unit == 0) return (struct unit_info){UNIT_HEAD, -1, off, lay->head_size};
        off += lay->head_size;
        unit--;
    }
    return (struct unit_info){UNIT_LAYER, rank_layer_at(&lay->rank, unit), off + (size_t)unit * lay->layer_size, lay->layer_size};
}

size_t layout_unit_offset(const struct model_layout *lay, int unit) { return layout_unit(lay, unit).offset; }
size_t layout_unit_size(const struct model_layout *lay, int unit) { return layout_unit(lay, unit).size; }

static int head_tensors(const struct model_layout *lay) { return lay->rank.has_head ? lay->n_head_kinds : 0; }

int layout_num_tensors(const struct model_layout *lay) {
    return (lay->rank.has_embed ? lay->n_embed_kinds : 0) + head_tensors(lay) +
           rank_layers(&lay->rank) * lay->n_layer_kinds;
}

static struct tensor_info make(const struct model_layout *lay, struct shape2d full, int unit, enum unit_kind kind,
                               int id, int layer, size_t offset, size_t ref_offset) {
    struct shape2d d = local_shape(full, lay->rank.tp);
    return (struct tensor_info){d.name, unit,      kind,      id,         layer,      offset, numel(d), d.rows,
                                d.cols, full.rows, full.cols, full.split, ref_offset, full.sections};
}

struct tensor_info layout_embed_tensor(const struct model_layout *lay, enum embed_tensor t) {
    size_t ref = t == EMB_WTE ? 0 : (size_t)reference_vocab(&lay->shape) * (size_t)lay->shape.C;
    return make(lay, embed_shape(&lay->shape, t), layout_embed_unit(lay), UNIT_EMBED, t, -1,
                lay->embed_offset[t], ref);
}

struct tensor_info layout_head_tensor(const struct model_layout *lay, enum head_tensor t) {
    int u = layout_head_unit(lay);
    size_t C = (size_t)lay->shape.C, ref = ref_embed_size(&lay->shape); /* lnfw, lnfb, lm_head from here */
    if (t == HEAD_WTE) ref = 0; /* the tied copy: wte's own numbers */
    else if (t == HEAD_LNF_B) ref += C;
    else if (t == HEAD_LM) ref += C;            /* llama: after lnfw (it has no lnfb) */
    return make(lay, head_shape(&lay->shape, t), u, UNIT_HEAD, t, -1,
                layout_unit_offset(lay, u) + lay->head_offset[t], ref);
}

struct tensor_info layout_layer_tensor(const struct model_layout *lay, int layer, enum layer_tensor t) {
    int u = layout_layer_unit(lay, layer);
    size_t layer_ref = ref_layer_size(&lay->shape), in_layer = 0;
    for (int k = 0; k < (int)t; k++) in_layer += numel(layer_shape(&lay->shape, (enum layer_tensor)k));
    size_t ref = ref_embed_size(&lay->shape) + ref_head_size(&lay->shape) + (size_t)layer * layer_ref + in_layer;
    return make(lay, layer_shape(&lay->shape, t), u, UNIT_LAYER, t, layer,
                layout_unit_offset(lay, u) + lay->layer_offset[t], ref);
}

struct tensor_info layout_tensor(const struct model_layout *lay, int index) {
    if (lay->rank.has_embed) {
        if (index < lay->n_embed_kinds) return layout_embed_tensor(lay, (enum embed_tensor)lay->embed_kinds[index]);
        index -= lay->n_embed_kinds;
    }
    if (index < head_tensors(lay)) return layout_head_tensor(lay, (enum head_tensor)lay->head_kinds[index]);
    index -= head_tensors(lay);
    return layout_layer_tensor(lay, rank_layer_at(&lay->rank, index / lay->n_layer_kinds),
                               (enum layer_tensor)lay->layer_kinds[index % lay->n_layer_kinds]);
}

/* Split coordinate x of this rank -> the full tensor's coordinate. */
static size_t full_coord(int full_dim, int sections, int tp, int tp_rank, size_t x) {
    size_t section = (size_t)full_dim / (size_t)sections, per_rank = section / (size_t)tp;
    return x / per_rank * section + (size_t)tp_rank * per_rank + x % per_rank;
}

/* llama's qkvw: q (NH heads), k and v (KV heads each), each split by
 * heads over tp: local row r -> the whole tensor's row. */
static size_t gqa_full_row(const struct model_layout *lay, size_t r) {
    const size_t hs = (size_t)(lay->shape.C / lay->shape.NH), tp = (size_t)lay->rank.tp, i = (size_t)lay->rank.tp_rank;
    const size_t q = (size_t)lay->shape.NH * hs, kv = (size_t)kv_heads(&lay->shape) * hs;
    if (r < q / tp) return i * (q / tp) + r;
    r -= q / tp;
    if (r < kv / tp) return q + i * (kv / tp) + r;
    r -= kv / tp;
    return q + kv + i * (kv / tp) + r;
}

size_t layout_ref_index(const struct model_layout *lay, const struct tensor_info *t, size_t i) {
    size_t r = i / (size_t)t->cols, c = i % (size_t)t->cols;
    if (t->split != SPLIT_REPLICATED && lay->rank.tp > 1) {
        struct shape2d d = t->kind == UNIT_EMBED ? embed_shape(&lay->shape, (enum embed_tensor)t->id)
                         : t->kind == UNIT_HEAD  ? head_shape(&lay->shape, (enum head_tensor)t->id)
                                                 : layer_shape(&lay->shape, (enum layer_tensor)t->id);
        if (t->kind == UNIT_LAYER && t->id == LAYER_QKV_W && lay->shape.arch == ARCH_LLAMA) r = gqa_full_row(lay, r);
        else if (splits_rows(&d)) r = full_coord(d.rows, d.sections, lay->rank.tp, lay->rank.tp_rank, r);
        else c = full_coord(d.cols, d.sections, lay->rank.tp, lay->rank.tp_rank, c);
    }
    size_t C = (size_t)lay->shape.C, ref_vp = (size_t)reference_vocab(&lay->shape);
    bool wte = t->split == SPLIT_VOCAB;
    if (wte && r >= ref_vp) return lay->ref_total + (r - ref_vp) * C + c; /* tp's extra padding rows */
    return t->ref_offset + r * (size_t)t->full_cols + c;
}

int layout_kind_unit(const struct model_layout *lay, enum unit_kind k) {
    switch (k) {
    case UNIT_EMBED: return layout_embed_unit(lay);
    case UNIT_HEAD: return layout_head_unit(lay);
    case UNIT_LAYER: return rank_layers(&lay->rank) > 0 ? layout_layer_unit(lay, rank_layer_at(&lay->rank, 0)) : -1;
    }
    return -1;
}
