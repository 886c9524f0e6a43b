#include "rangeset.h"

#include <stdlib.h>
#include <string.h>

void range_set_init(struct range_set *s) { *s = (struct range_set){0}; }

void range_set_free(struct range_set *s) {
    free(s->r);
    range_set_init(s);
}

/* Index of the first range that ends beyond x, or, with touching, the
 * first that ends at x or beyond. */
static size_t first_ending(const struct range_set *s, uint64_t x, bool touching) {
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        bool before = touching ? s->r[mid].hi < x : s->r[mid].hi <= x;
        if (before) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int range_set_add(struct range_set *s, uint64_t lo, uint64_t hi) {
    if (lo >= hi) return 0;
    /* Ranges that end at lo touch [lo, hi) and merge with it. */
    size_t i = first_ending(s, lo, true), j = i;
    struct range m = {lo, hi};
    /* Ranges i..j-1 overlap or touch [lo, hi): fold them into m. */
    for (; j < s->n && s->r[j].lo <= hi; j++) {
        if (s->r[j].lo < m.lo) m.lo = s->r[j].lo;
        if (s->r[j].hi > m.hi) m.hi = s->r[j].hi;
    }
    if (j == i) { /* nothing to merge with: insert at i */
        if (s->n == s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 16;
            struct range *r = realloc(s->r, cap * sizeof *r);
            if (!r) return -1;
            s->r = r, s->cap = cap;
        }
        memmove(s->r + i + 1, s->r + i, (s->n - i) * sizeof *s->r);
        s->n++;
    } else {
        memmove(s->r + i + 1, s->r + j, (s->n - j) * sizeof *s->r);
        s->n -= j - i - 1;
    }
    s->r[i] = m;
    return 0;
}

bool range_set_first_gap(const struct range_set *s, uint64_t lo, uint64_t hi, struct range *gap) {
    uint64_t at = lo; /* everything in [lo, at) is covered */
    for (size_t i = first_ending(s, lo, false); i < s->n && at < hi; i++) {
        if (s->r[i].lo > at) break;
        if (s->r[i].hi > at) at = s->r[i].hi;
    }
    if (at >= hi) return false;
    /* at is uncovered, so the first range ending beyond it starts beyond
     * it: the gap runs to that start or to hi. */
    size_t k = first_ending(s, at, false);
    uint64_t end = k < s->n && s->r[k].lo < hi ? s->r[k].lo : hi;
    *gap = (struct range){at, end};
    return true;
}
