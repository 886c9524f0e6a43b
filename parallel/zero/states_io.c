/* Moving a rank's model states (include/zero.h) in and out one unit at a
 * time, for checkpoints and initial values: which states a run has, a
 * unit's part that this rank keeps, the gather of a unit onto dp rank 0
 * and the scatter back (optimizer states as fp32: copied, or the 8-bit
 * codes dequantized and requantized), and the 8-bit states as they are.
 * Checkpoint traffic goes through coll_all_gather_uncounted: it is no
 * step's. The step itself is zero.c's and comm.c's. */
#include "zero_parts.h"

#include <string.h>

#include "bufops.h"

/* ---- checkpoints and initial values, one unit at a time */

static bool optstate_has(const struct zero *z, enum zero_state which) {
    /* adafactor: its second moment per element (V, factored_segment_moment),
     * and its first moment when it keeps one */
    const bool adafactor = z->o.optim.kind == OPTIM_ADAFACTOR;
    const int states = z->rule->states;
    if (which == STATE_OPT1) return states >= 1 || adafactor;
    if (which == STATE_OPT2) return states == 2 || (adafactor && z->o.optim.adafactor_beta1 > 0.0f);
    if (which == STATE_FACTORED) return adafactor;
    return true;
}

bool zero_has_state(const struct zero *z, enum zero_state which) {
    if (which == STATE_MASTER) return z->st.master != NULL;
    return which == STATE_PARAMS || optstate_has(z, which);
}

enum dtype zero_state_dtype(const struct zero *z, enum zero_state which) {
    return which == STATE_PARAMS ? z->o.param_dtype : DTYPE_FP32;
}

void zero_unit_stored(const struct zero *z, int u, size_t *lo, size_t *hi) {
    *lo = 0;
    *hi = layout_unit_size(z->lay, u);
    if (zero_params_sharded(z)) shard_owned(&z->sh, u, z->sh.rank, lo, hi);
}

/* The part of unit u this rank keeps of state `which`. */
static void kept(const struct zero *z, enum zero_state which, int u, size_t *lo, size_t *hi) {
    *lo = 0;
    *hi = layout_unit_size(z->lay, u);
    bool sharded = which == STATE_PARAMS ? zero_params_sharded(z) : zero_optim_sharded(z);
    if (sharded) shard_owned(&z->sh, u, z->sh.rank, lo, hi);
}

void zero_set_unit(struct zero *z, int u, size_t lo, size_t hi, const float *w) {
    size_t a, b;
    kept(z, STATE_PARAMS, u, &a, &b);
    buf_from_fp32(z->space, (char *)z->st.params + zero_param_index(z, u, a) * zero_psize(z), z->o.param_dtype, w + (a - lo), b - a);
    if (z->st.master) {
        kept(z, STATE_MASTER, u, &a, &b);
        buf_copy(z->space, z->st.master + zero_state_index(z, u, a), w + (a - lo), (b - a) * sizeof *w);
    }
    (void)hi;
}

/* The 8-bit forms go through optim.h's codec (adamw8bit_dequantize /
 * _quantize), which runs in the states' space (z->space); the fp32
 * states through buf_copy. Neither reads state memory here. */
_Static_assert((int)OPT8_BLOCK == (int)ADAMW8BIT_BLOCK, "segments and the 8-bit codec block alike");

static void optstate_segment_to_fp32(const struct zero *z, enum zero_state which, const struct opt_segment *g, float *d) {
    bool first = which == STATE_OPT1;
    size_t n = g->hi - g->lo;
    if (which == STATE_FACTORED) {
        factored_segment_raw(z, g, d);
        return;
    }
    if (first && z->o.optim.kind == OPTIM_ADAFACTOR) {
        factored_segment_moment(z, g, d);
        return;
    }
    if (!g->quantized) {
        buf_copy(z->space, d, (first ? z->st.s1 : z->st.s2) + zero_opt_f32_index(z, g), n * sizeof *d);
        return;
    }
    adamw8bit_dequantize(z->space, first ? z->qmap_signed : z->qmap_unsigned,
                         (first ? z->st.q1 : z->st.q2) + g->q_offset,
                         (first ? z->st.absmax1 : z->st.absmax2) + g->block_offset, n, d);
}

/* The inverse: copy, or quantize block by block (absmax = max |x|).
 * (Adafactor's V is taken a unit at a time: zero_scatter_unit.) */
static void optstate_segment_from_fp32(struct zero *z, enum zero_state which, const struct opt_segment *g, const float *s) {
    bool first = which == STATE_OPT1;
    size_t n = g->hi - g->lo;
    if (!g->quantized) {
        buf_copy(z->space, (first ? z->st.s1 : z->st.s2) + zero_opt_f32_index(z, g), s, n * sizeof *s);
        return;
    }
    adamw8bit_quantize(z->space, first ? z->qmap_signed : z->qmap_unsigned,
                       first ? z->qindex_signed : z->qindex_unsigned, s, n, (first ? z->st.q1 : z->st.q2) + g->q_offset,
                       (first ? z->st.absmax1 : z->st.absmax2) + g->block_offset);
}

/* Optimizer state `which` of unit u, this rank's kept part [lo, hi), as
 * fp32 into dst (indexed from lo), segment by segment. */
static void opt_unit_to_fp32(const struct zero *z, enum zero_state which, int u, size_t lo, float *dst) {
    for (int k = 0; k < z->segs.n; k++) {
        const struct opt_segment *g = &z->segs.seg[k];
        if (g->unit == u) optstate_segment_to_fp32(z, which, g, dst + (g->lo - lo));
    }
}

void zero_gather_unit(struct zero *z, enum zero_state which, int u, void *work) {
    size_t lo, hi, chunk = shard_unit_chunk(&z->sh, u);
    kept(z, which, u, &lo, &hi);
    enum dtype dt = zero_state_dtype(z, which);
    size_t elem = dtype_size(dt);
    bool sharded = which == STATE_PARAMS ? zero_params_sharded(z) : zero_optim_sharded(z);
    /* this rank's kept part, in dtype, at its place in the padded unit */
    char *w = work;
    buf_zero(z->space, w, shard_unit_padded(&z->sh, u) * elem);
    char *mine = w + lo * elem;
    if (which == STATE_PARAMS) buf_copy(z->space, mine, (const char *)z->st.params + zero_param_index(z, u, lo) * elem, (hi - lo) * elem);
    else if (which == STATE_MASTER) buf_copy(z->space, mine, z->st.master + zero_state_index(z, u, lo), (hi - lo) * elem);
    else opt_unit_to_fp32(z, which, u, lo, (float *)mine);
    if (sharded) {
        coll_all_gather_uncounted(z->dp, w, chunk, dt); /* checkpoint traffic is not a step's */
    }
}

void zero_scatter_unit(struct zero *z, enum zero_state which, int u, const void *src) {
    size_t lo, hi;
    kept(z, which, u, &lo, &hi);
    size_t elem = dtype_size(zero_state_dtype(z, which));
    const char *s = (const char *)src + lo * elem;
    if (which == STATE_PARAMS) {
        buf_copy(z->space, (char *)z->st.params + zero_param_index(z, u, lo) * elem, s, (hi - lo) * elem);
        return;
    }
    if (which == STATE_MASTER) {
        buf_copy(z->space, z->st.master + zero_state_index(z, u, lo), s, (hi - lo) * elem);
        return;
    }
    if (which == STATE_OPT1 && z->o.optim.kind == OPTIM_ADAFACTOR) { /* whole rows and columns at once */
        factored_load_unit(z, u, src);
        return;
    }
    if (which == STATE_FACTORED) {
        factored_load_raw_unit(z, u, src);
        return;
    }
    for (int k = 0; k < z->segs.n; k++) {
        const struct opt_segment *g = &z->segs.seg[k];
        if (g->unit == u) optstate_segment_from_fp32(z, which, g, (const float *)src + g->lo);
    }
}

/* ---- 8-bit states as they are, one unit at a time */

void zero_states_loaded(struct zero *z, bool as_saved) {
    if (z->o.optim.kind == OPTIM_ADAFACTOR) factored_loaded(z, as_saved);
}

int zero_raw_ranks(const struct zero *z) { return zero_optim_sharded(z) ? z->dp->size : 1; }

static size_t seg_blocks(const struct opt_segment *g) { return (g->hi - g->lo + OPT8_BLOCK - 1) / OPT8_BLOCK; }

/* Adds the absmax count of each unit of segments s into count[u * R + r]. */
static void count_blocks(const struct opt_segments *s, int R, int r, size_t *count) {
    for (int k = 0; k < s->n; k++)
        if (s->seg[k].quantized) count[(size_t)s->seg[k].unit * (size_t)R + (size_t)r] += seg_blocks(&s->seg[k]);
}

int zero_raw_block_table(struct zero *z, size_t *first) {
    const int R = zero_raw_ranks(z), U = z->lay->n_units;
    size_t cells = (size_t)U * (size_t)R;
    for (size_t i = 0; i <= cells; i++) first[i] = 0;
    if (R == 1) {
        count_blocks(&z->segs, 1, 0, first);
    } else {
        /* every rank's segments, as that rank builds them */
        struct opt_segment *table = mem_alloc(z->mem, MEM_HOST, MEM_SCRATCH, "8-bit block table (one rank's segments)",
                                              opt_segments_capacity(z->lay) * sizeof *table);
        if (!table) return -1;
        for (int r = 0; r < R; r++) {
            struct shard_layout sh;
            struct opt_segments segs;
            shard_layout_init(&sh, z->lay, R, r);
            opt_segments_build(&segs, table, z->lay, &sh, z->row, &z->o.optim);
            count_blocks(&segs, R, r, first);
        }
        mem_free(z->mem, table);
    }
    /* counts to starts */
    size_t at = 0;
    for (size_t i = 0; i <= cells; i++) {
        size_t c = i < cells ? first[i] : 0;
        first[i] = at;
        at += c;
    }
    return 0;
}

static uint8_t *codes_of(const struct zero *z, enum zero_state which) { return which == STATE_OPT1 ? z->st.q1 : z->st.q2; }
static float *absmax_of(const struct zero *z, enum zero_state which) {
    return which == STATE_OPT1 ? z->st.absmax1 : z->st.absmax2;
}

/* The gathered rank slots of work compacted in place by memmove, which
 * needs the bytes on the host: done in host, a host mirror of work's
 * first `mirror` bytes when work is device memory (copied there and back:
 * `back` bytes of the result), or work itself. */
static void *compact_begin(const struct zero *z, void *work, void *host, size_t mirror) {
    if (host != work) buf_copy(z->space, host, work, mirror);
    return host;
}
static void compact_end(const struct zero *z, void *work, const void *host, size_t back) {
    if (host != work) buf_copy(z->space, work, host, back);
}

void zero_gather_unit_codes(struct zero *z, enum zero_state which, int u, void *work, void *host) {
    const bool sharded = zero_optim_sharded(z);
    const size_t chunk = shard_unit_chunk(&z->sh, u), R = (size_t)zero_raw_ranks(z);
    /* each rank's slice of bytes in a slot of whole fp32 words, so the
     * all-gather (which moves fp32) carries it unchanged */
    const size_t slot = sharded ? (chunk + 3) / 4 * 4 : shard_unit_padded(&z->sh, u);
    const size_t origin = sharded ? (size_t)z->sh.rank * chunk : 0; /* unit element of the slot's byte 0 */
    unsigned char *w = work, *mine = w + (sharded ? (size_t)z->sh.rank * slot : 0);
    buf_zero(z->space, w, R * slot);
    for (int k = 0; k < z->segs.n; k++) {
        const struct opt_segment *g = &z->segs.seg[k];
        if (g->unit == u && g->quantized) buf_copy(z->space, mine + (g->lo - origin), codes_of(z, which) + g->q_offset, g->hi - g->lo);
    }
    if (!sharded) return;
    coll_all_gather_uncounted(z->dp, w, slot / 4, DTYPE_FP32); /* checkpoint traffic */
    /* slots to slices */
    unsigned char *h = compact_begin(z, work, host, R * slot);
    for (size_t r = 1; r < R; r++) memmove(h + r * chunk, h + r * slot, chunk);
    compact_end(z, work, h, R * chunk);
}

void zero_gather_unit_absmax(struct zero *z, enum zero_state which, int u, const size_t *first, void *work,
                             void *host) {
    const bool sharded = zero_optim_sharded(z);
    const size_t chunk = shard_unit_chunk(&z->sh, u), R = (size_t)zero_raw_ranks(z), row = (size_t)u * R;
    float *w = work, *mine = w + (sharded ? (size_t)z->sh.rank * chunk : 0);
    /* a rank's blocks of the unit are fewer than its elements of it: a slice holds them */
    size_t n = 0;
    for (int k = 0; k < z->segs.n; k++) {
        const struct opt_segment *g = &z->segs.seg[k];
        if (g->unit != u || !g->quantized) continue;
        buf_copy(z->space, mine + n, absmax_of(z, which) + g->block_offset, seg_blocks(g) * sizeof *w);
        n += seg_blocks(g);
    }
    if (!sharded) return;
    coll_all_gather_uncounted(z->dp, w, chunk, DTYPE_FP32); /* checkpoint traffic */
    float *h = compact_begin(z, work, host, R * chunk * sizeof *w);
    for (size_t r = 1; r < R; r++)
        memmove(h + (first[row + r] - first[row]), h + r * chunk, (first[row + r + 1] - first[row + r]) * sizeof *h);
    compact_end(z, work, h, (first[row + R] - first[row]) * sizeof *h);
}

void zero_scatter_unit_codes(struct zero *z, enum zero_state which, int u, const void *src) {
    const unsigned char *s = src;
    for (int k = 0; k < z->segs.n; k++) {
        const struct opt_segment *g = &z->segs.seg[k];
        if (g->unit == u && g->quantized) buf_copy(z->space, codes_of(z, which) + g->q_offset, s + g->lo, g->hi - g->lo);
    }
}

void zero_scatter_unit_absmax(struct zero *z, enum zero_state which, int u, const size_t *first, const void *src) {
    const size_t R = (size_t)zero_raw_ranks(z), row = (size_t)u * R, r = R == 1 ? 0 : (size_t)z->sh.rank;
    const float *s = (const float *)src + (first[row + r] - first[row]);
    for (int k = 0; k < z->segs.n; k++) {
        const struct opt_segment *g = &z->segs.seg[k];
        if (g->unit != u || !g->quantized) continue;
        buf_copy(z->space, absmax_of(z, which) + g->block_offset, s, seg_blocks(g) * sizeof *s);
        s += seg_blocks(g);
    }
}
