/* Where an element lives, in two layers. First the one rule (include/shard.h):
 * rank r of N owns slice r of every padded unit, from the layout alone
 * (the planner and the report use it too). Then where a rank's model
 * states keep an element (include/zero.h's struct zero; zero_parts.h):
 * full or sharded by stage, and a segment's gradient, weights and fp32
 * optimizer states, built on the rule; zero.c, comm.c, states_io.c and
 * factored.c read them. Not in zero.c: zero.c calls factored.c, which
 * reads these, so there they would make the two files use each other
 * (tests/check_deps.sh's cycle rule). */
#include "shard.h"
#include "zero_parts.h"

void shard_layout_init(struct shard_layout *s, const struct model_layout *lay, int N, int rank) {
    s->lay = lay;
    s->N = N;
    s->rank = rank;
    s->total_padded = 0;
    for (int u = 0; u < lay->n_units; u++) s->total_padded += shard_unit_padded(s, u);
    s->total_shard = s->total_padded / (size_t)N;
}

size_t shard_unit_padded(const struct shard_layout *s, int unit) {
    size_t n = layout_unit_size(s->lay, unit), N = (size_t)s->N;
    return (n + N - 1) / N * N;
}

size_t shard_unit_chunk(const struct shard_layout *s, int unit) { return shard_unit_padded(s, unit) / (size_t)s->N; }

/* Units come in kind order (embedding, head, layers) and the layers are
 * all one size, so a unit's offset has a closed form. */
size_t shard_padded_offset(const struct shard_layout *s, int unit) {
    size_t off = 0;
    int e = layout_embed_unit(s->lay), h = layout_head_unit(s->lay);
    if (e >= 0 && unit > e) off += shard_unit_padded(s, e);
    if (h >= 0 && unit > h) off += shard_unit_padded(s, h);
    int first_layer = (e >= 0) + (h >= 0);
    if (unit > first_layer) off += (size_t)(unit - first_layer) * shard_unit_padded(s, first_layer);
    return off;
}

size_t shard_max_unit_padded(const struct shard_layout *s) {
    size_t mx = 0;
    int n = s->lay->n_units < 3 ? s->lay->n_units : 3; /* embedding, head, one layer cover every size */
    for (int u = 0; u < n; u++) mx = shard_unit_padded(s, u) > mx ? shard_unit_padded(s, u) : mx;
    return mx;
}

size_t shard_bucket_elems(const struct shard_layout *s) {
    size_t unit = shard_max_unit_padded(s);
    return unit + (s->N > 1 ? unit / (size_t)s->N : 0);
}

size_t shard_offset(const struct shard_layout *s, int unit) { return shard_padded_offset(s, unit) / (size_t)s->N; }

void shard_owned(const struct shard_layout *s, int unit, int rank, size_t *lo, size_t *hi) {
    size_t chunk = shard_unit_chunk(s, unit), n = layout_unit_size(s->lay, unit);
    *lo = (size_t)rank * chunk;
    *hi = *lo + chunk;
    if (*hi > n) *hi = n;
    if (*lo > *hi) *lo = *hi;
}

/* ---- where struct zero keeps an element */
bool zero_params_sharded(const struct zero *z) { return z->row->shards_params; }
bool zero_grads_sharded(const struct zero *z) { return z->row->shards_grads; }
bool zero_optim_sharded(const struct zero *z) { return z->row->shards_optimizer; }

size_t zero_psize(const struct zero *z) { return dtype_size(z->o.param_dtype); }
size_t zero_gsize(const struct zero *z) { return dtype_size(z->o.grad_dtype); }

/* element i of unit u in a full padded buffer / in this rank's shard */
size_t zero_full_index(const struct zero *z, int u, size_t i) { return shard_padded_offset(&z->sh, u) + i; }
size_t zero_shard_index(const struct zero *z, int u, size_t i) {
    return shard_offset(&z->sh, u) + (i - (size_t)z->sh.rank * shard_unit_chunk(&z->sh, u));
}
size_t zero_param_index(const struct zero *z, int u, size_t i) {
    return zero_params_sharded(z) ? zero_shard_index(z, u, i) : zero_full_index(z, u, i);
}
size_t zero_state_index(const struct zero *z, int u, size_t i) {
    return zero_optim_sharded(z) ? zero_shard_index(z, u, i) : zero_full_index(z, u, i);
}

/* Index of element i (unit-local, in this rank's update range) in the
 * reduced gradients: full (stage 0), the unit's start (stage 1, after the
 * in-place reduce-scatter), or the shard (stages 2, 3). */
size_t zero_grad_index(const struct zero *z, int u, size_t i) {
    switch (z->row->grads) {
    case GRADS_ALL_REDUCE_BUCKETS: return zero_full_index(z, u, i);
    case GRADS_REDUCE_SCATTER_STEP: return zero_full_index(z, u, i - (size_t)z->sh.rank * shard_unit_chunk(&z->sh, u));
    case GRADS_REDUCE_SCATTER_UNIT: break;
    }
    return zero_shard_index(z, u, i);
}

const void *zero_segment_grad(const struct zero *z, const struct opt_segment *g) {
    return (const char *)z->st.grads + zero_grad_index(z, g->unit, g->lo) * zero_gsize(z);
}

float *zero_segment_weights(struct zero *z, const struct opt_segment *g, bf16 **params_out) {
    size_t pi = zero_param_index(z, g->unit, g->lo);
    *params_out = z->st.master ? (bf16 *)z->st.params + pi : NULL;
    return z->st.master ? z->st.master + g->state_at : (float *)z->st.params + pi;
}

/* Where fp32 optimizer state element lo of segment g lives in s1/s2: by
 * segment under an 8-bit rule (its small tensors), else like the master. */
size_t zero_opt_f32_index(const struct zero *z, const struct opt_segment *g) {
    return z->rule->quantized ? g->f32_offset : g->state_at;
}

