#include "layout.h"

struct shape2d {
    const char *name;
    int rows, cols;
};

int padded_vocab(int V) { return (V + 127) / 128 * 128; }

static struct shape2d embed_shape(const struct model_shape *s, enum embed_tensor t) {
    switch (t) {
    case EMB_WTE: return (struct shape2d){"wte", s->Vp, s->C};
    case EMB_WPE: return (struct shape2d){"wpe", s->T, s->C};
    case EMB_LNF_W: return (struct shape2d){"lnfw", 1, s->C};
    case EMB_LNF_B: return (struct shape2d){"lnfb", 1, s->C};
    case EMB_NUM_TENSORS: break;
    }
    return (struct shape2d){"?", 0, 0};
}

/* Weights are (out, in), so y = x W^T as in llm.c. */
static struct shape2d layer_shape(const struct model_shape *s, enum layer_tensor t) {
    int C = s->C;
    switch (t) {
    case LAYER_LN1_W: return (struct shape2d){"ln1w", 1, C};
    case LAYER_LN1_B: return (struct shape2d){"ln1b", 1, C};
    case LAYER_QKV_W: return (struct shape2d){"qkvw", 3 * C, C};
    case LAYER_QKV_B: return (struct shape2d){"qkvb", 1, 3 * C};
    case LAYER_ATTPROJ_W: return (struct shape2d){"attprojw", C, C};
    case LAYER_ATTPROJ_B: return (struct shape2d){"attprojb", 1, C};
    case LAYER_LN2_W: return (struct shape2d){"ln2w", 1, C};
    case LAYER_LN2_B: return (struct shape2d){"ln2b", 1, C};
    case LAYER_FC_W: return (struct shape2d){"fcw", 4 * C, C};
    case LAYER_FC_B: return (struct shape2d){"fcb", 1, 4 * C};
    case LAYER_FCPROJ_W: return (struct shape2d){"fcprojw", C, 4 * C};
    case LAYER_FCPROJ_B: return (struct shape2d){"fcprojb", 1, C};
    case LAYER_NUM_TENSORS: break;
    }
    return (struct shape2d){"?", 0, 0};
}

void layout_init(struct model_layout *lay, struct model_shape shape) {
    shape.Vp = padded_vocab(shape.V);
    lay->shape = shape;
    size_t off = 0;
    for (int t = 0; t < EMB_NUM_TENSORS; t++) {
        struct shape2d d = embed_shape(&shape, (enum embed_tensor)t);
        lay->embed_offset[t] = off;
        off += (size_t)d.rows * (size_t)d.cols;
    }
    lay->embed_size = off;
    off = 0;
    for (int t = 0; t < LAYER_NUM_TENSORS; t++) {
        struct shape2d d = layer_shape(&shape, (enum layer_tensor)t);
        lay->layer_offset[t] = off;
        off += (size_t)d.rows * (size_t)d.cols;
    }
    lay->layer_size = off;
    lay->n_units = shape.L + 1;
    lay->total = lay->embed_size + (size_t)shape.L * lay->layer_size;
}

size_t layout_unit_offset(const struct model_layout *lay, int unit) {
    return unit == EMBED_UNIT ? 0 : lay->embed_size + (size_t)(unit - 1) * lay->layer_size;
}

size_t layout_unit_size(const struct model_layout *lay, int unit) {
    return unit == EMBED_UNIT ? lay->embed_size : lay->layer_size;
}

int layout_num_tensors(const struct model_layout *lay) {
    return EMB_NUM_TENSORS + lay->shape.L * LAYER_NUM_TENSORS;
}

struct tensor_info layout_embed_tensor(const struct model_layout *lay, enum embed_tensor t) {
    struct shape2d d = embed_shape(&lay->shape, t);
    return (struct tensor_info){d.name, EMBED_UNIT, -1, lay->embed_offset[t],
                                (size_t)d.rows * (size_t)d.cols, d.rows, d.cols};
}

struct tensor_info layout_layer_tensor(const struct model_layout *lay, int layer, enum layer_tensor t) {
    struct shape2d d = layer_shape(&lay->shape, t);
    int unit = 1 + layer;
    return (struct tensor_info){d.name, unit, layer, layout_unit_offset(lay, unit) + lay->layer_offset[t],
                                (size_t)d.rows * (size_t)d.cols, d.rows, d.cols};
}

struct tensor_info layout_tensor(const struct model_layout *lay, int index) {
    if (index < EMB_NUM_TENSORS) return layout_embed_tensor(lay, (enum embed_tensor)index);
    index -= EMB_NUM_TENSORS;
    return layout_layer_tensor(lay, index / LAYER_NUM_TENSORS, (enum layer_tensor)(index % LAYER_NUM_TENSORS));
}
