/* A rank's model: which parameters this rank holds, as flat units.
 *
 * A rank is described by the layer ranges it holds (one per model chunk:
 * one for GPipe and 1F1B, v non-adjacent ones under the interleaved
 * schedule's virtual stages), its tensor-parallel index and degree, and
 * whether it holds the embedding and/or the head (struct rank_desc). Its
 * parameters are one flat buffer cut into units, in this order:
 *
 *   embedding  wte, wpe                       (first stage)
 *   head       lnfw, lnfb [, wte copy]        (last stage)
 *   layer l    ln1w ... fcprojb, for each held layer in ascending order
 *              (llm.c's order)
 *
 * The LM head is tied to the token embedding: when both sit on one rank the
 * head reads the embedding unit's wte; when they sit on different stages
 * the head unit keeps its own copy of wte, and the two copies' gradients
 * are summed across the first and last stage (as Megatron-LM does).
 *
 * Every tensor's entry carries its tensor-parallel split rule (Shoeybi et
 * al. 2019): column-parallel layers split their output features, row-
 * parallel layers their input features, the embedding its vocabulary rows;
 * the rest is replicated. With tp = 1 and one stage the rank holds the
 * whole model, and its flat order is the model's reference numbering
 * (embedding, head, layers), which init and stochastic rounding index by,
 * so values never depend on the layout. A tensor is a (unit, offset, shape)
 * view named by enum; no code names a unit by number. Counts are size_t. */
#ifndef SHARDLAB_LAYOUT_H
#define SHARDLAB_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

/* gpt2: LayerNorm, GELU MLP, biases, learned positions, tied embeddings.
 * llama: RMSNorm, SwiGLU MLP, GQA, RoPE (no position table), no biases,
 * untied embeddings (llm.c's train_llama3.py, Meta's reference). */
enum model_arch { ARCH_GPT2, ARCH_LLAMA };

struct model_shape {
    int L;   /* layers */
    int C;   /* channels (hidden size) */
    int NH;  /* heads */
    int T;   /* sequence length: the positions a forward uses */
    int maxT; /* position-embedding rows (llm.c's max_seq_len), >= T; a shape
               * handed to layout_init with 0 here gets T */
    int V;   /* vocabulary */
    int Vp;  /* vocabulary padded to a multiple of VOCAB_PAD (llm.c's GPT-2; LLaMA's is V) */
    enum model_arch arch;
    int KV;  /* key/value heads (GQA, llama); 0: NH */
    int F;   /* the MLP's width; 0: 4 C */
    /* llama only: RMSNorm's eps and RoPE's (include/llama_layers.h) */
    float norm_eps;
    float rope_theta;
    bool rope_scaled; /* LLaMA 3.1's frequency scaling */
};

/* llm.c pads the vocabulary to a multiple of this many rows (padded_vocab;
 * under tp, a multiple of VOCAB_PAD x tp). */
enum { VOCAB_PAD = 128 };

/* The MLP's width F: the FC layer's output features and the projection's
 * input (SwiGLU: of each of its two input GEMMs). */
static inline int mlp_width(const struct model_shape *s) { return s->F > 0 ? s->F : 4 * s->C; }
/* Key/value heads: KV, or NH without GQA. */
static inline int kv_heads(const struct model_shape *s) { return s->KV > 0 ? s->KV : s->NH; }

/* Most model chunks one rank holds (the config's limit on virtual_stages). */
enum { RANK_MAX_CHUNKS = 16 };

/* Layers [l0, l1). */
struct layer_range {
    int l0, l1;
};

/* What one rank holds. */
struct rank_desc {
    int n_chunks;        /* model chunks (virtual stages) on this rank: 1 unless interleaved */
    struct layer_range chunk[RANK_MAX_CHUNKS]; /* each chunk's layers, ascending and disjoint */
    int tp_rank, tp;     /* tensor-parallel index and degree */
    bool has_embed;      /* first stage (in chunk 0) */
    bool has_head;       /* last stage (in chunk n_chunks - 1) */
};

/* The whole model on one rank: every layer, tp = 1, embedding and head. */
struct rank_desc rank_desc_whole(const struct model_shape *s);
/* One chunk of layers [l0, l1). */
struct rank_desc rank_desc_range(int l0, int l1, int tp, int tp_rank, bool has_embed, bool has_head);

/* The rank's layers over all its chunks. */
int rank_layers(const struct rank_desc *r);
/* The model layer of the rank's i-th held layer (0 <= i < rank_layers). */
int rank_layer_at(const struct rank_desc *r, int i);
/* The held layer's index among the rank's layers; -1 when not held. */
int rank_layer_index(const struct rank_desc *r, int layer);
/* "E 0-1,4-5 H": the embedding, each chunk's first-last layers, the head. */
void rank_holds_text(const struct rank_desc *r, char *buf, size_t len);

enum unit_kind { UNIT_EMBED, UNIT_HEAD, UNIT_LAYER };

/* Every architecture's tensors; an architecture has those whose shape
 * is not empty (a layout's *_kinds lists them, in this order). gpt2 has
 * all but wte's untied head (HEAD_LM) and the gate (LAYER_FC2_W); llama
 * has wte, lnfw, the head lm_head, and per layer ln1w, qkvw, attprojw,
 * ln2w, fcw (up), fc2w (gate), fcprojw (down): write_tensors' order.
 * HEAD_WTE, gpt2's tied copy, exists only when the embedding is on another
 * rank. */
enum embed_tensor { EMB_WTE, EMB_WPE, EMB_NUM_TENSORS };
enum head_tensor { HEAD_LNF_W, HEAD_LNF_B, HEAD_LM, HEAD_WTE, HEAD_NUM_TENSORS };
enum layer_tensor {
    LAYER_LN1_W, LAYER_LN1_B,
    LAYER_QKV_W, LAYER_QKV_B,
    LAYER_ATTPROJ_W, LAYER_ATTPROJ_B,
    LAYER_LN2_W, LAYER_LN2_B,
    LAYER_FC_W, LAYER_FC_B, LAYER_FC2_W,
    LAYER_FCPROJ_W, LAYER_FCPROJ_B,
    LAYER_NUM_TENSORS
};

/* Tensor-parallel split rules. Column: the output features (rows of a
 * weight, the elements of its bias) are split, by heads for QKV. Row: the
 * input features (columns of a weight) are split; its bias is replicated
 * and added once, after the reduction. Vocab: rows of the (tied) embedding. */
enum tp_split { SPLIT_REPLICATED, SPLIT_COLUMN, SPLIT_ROW, SPLIT_VOCAB };

const char *tp_split_name(enum tp_split s);
/* Whether tp ranks can split the model: gpt2's n_head heads and 4 C FC
 * features; llama's query and key/value heads, F and the vocabulary. When
 * not, why (len bytes; NULL: not wanted) says so, naming the config's keys. */
bool tp_divides(const struct model_shape *s, int tp, char *why, size_t len);

struct unit_info {
    enum unit_kind kind;
    int layer;        /* UNIT_LAYER: the model's layer index; else -1 */
    size_t offset;    /* first element in the rank's flat buffer */
    size_t size;      /* elements */
};

struct tensor_info {
    const char *name;     /* llm.c's name: wte, qkvw, ... */
    int unit;             /* index into the rank's units */
    enum unit_kind kind;
    int id;               /* the enum embed_tensor / head_tensor / layer_tensor value */
    int layer;            /* -1 for embedding and head tensors */
    size_t offset;        /* element offset in the rank's flat buffer */
    size_t numel;         /* this rank's elements */
    int rows, cols;       /* this rank's 2-D shape (rows = 1 for vectors) */
    int full_rows, full_cols;
    enum tp_split split;
    size_t ref_offset;    /* offset of the whole tensor in the reference numbering */
    int sections;         /* equal blocks along the split dimension (QKV: q, k, v); 1 for the rest. A
                           * rank's slice holds its part of each, one after the other */
};

struct model_layout {
    struct model_shape shape;
    struct rank_desc rank;
    bool head_wte_copy;   /* the head holds its own copy of the tied wte (embedding on another rank) */
    /* the tensors this architecture has (and this rank, for the head's
     * copy), in enum order */
    int embed_kinds[EMB_NUM_TENSORS], n_embed_kinds;
    int head_kinds[HEAD_NUM_TENSORS], n_head_kinds;
    int layer_kinds[LAYER_NUM_TENSORS], n_layer_kinds;
    /* element offsets of each tensor within its unit, and unit sizes */
    size_t embed_offset[EMB_NUM_TENSORS], embed_size;
    size_t head_offset[HEAD_NUM_TENSORS], head_size;
    size_t layer_offset[LAYER_NUM_TENSORS], layer_size;
    /* the unit's vectors packed (layout_gemm_tensor's others: LayerNorms,
     * biases, wpe): each one's offset in that packing (0 for a GEMM's
     * tensor) and the packing's size, the fp32 view of a unit the engine
     * widens when the model reads the GEMMs' weights as bf16 */
    size_t embed_vec_offset[EMB_NUM_TENSORS], embed_vec_size;
    size_t head_vec_offset[HEAD_NUM_TENSORS], head_vec_size;
    size_t layer_vec_offset[LAYER_NUM_TENSORS], layer_vec_size;
    int n_units;          /* embedding? + head? + rank_layers */
    size_t total;         /* this rank's parameters, padding rows of wte included */
    size_t ref_total;     /* the whole model's (the reference numbering) */
};

/* Whether this rank holds one of a tied wte's two copies (the first or
 * the last of several stages, gpt2), whose gradients are summed across
 * the two stages (parallel/zero/comm.c); an untied head (llama) has none. */
static inline bool layout_ties(const struct model_layout *lay) {
    return lay->shape.arch == ARCH_GPT2 && lay->rank.has_embed != lay->rank.has_head;
}

int padded_vocab(int V);
/* The vocabulary rows of the whole model's reference numbering: llm.c's
 * padded_vocab for gpt2, V for llama. */
int reference_vocab(const struct model_shape *s);
/* Whether the LM head is wte (tied: gpt2) or its own lm_head (llama). */
static inline bool shape_tied(const struct model_shape *s) { return s->arch == ARCH_GPT2; }
/* The position table's rows: maxT, or T where maxT is 0. */
static inline int shape_pos_rows(const struct model_shape *s) { return s->maxT > 0 ? s->maxT : s->T; }
/* Fails (-1) when the description does not fit the shape: a layer range
 * outside [0, L), tp not dividing heads or vocabulary rows, maxT < T. The
 * layout's shape has maxT set (T when it was 0). wpe is (maxT, C): a
 * forward reads its first T rows; the rest are carried, loaded and saved
 * whole, and get no gradient. */
int layout_init(struct model_layout *lay, struct model_shape shape, struct rank_desc rank);
/* The whole model (tp = 1, one stage): cannot fail when maxT is 0 or >= T. */
void layout_init_whole(struct model_layout *lay, struct model_shape shape);

struct unit_info layout_unit(const struct model_layout *lay, int unit);
/* Whether tensor t of a unit of kind k is read by a GEMM (or, wte, by the
 * embedding's row lookup too): the tensors the model can read as bf16. */
bool layout_gemm_tensor(enum unit_kind k, int t);
size_t layout_unit_offset(const struct model_layout *lay, int unit);
size_t layout_unit_size(const struct model_layout *lay, int unit);
/* Unit indices by role; -1 when this rank does not hold it. */
int layout_embed_unit(const struct model_layout *lay);
int layout_head_unit(const struct model_layout *lay);
int layout_layer_unit(const struct model_layout *lay, int layer);
/* A unit of kind k (the embedding, the head, the first layer), whose size
 * every unit of that kind shares; -1 when this rank holds none. */
int layout_kind_unit(const struct model_layout *lay, enum unit_kind k);

/* This rank's tensors in flat order: the embedding's, the head's, then
 * layer by layer. */
int layout_num_tensors(const struct model_layout *lay);
struct tensor_info layout_tensor(const struct model_layout *lay, int index);
struct tensor_info layout_embed_tensor(const struct model_layout *lay, enum embed_tensor t);
struct tensor_info layout_head_tensor(const struct model_layout *lay, enum head_tensor t);
struct tensor_info layout_layer_tensor(const struct model_layout *lay, int layer, enum layer_tensor t);
/* Index of this rank's element i of tensor t (0 <= i < t->numel) in the
 * whole model's reference numbering (tp = 1, Vp = padded_vocab(V)). Rows
 * of wte past that Vp (the extra vocabulary padding of tp > 1) map past
 * ref_total: they are padding, zero and never trained. */
size_t layout_ref_index(const struct model_layout *lay, const struct tensor_info *t, size_t i);

/* The whole model's parameters by part (tp 1, every tensor once, the tied
 * head's copy not again), from the tensors' shapes above: the one count
 * the trainer's buffers, build/plan and the theory use
 * (train/theory/theory_params.c). The embedding and the untied head count
 * V rows; their rows V..Vp are `padding`, apart. Doubles: the planner's
 * shapes reach 1e12 parameters. */
struct layout_param_parts {
    double embedding;  /* wte, and llama's lm_head */
    double position;   /* wpe (gpt2) */
    double attention;  /* qkv and the projection, weights and biases, all layers */
    double ffn;        /* fc (up), fc2 (gate), fcproj (down), all layers */
    double norms;      /* every layer's norms and the final one */
    double padding;    /* vocabulary rows V..Vp of wte (and lm_head) */
    double layer_gemm; /* one layer's GEMM weights (layout_gemm_tensor): what its GEMMs read per token */
};
struct layout_param_parts layout_param_parts(const struct model_shape *s);

/* 2-D weights (matrices) get weight decay by default; vectors do not. */
static inline bool tensor_is_matrix(const struct tensor_info *t) { return t->full_rows > 1 && t->full_cols > 1; }

#endif
