/* Pipeline stages (parallel/pipeline/stages.c): which layers a stage holds, and so what a rank holds
 * (include/layout.h). The first stage holds the embedding, the last the
 * head; with one stage a rank holds both and the whole model. */
#ifndef SHARDLAB_PIPE_STAGES_H
#define SHARDLAB_PIPE_STAGES_H

#include <stddef.h>

#include "layout.h"

enum { PIPELINE_MAX_STAGES = 1024 }; /* the config's limit on pp */

/* Layers [*l0, *l1) of `stage` when L layers are split over pp stages:
 * evenly (counts NULL: the first L % pp stages take one layer more), or
 * counts[s] layers on stage s (they must sum to L, each >= 0). Returns 0,
 * or -1 when the split is impossible. */
int pipeline_stage_layers(int L, int pp, int stage, const int *counts, int *l0, int *l1);

/* What the rank at (pp_rank, tp_rank) holds with v virtual stages (the
 * interleaved schedule, Narayanan et al. 2021; v = 1 for the others): the
 * layers are split into pp x v model chunks (evenly, or counts[j] layers in
 * chunk j: pp x v counts), and rank s holds chunks s, s + pp, ...,
 * s + (v - 1) pp; chunk 0 (rank 0) holds the embedding, chunk pp v - 1
 * (rank pp - 1) the head. Returns -1 when the split is impossible or v is
 * outside 1..RANK_MAX_CHUNKS. */
int pipeline_rank_desc_v(int L, int pp, int v, int pp_rank, int tp, int tp_rank, const int *counts,
                         struct rank_desc *out);

/* "3,3,2" into counts[0..pp): exactly pp counts (pp x v model chunks'
 * under the interleaved schedule: the caller passes pp x v), each from 0 (a stage of
 * only the embedding or only the head) to L, summing to L. Returns 0, or -1 with the reason in err. */
int pipeline_parse_layers(const char *text, int pp, int L, int *counts, char *err, size_t err_len);

#endif
