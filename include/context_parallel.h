/* Context parallelism across folders: which positions of a sequence one
 * rank of a context-parallel group holds. The room is
 * model/context_parallel/ (docs/CP.md): split.c implements this header;
 * ring attention and the global positions of the embedding, which only
 * model/ calls, are in model/context_parallel/cp.h.
 *
 * The load-balanced causal split (as Megatron-LM and LLaMA 3 cut a
 * sequence for context parallelism): the T positions of every sequence
 * are cut into 2 cp chunks of c = T / (2 cp), and cp rank r holds chunks
 * r and 2 cp - 1 - r, in that order, as its T/cp local positions:
 *   local t < c     global r c + t
 *   local t >= c    global (2 cp - 1 - r) c + (t - c)
 * Under a causal mask a query at global position g sees g + 1 keys, so a
 * contiguous split would give rank cp - 1 almost 2 cp - 1 times rank 0's
 * attention work; pairing an early chunk with its mirror gives every rank
 * (2 cp - 1) c^2 + c (c + 1) query-key pairs per head and sequence (a
 * chunk pair r, 2 cp - 1 - r has 2 cp - 1 whole c x c blocks before it and
 * two causal diagonals). At cp = 1 the two chunks are [0, T): nothing
 * moves. Everything in a layer but attention works token by token, so a
 * rank runs it on its T/cp positions alone. */
#ifndef SHARDLAB_CONTEXT_PARALLEL_H
#define SHARDLAB_CONTEXT_PARALLEL_H

#include <stdint.h>

/* One rank's place in the split of a sequence of T positions. */
struct cp_split {
    int T, cp, rank;
};

/* Positions per chunk, c = T / (2 cp), and per rank, T / cp. */
int cp_chunk_len(struct cp_split s);
int cp_local_len(struct cp_split s);
/* The global position of local position t (0 <= t < T/cp). */
int cp_global_position(struct cp_split s, int t);

/* A stretch of local positions [local0, local0 + n) whose global positions
 * are consecutive, from global0. */
struct cp_run {
    int local0, global0, n;
};
enum { CP_MAX_RUNS = 2 };
/* The local positions [t0, t0 + n) as at most CP_MAX_RUNS runs (one per
 * chunk they touch). Returns the number of runs. */
int cp_position_runs(struct cp_split s, int t0, int n, struct cp_run runs[CP_MAX_RUNS]);

/* Of the T/cp positions rank s.rank holds, how many a query at global
 * position g sees under the causal mask (global position <= g). They are
 * always the first ones: a rank's positions rise with the local index, so
 * the visible keys of any query are a prefix [0, n) of the rank's local
 * keys (0: a fully masked block, skipped). */
int cp_visible_keys(struct cp_split s, int g);

/* In place: buf holds B sequences of T values, (B, T); on return its first
 * B T/cp values are this rank's positions of each, (B, T/cp), in local
 * order. Nothing moves at cp = 1. */
void cp_keep_positions(struct cp_split s, int32_t *buf, int B);

#endif
