/* A set of half-open ranges [lo, hi) of integers, kept sorted, disjoint and
 * merged (touching ranges become one). A file written in pieces records
 * each piece here, so "was every element written?" is a question about one
 * gap, not a bitmap over the file: pieces that arrive roughly in order keep
 * the set a handful of ranges long. */
#ifndef SHARDLAB_RANGESET_H
#define SHARDLAB_RANGESET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct range {
    uint64_t lo, hi;
};

struct range_set {
    struct range *r;
    size_t n, cap;
};

void range_set_init(struct range_set *s);
void range_set_free(struct range_set *s);
/* Adds [lo, hi) (overlaps are fine: the union is kept). -1 when out of memory. */
int range_set_add(struct range_set *s, uint64_t lo, uint64_t hi);
/* The first sub-range of [lo, hi) that no range covers; false when none. */
bool range_set_first_gap(const struct range_set *s, uint64_t lo, uint64_t hi, struct range *gap);

#endif
