#include "shard.h"

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
