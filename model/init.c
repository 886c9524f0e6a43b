/* GPT-2 initialisation as nanoGPT does it: every matrix and embedding
 * N(0, std), the two residual projections (attprojw, fcprojw) N(0,
 * std/sqrt(2L)) so the residual stream's variance does not grow with depth,
 * biases 0, LayerNorm gains 1. LLaMA's as llm.c's train_llama3.py does it:
 * the same rules for its tensors (the gate fc2w and the untied lm_head
 * N(0, std), RMSNorm gains 1). The vocabulary padding rows stay 0. Values
 * come from the counter RNG indexed by the element's reference index (its
 * place in the whole model, include/layout.h), so init does not depend on
 * thread count, on the layout, or on which rank draws them; a rank draws
 * only the elements it stores, one unit range at a time. */
#include "gpt.h"

#include <math.h>

#include "rng.h"

static float normal(uint64_t seed, size_t index) {
    /* Box-Muller from two uniforms; 1-u keeps the log away from 0 */
    float u1 = 1.0f - rng_uniform(seed, RNG_STREAM_INIT, 2 * (uint64_t)index);
    float u2 = rng_uniform(seed, RNG_STREAM_INIT, 2 * (uint64_t)index + 1);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647f * u2);
}

static float layer_init_std(enum layer_tensor t, float std, float proj_std) {
    switch (t) {
    case LAYER_QKV_W:
    case LAYER_FC_W:
    case LAYER_FC2_W: return std;
    case LAYER_ATTPROJ_W:
    case LAYER_FCPROJ_W: return proj_std;
    default: return 0.0f;
    }
}

/* How element values of tensor t are made: drawn with std (> 0), or set. */
struct init_rule {
    float std;     /* > 0: N(0, std) */
    float value;   /* otherwise this constant */
};

static struct init_rule rule_of(const struct tensor_info *t, float std, float proj_std) {
    switch (t->kind) {
    case UNIT_EMBED: return (struct init_rule){std, 0.0f};
    case UNIT_HEAD: return t->id == HEAD_WTE || t->id == HEAD_LM ? (struct init_rule){std, 0.0f}
                         : (struct init_rule){0.0f, t->id == HEAD_LNF_W ? 1.0f : 0.0f};
    case UNIT_LAYER: break;
    }
    if (t->id == LAYER_LN1_W || t->id == LAYER_LN2_W) return (struct init_rule){0.0f, 1.0f};
    return (struct init_rule){layer_init_std((enum layer_tensor)t->id, std, proj_std), 0.0f};
}

/* One tensor's elements [a, b) (tensor-local) into dst. */
static void init_tensor(const struct model_layout *lay, const struct tensor_info *t, size_t a, size_t b, float *dst,
                        struct init_rule r, uint64_t seed) {
    size_t real_rows_ref = (size_t)lay->shape.V; /* wte rows past V are padding */
#pragma omp parallel for
    for (size_t i = a; i < b; i++) {
        if (r.std <= 0.0f) {
            dst[i - a] = r.value;
            continue;
        }
        size_t ref = layout_ref_index(lay, t, i);
        bool padding = t->split == SPLIT_VOCAB && (ref - t->ref_offset) / (size_t)t->full_cols >= real_rows_ref;
        dst[i - a] = padding ? 0.0f : r.std * normal(seed, ref);
    }
}

void gpt_init_unit(const struct model_layout *lay, int unit, size_t lo, size_t hi, float *dst, float std,
                   uint64_t seed) {
    float proj_std = std / sqrtf(2.0f * (float)lay->shape.L);
    struct unit_info u = layout_unit(lay, unit);
    for (int k = 0; k < layout_num_tensors(lay); k++) {
        struct tensor_info t = layout_tensor(lay, k);
        if (t.unit != unit) continue;
        size_t t0 = t.offset - u.offset, a = lo > t0 ? lo : t0, b = hi < t0 + t.numel ? hi : t0 + t.numel;
        if (a >= b) continue;
        init_tensor(lay, &t, a - t0, b - t0, dst + (a - lo), rule_of(&t, std, proj_std), seed);
    }
}
