/* GPT-2 initialisation as nanoGPT does it: every matrix and embedding
 * N(0, std), the two residual projections (attprojw, fcprojw) N(0,
 * std/sqrt(2L)) so the residual stream's variance does not grow with depth,
 * biases 0, LayerNorm gains 1. The vocabulary padding rows stay 0. Values
 * come from the counter RNG indexed by parameter position, so init does not
 * depend on thread count or on which rank draws them. */
#include "gpt.h"

#include <math.h>

#include "rng.h"

static float normal(uint64_t seed, size_t index) {
    /* Box-Muller from two uniforms; 1-u keeps the log away from 0 */
    float u1 = 1.0f - rng_uniform(seed, RNG_STREAM_INIT, 2 * (uint64_t)index);
    float u2 = rng_uniform(seed, RNG_STREAM_INIT, 2 * (uint64_t)index + 1);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647f * u2);
}

static void fill(float *w, const struct tensor_info *t, size_t numel, float std, uint64_t seed) {
    for (size_t i = 0; i < numel; i++) w[t->offset + i] = std * normal(seed, t->offset + i);
}

static void set(float *w, const struct tensor_info *t, float value) {
    for (size_t i = 0; i < t->numel; i++) w[t->offset + i] = value;
}

static float layer_init_std(enum layer_tensor t, float std, float proj_std) {
    switch (t) {
    case LAYER_QKV_W:
    case LAYER_FC_W: return std;
    case LAYER_ATTPROJ_W:
    case LAYER_FCPROJ_W: return proj_std;
    default: return 0.0f; /* vectors: set, not drawn */
    }
}

void gpt_init_weights(const struct model_layout *lay, float *w, float std, uint64_t seed) {
    const struct model_shape *s = &lay->shape;
    float proj_std = std / sqrtf(2.0f * (float)s->L);
    struct tensor_info wte = layout_embed_tensor(lay, EMB_WTE), wpe = layout_embed_tensor(lay, EMB_WPE);
    set(w, &wte, 0.0f);
    fill(w, &wte, (size_t)s->V * s->C, std, seed); /* padding rows stay 0 */
    fill(w, &wpe, wpe.numel, std, seed);
    struct tensor_info lnfw = layout_embed_tensor(lay, EMB_LNF_W), lnfb = layout_embed_tensor(lay, EMB_LNF_B);
    set(w, &lnfw, 1.0f);
    set(w, &lnfb, 0.0f);
    for (int l = 0; l < s->L; l++)
        for (int k = 0; k < LAYER_NUM_TENSORS; k++) {
            struct tensor_info t = layout_layer_tensor(lay, l, (enum layer_tensor)k);
            if (k == LAYER_LN1_W || k == LAYER_LN2_W) set(w, &t, 1.0f);
            else if (t.rows == 1) set(w, &t, 0.0f); /* biases */
            else fill(w, &t, t.numel, layer_init_std((enum layer_tensor)k, std, proj_std), seed);
        }
}
