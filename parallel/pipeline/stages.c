/* The split of layers into pipeline stages (include/pipe_stages.h). */
#include "pipe_stages.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int pipeline_stage_layers(int L, int pp, int stage, const int *counts, int *l0, int *l1) {
    if (L < 0 || pp < 1 || stage < 0 || stage >= pp) return -1;
    if (!counts) {
        int base = L / pp, extra = L % pp;
        *l0 = stage * base + (stage < extra ? stage : extra);
        *l1 = *l0 + base + (stage < extra ? 1 : 0);
        return 0;
    }
    int sum = 0;
    for (int s = 0; s < pp; s++) {
        if (counts[s] < 0) return -1;
        if (s == stage) *l0 = sum;
        sum += counts[s];
        if (s == stage) *l1 = sum;
    }
    return sum == L ? 0 : -1;
}

int pipeline_rank_desc_v(int L, int pp, int v, int pp_rank, int tp, int tp_rank, const int *counts,
                         struct rank_desc *out) {
    if (v < 1 || v > RANK_MAX_CHUNKS || pp < 1 || pp_rank < 0 || pp_rank >= pp) return -1;
    *out = rank_desc_range(0, 0, tp, tp_rank, pp_rank == 0, pp_rank == pp - 1);
    out->n_chunks = v;
    for (int c = 0; c < v; c++) { /* the rank's chunk c is the model's chunk c pp + pp_rank */
        struct layer_range *r = &out->chunk[c];
        if (pipeline_stage_layers(L, pp * v, c * pp + pp_rank, counts, &r->l0, &r->l1) != 0) return -1;
    }
    return 0;
}

int pipeline_parse_layers(const char *text, int pp, int L, int *counts, char *err, size_t err_len) {
    const char *p = text;
    int n = 0, sum = 0;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > L) {
            snprintf(err, err_len, "pp_layers \"%s\": each stage needs a count from 0 to n_layer = %d", text, L);
            return -1;
        }
        if (n == pp) {
            snprintf(err, err_len, "pp_layers \"%s\": more than pp = %d counts", text, pp);
            return -1;
        }
        counts[n++] = (int)v;
        sum += (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            snprintf(err, err_len, "pp_layers \"%s\": counts are separated by commas", text);
            return -1;
        }
    }
    if (n != pp || sum != L) {
        snprintf(err, err_len, "pp_layers \"%s\": %d counts summing to %d; %d stages (pp, or pp x virtual_stages under "
                 "the interleaved schedule) must sum to n_layer = %d", text, n, sum, pp, L);
        return -1;
    }
    return 0;
}
