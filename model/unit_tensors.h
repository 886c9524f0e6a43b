/* A unit's tensors as the blocks read them (model/gpt.c, model/llama.c):
 * fp32 (a unit's vectors always, packed at the layout's *_vec_offset when
 * the engine hands over the bf16 params as they are; else within the
 * whole unit widened: struct unit_weights, include/gpt.h), or as a GEMM
 * operand (those bf16 params as they are, else the fp32 values); and a
 * tensor's gradient in the unit's fp32 accumulator. */
#ifndef SHARDLAB_UNIT_TENSORS_H
#define SHARDLAB_UNIT_TENSORS_H

#include "gpt.h"

static inline const float *wt(const struct gpt *m, struct unit_weights w, enum layer_tensor t) {
    return w.vec + (operand_is_bf16(w.params) ? m->lay->layer_vec_offset[t] : m->lay->layer_offset[t]);
}

static inline struct operand wop(const struct gpt *m, struct unit_weights w, enum layer_tensor t) {
    return operand_at(w.params, m->lay->layer_offset[t]);
}

static inline float *dwt(const struct gpt *m, float *dw, enum layer_tensor t) { return dw + m->lay->layer_offset[t]; }

static inline const float *ew(const struct gpt *m, struct unit_weights w_embed, enum embed_tensor t) {
    return w_embed.vec + (operand_is_bf16(w_embed.params) ? m->lay->embed_vec_offset[t] : m->lay->embed_offset[t]);
}

static inline const float *hw(const struct gpt *m, struct unit_weights w_head, enum head_tensor t) {
    return w_head.vec + (operand_is_bf16(w_head.params) ? m->lay->head_vec_offset[t] : m->lay->head_offset[t]);
}

#endif
