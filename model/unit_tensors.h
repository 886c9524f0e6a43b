/* A unit's tensors as the blocks read them (model/gpt.c, model/llama.c):
 * fp32 (a unit's vectors always, packed at the layout's *_vec_offset when
 * the engine hands over the bf16 params as they are, w.b16; else the whole
 * unit widened), or as a GEMM operand (those bf16 params as they are, else
 * the fp32 values); and a tensor's gradient in the unit's fp32 accumulator. */
#ifndef SHARDLAB_UNIT_TENSORS_H
#define SHARDLAB_UNIT_TENSORS_H

#include "gpt.h"

static inline const float *wt(const struct gpt *m, struct operand w, enum layer_tensor t) {
    return w.f32 + (w.b16 ? m->lay->layer_vec_offset[t] : m->lay->layer_offset[t]);
}

static inline struct operand wop(const struct gpt *m, struct operand w, enum layer_tensor t) {
    return operand_at(w, m->lay->layer_offset[t]);
}

static inline float *dwt(const struct gpt *m, float *dw, enum layer_tensor t) { return dw + m->lay->layer_offset[t]; }

static inline const float *ew(const struct gpt *m, struct operand w_embed, enum embed_tensor t) {
    return w_embed.f32 + (w_embed.b16 ? m->lay->embed_vec_offset[t] : m->lay->embed_offset[t]);
}

static inline const float *hw(const struct gpt *m, struct operand w_head, enum head_tensor t) {
    return w_head.f32 + (w_head.b16 ? m->lay->head_vec_offset[t] : m->lay->head_offset[t]);
}

#endif
