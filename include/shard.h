/* Sharding by the one rule: rank r of N owns slice r of every unit. Each
 * unit is padded to a multiple of N elements (zeros that are never
 * trained), so a slice never crosses a unit and a unit's collective is one
 * call. Full buffers hold the padded units back to back; shard buffers hold
 * this rank's slices back to back. With N = 1 there is no padding and a
 * shard is the whole model. Implemented in parallel/zero/places.c, beside
 * where ZeRO's states keep an element by this rule. */
#ifndef SHARDLAB_SHARD_H
#define SHARDLAB_SHARD_H

#include <stddef.h>

#include "layout.h"

struct shard_layout {
    const struct model_layout *lay;
    int N, rank;
    size_t total_padded;  /* elements of a full (padded) buffer */
    size_t total_shard;   /* elements of a shard buffer: total_padded / N */
};

void shard_layout_init(struct shard_layout *s, const struct model_layout *lay, int N, int rank);

size_t shard_unit_padded(const struct shard_layout *s, int unit);  /* unit size rounded up to N */
size_t shard_unit_chunk(const struct shard_layout *s, int unit);   /* padded / N: one rank's slice */
size_t shard_padded_offset(const struct shard_layout *s, int unit); /* unit start in a full buffer */
size_t shard_offset(const struct shard_layout *s, int unit);        /* this rank's slice in a shard buffer */
size_t shard_max_unit_padded(const struct shard_layout *s);         /* the largest padded unit */
/* ZeRO-2/3's reduce-scatter bucket: the largest padded unit, then (N > 1)
 * one largest slice where the MPI table's ring receives
 * (parallel/comm/comm_mpi_ring.c), so no reduction runs in untracked memory */
size_t shard_bucket_elems(const struct shard_layout *s);

/* The part of unit `unit` that `rank` owns, in unit-local element indices,
 * clipped to the real (unpadded) unit: [*lo, *hi), possibly empty. */
void shard_owned(const struct shard_layout *s, int unit, int rank, size_t *lo, size_t *hi);

#endif
