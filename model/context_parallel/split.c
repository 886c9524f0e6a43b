/* The load-balanced causal split of a sequence over a context-parallel
 * group (include/context_parallel.h): chunks r and 2 cp - 1 - r of 2 cp. */
#include "context_parallel.h"

#include <string.h>

int cp_chunk_len(struct cp_split s) { return s.T / (2 * s.cp); }
int cp_local_len(struct cp_split s) { return s.T / s.cp; }

/* The chunk (of 2 cp) that holds local position t, and its first global position. */
static int chunk_start(struct cp_split s, int t) {
    int c = cp_chunk_len(s), chunk = t < c ? s.rank : 2 * s.cp - 1 - s.rank;
    return chunk * c;
}

int cp_global_position(struct cp_split s, int t) {
    int c = cp_chunk_len(s);
    return chunk_start(s, t) + t % c;
}

int cp_position_runs(struct cp_split s, int t0, int n, struct cp_run runs[CP_MAX_RUNS]) {
    int c = cp_chunk_len(s), k = 0;
    for (int t = t0; t < t0 + n;) {
        int end = (t / c + 1) * c; /* the end of t's chunk, local */
        if (end > t0 + n) end = t0 + n;
        int g = cp_global_position(s, t);
        /* at cp = 1 the two chunks are consecutive: one run */
        if (k > 0 && runs[k - 1].global0 + runs[k - 1].n == g) runs[k - 1].n += end - t;
        else runs[k++] = (struct cp_run){.local0 = t, .global0 = g, .n = end - t};
        t = end;
    }
    return k;
}

static int clamp(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

int cp_visible_keys(struct cp_split s, int g) {
    int c = cp_chunk_len(s);
    int early = s.rank * c, late = (2 * s.cp - 1 - s.rank) * c;
    return clamp(g - early + 1, 0, c) + clamp(g - late + 1, 0, c);
}

void cp_keep_positions(struct cp_split s, int32_t *buf, int B) {
    if (s.cp == 1) return;
    int Tl = cp_local_len(s), c = cp_chunk_len(s);
    /* in increasing order of destination: a value moves down (its global
     * position is at least its local one), never onto one still to be read */
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t += c)
            memmove(buf + (size_t)b * Tl + t, buf + (size_t)b * s.T + cp_global_position(s, t), (size_t)c * sizeof *buf);
}
