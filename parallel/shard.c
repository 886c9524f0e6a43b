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

/* Units 1..L are the same size, so offsets have a closed form. */
size_t shard_padded_offset(const struct shard_layout *s, int unit) {
    return unit == EMBED_UNIT ? 0 : shard_unit_padded(s, EMBED_UNIT) + (size_t)(unit - 1) * shard_unit_padded(s, 1);
}

size_t shard_offset(const struct shard_layout *s, int unit) { return shard_padded_offset(s, unit) / (size_t)s->N; }

void shard_owned(const struct shard_layout *s, int unit, int rank, size_t *lo, size_t *hi) {
    size_t chunk = shard_unit_chunk(s, unit), n = layout_unit_size(s->lay, unit);
    *lo = (size_t)rank * chunk;
    *hi = *lo + chunk;
    if (*hi > n) *hi = n;
    if (*lo > *hi) *lo = *hi;
}
