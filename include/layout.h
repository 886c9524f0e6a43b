/* Flat parameter units. Parameters live in one contiguous buffer cut into
 * units: unit 0 holds the embeddings and the head (wte, wpe, lnf), units
 * 1..L hold one transformer layer each. A tensor is a (unit, offset, shape)
 * view; tensors are named by enum, never by a magic index. Sharding,
 * checkpoints, the optimizer and the shard map all walk this one table. */
#ifndef SHARDLAB_LAYOUT_H
#define SHARDLAB_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

struct model_shape {
    int L;   /* layers */
    int C;   /* channels (hidden size) */
    int NH;  /* heads */
    int T;   /* sequence length = position-embedding rows */
    int V;   /* vocabulary */
    int Vp;  /* vocabulary padded to a multiple of 128 (llm.c) */
};

/* Tensors of unit 0, in llm.c's file order within the unit. */
enum embed_tensor { EMB_WTE, EMB_WPE, EMB_LNF_W, EMB_LNF_B, EMB_NUM_TENSORS };

/* Tensors of one transformer layer, in llm.c's order. */
enum layer_tensor {
    LAYER_LN1_W, LAYER_LN1_B,
    LAYER_QKV_W, LAYER_QKV_B,
    LAYER_ATTPROJ_W, LAYER_ATTPROJ_B,
    LAYER_LN2_W, LAYER_LN2_B,
    LAYER_FC_W, LAYER_FC_B,
    LAYER_FCPROJ_W, LAYER_FCPROJ_B,
    LAYER_NUM_TENSORS
};

enum { EMBED_UNIT = 0 };

struct tensor_info {
    const char *name;   /* llm.c's name: wte, qkvw, ... */
    int unit;           /* 0 or 1 + layer */
    int layer;          /* -1 for unit 0 tensors */
    size_t offset;      /* element offset in the flat parameter buffer */
    size_t numel;
    int rows, cols;     /* 2-D shape (rows = 1 for vectors) */
};

struct model_layout {
    struct model_shape shape;
    size_t embed_offset[EMB_NUM_TENSORS], embed_size;  /* within unit 0 */
    size_t layer_offset[LAYER_NUM_TENSORS], layer_size; /* within one layer unit */
    int n_units;    /* L + 1 */
    size_t total;   /* parameters (Psi), padding rows of wte included */
};

int padded_vocab(int V);
void layout_init(struct model_layout *lay, struct model_shape shape);

size_t layout_unit_offset(const struct model_layout *lay, int unit);
size_t layout_unit_size(const struct model_layout *lay, int unit);

/* All tensors: unit 0's first, then layer by layer. */
int layout_num_tensors(const struct model_layout *lay);
struct tensor_info layout_tensor(const struct model_layout *lay, int index);
struct tensor_info layout_embed_tensor(const struct model_layout *lay, enum embed_tensor t);
struct tensor_info layout_layer_tensor(const struct model_layout *lay, int layer, enum layer_tensor t);

/* 2-D weights (matrices) get weight decay by default; vectors do not. */
static inline bool tensor_is_matrix(const struct tensor_info *t) { return t->rows > 1 && t->cols > 1; }

#endif
