/* Where a rank's model states keep an element (include/zero.h's struct
 * zero; zero_parts.h): full or sharded by stage, and a segment's gradient,
 * weights and fp32 optimizer states. zero.c, comm.c, states_io.c and
 * factored.c read them. A file of its own, apart from shard.c (the one
 * rule these build on, from the layout alone) and from zero.c:
 *   - shard.c implements include/shard.h, which include/zero.h includes;
 *     code of it that read struct zero would tie the public header's
 *     code back to zero.h (and, through segments.h, factored.h's);
 *   - zero.c calls factored.c, which reads these, so in zero.c they
 *     would make the two files use each other (tests/check_deps.sh's
 *     cycle rule). */
#include "zero_parts.h"

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

