/* ---- 8-bit states as they are (the 8-bit rules) --------------------------
 * Besides the dequantized fp32 states (which let any grid load them), the
 * state of an 8-bit rule (adamw8bit, sgd8bit, lion8bit) holds the codes and block absmax unchanged, with the
 * grid layout that wrote them: a run of the same layout takes those and
 * continues bit for bit; another requantizes from fp32 (and says so).
 * Blocks follow each holder's shards, so only the whole layout reproduces
 * them: dp, ZeRO stage, min_8bit_size, tp, pp and the stage split. Sections:
 *   optim8_layout            u8, RAW_KEYS int32: dp, ZeRO stage, min_8bit_size,
 *                            tp, pp, a digest of the stage split
 *   optim8_codes1, _codes2   u8, one per reference element (0 for fp32-state
 *                            tensors), then tp's extra vocabulary padding rows,
 *                            then (pp > 1) the head's copy of wte the same way:
 *                            its codes follow its own blocks, not the embedding's
 *   optim8_absmax1, _absmax2 fp32, every holder's blocks (zero_raw_block_table),
 *                            holders in (stage, tp rank) order
 *   (a rule with one state, sgd8bit and lion8bit: _codes2 and _absmax2 empty)
 * Moved like the other sections: gathered over each holder's dp group and
 * sent to world rank 0, which writes (train/ckpt/ckpt_grid.h), in staging of
 * the model's space that files see through its host side
 * (train/ckpt/ckpt_staging.h). */
#include "ckpt_state_raw.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ckpt_grid.h"
#include "ckpt_ref_runs.h"

static const char *const RAW_NAMES[RAW_SECTIONS] = {"optim8_layout", "optim8_codes1", "optim8_codes2",
                                                    "optim8_absmax1", "optim8_absmax2"};

/* FNV-1a over the first layer of each stage's chunks (one chunk but for
 * the interleaved schedule): the split of layers over stages. */
static int32_t split_digest(const struct trainer *tr) {
    uint32_t h = 2166136261u;
    for (int s = 0; s < tr->grid->pp; s++) {
        struct model_layout lay;
        bool ok = ckpt_holder_layout(tr->cfg, tr->grid, s, 0, &lay) == 0;
        for (int c = 0; c < (ok ? lay.rank.n_chunks : 1); c++) {
            int32_t l0 = ok ? lay.rank.chunk[c].l0 : -1;
            const unsigned char *b = (const unsigned char *)&l0;
            for (size_t i = 0; i < sizeof l0; i++) h = (h ^ b[i]) * 16777619u;
        }
    }
    return (int32_t)h;
}

static void raw_key(const struct trainer *tr, int32_t key[RAW_KEYS]) {
    const struct grid *g = tr->grid;
    key[0] = g->dp_comm.size, key[1] = tr->cfg->zero, key[2] = tr->cfg->min_8bit_size;
    key[3] = g->tp, key[4] = g->pp, key[5] = split_digest(tr);
}

/* The rule's 8-bit states: 1 or 2. */
static int states(const struct trainer *tr) { return optim_rule(tr->cfg->optimizer)->states; }

static int holders(const struct trainer *tr) { return tr->grid->pp * tr->grid->tp; }
static int holder_index(const struct grid *g, int s, int t) { return s * g->tp + t; }

int raw_plan(struct trainer *tr, struct raw_plan *p) {
    *p = (struct raw_plan){.on = optim_rule(tr->cfg->optimizer)->quantized};
    if (!p->on) return 0;
    raw_key(tr, p->key);
    struct zero *z = &tr->engine.z;
    struct grid *g = tr->grid;
    const int H = holders(tr);
    size_t cells = (size_t)tr->engine.lay.n_units * (size_t)zero_raw_ranks(z) + 1;
    p->first = mem_alloc(&tr->mem, MEM_HOST, MEM_SCRATCH, "8-bit block table (resume)", cells * sizeof *p->first);
    p->base = mem_alloc(&tr->mem, MEM_HOST, MEM_SCRATCH, "8-bit holder blocks (resume)", (size_t)(H + 1) * sizeof *p->base);
    double *count = mem_alloc(&tr->mem, MEM_HOST, MEM_SCRATCH, "8-bit holder counts (resume)", (size_t)H * sizeof *count);
    p->failed = !p->first || !p->base || !count || zero_raw_block_table(z, p->first) != 0 ||
                ckpt_staging_over(&p->span, &tr->mem, tr->space, "8-bit block span", p->span_host,
                                  sizeof p->span_host) != 0;
    /* agreed first, so every rank makes the same calls below */
    double failed = p->failed;
    grid_sum_uncounted(g, &failed, 1);
    if (failed == 0.0) {
        /* every holder's block count, from its source, summed over the world */
        for (int h = 0; h < H; h++) count[h] = 0.0;
        if (g->dp_comm.rank == 0) count[holder_index(g, g->pp_rank, g->tp_rank)] = (double)p->first[cells - 1];
        grid_sum_uncounted(g, count, H);
        size_t at = 0;
        for (int h = 0; h < H; h++) p->base[h] = at, at += (size_t)count[h];
        p->base[H] = at;
    }
    mem_free(&tr->mem, count);
    return failed != 0.0 ? -1 : 0;
}

void raw_free(struct trainer *tr, struct raw_plan *p) {
    mem_free(&tr->mem, p->first);
    mem_free(&tr->mem, p->base);
    ckpt_staging_free(&p->span, &tr->mem);
    p->first = NULL, p->base = NULL;
}

/* Elements of tp's extra vocabulary padding rows (0 at tp 1). */
static size_t pad_elems(const struct model_layout *lay) {
    return (size_t)(lay->shape.Vp - reference_vocab(&lay->shape)) * (size_t)lay->shape.C;
}

static size_t codes_numel(const struct trainer *tr) {
    const struct model_layout *lay = &tr->engine.lay;
    size_t n = lay->ref_total + pad_elems(lay);
    /* the head's copy of a tied wte (gpt2 on several stages) */
    if (tr->grid->pp > 1 && shape_tied(&lay->shape))
        n += (size_t)reference_vocab(&lay->shape) * (size_t)lay->shape.C + pad_elems(lay);
    return n;
}

void raw_decls(const struct trainer *tr, const struct raw_plan *p, struct state_decl d[RAW_SECTIONS]) {
    size_t blocks = p->base[holders(tr)];
    const bool two = states(tr) == 2;
    size_t numel[RAW_SECTIONS] = {RAW_KEYS * sizeof(int32_t), codes_numel(tr), two ? codes_numel(tr) : 0, blocks,
                                  two ? blocks : 0};
    for (int i = 0; i < RAW_SECTIONS; i++) {
        d[i] = (struct state_decl){.dtype = i == 0 || i == 1 || i == 2 ? DTYPE_U8 : DTYPE_FP32, .numel = numel[i]};
        snprintf(d[i].name, sizeof d[i].name, "%s", RAW_NAMES[i]);
    }
}

/* Where the code of reference element ref of tensor t lies in a codes
 * section: at ref (padding rows past ref_total, in order), and the head's
 * copy of wte after those, laid out the same way. */
static size_t code_index(const struct model_layout *lay, const struct tensor_info *t, size_t ref) {
    if (!(t->kind == UNIT_HEAD && t->id == HEAD_WTE)) return ref;
    size_t copy = lay->ref_total + pad_elems(lay), wte = (size_t)reference_vocab(&lay->shape) * (size_t)lay->shape.C;
    return ref < lay->ref_total ? copy + ref : copy + wte + (ref - lay->ref_total);
}

/* Whether holder lay's codes of tensor t go to the file: all but a
 * replicated tensor's at tp rank > 0 (tp rank 0 has the same). */
static bool codes_saved(const struct model_layout *lay, const struct tensor_info *t) {
    return lay->rank.tp_rank == 0 || t->split != SPLIT_REPLICATED;
}

/* Codes of unit u of holder lay (one byte per unit element) to or from
 * section `at`, run by run. */
static int codes_io(struct resume_writer *w, struct resume_reader *r, int at, const struct model_layout *lay, int u,
                    unsigned char *data, char e2[CKPT_ERR_LEN]) {
    size_t base = layout_unit_offset(lay, u);
    for (int k = 0; k < layout_num_tensors(lay); k++) {
        struct tensor_info t = layout_tensor(lay, k);
        if (t.unit != u || (w && !codes_saved(lay, &t))) continue;
        for (size_t i = 0, n, ref; i < t.numel; i += n) {
            n = ref_run(lay, &t, i, &ref);
            unsigned char *d = data + (t.offset - base + i);
            size_t pos = code_index(lay, &t, ref);
            if (w ? resume_write_at(w, at, pos, n, d, e2) : resume_read_at(r, at, pos, n, d, e2)) return -1;
        }
    }
    return 0;
}

int raw_save(struct trainer *tr, const struct raw_plan *p, struct resume_writer *w, int first_section, int rc,
             const struct ckpt_staging *st, char e2[CKPT_ERR_LEN]) {
    struct engine *e = &tr->engine;
    struct grid *g = tr->grid;
    const bool writer = g->world_rank == 0;
    const size_t R = (size_t)zero_raw_ranks(&e->z);
    if (writer && rc == 0) rc = resume_write_at(w, first_section, 0, sizeof p->key, p->key, e2);
    for (int q = 0; q < states(tr); q++) {
        enum zero_state which = q == 0 ? STATE_OPT1 : STATE_OPT2;
        for (int s = 0; s < g->pp; s++)
            for (int t = 0; t < g->tp; t++) {
                struct model_layout lay;
                if (ckpt_holder_layout(tr->cfg, g, s, t, &lay) != 0) continue; /* trainer_open refused it */
                bool mine = ckpt_is_holder(g, s, t);
                for (int u = 0; u < lay.n_units; u++) {
                    if (mine) zero_gather_unit_codes(&e->z, which, u, st->work, st->host);
                    ckpt_route_to_root(g, s, t, st->work, layout_unit_size(&lay, u));
                    if (writer && rc == 0) {
                        ckpt_staging_to_host(st, e->space, layout_unit_size(&lay, u));
                        rc = codes_io(w, NULL, first_section + 1 + q, &lay, u, st->host, e2);
                    }
                    /* the unit's blocks [a, b) of its holder's, then them */
                    uint64_t *span = p->span.host;
                    span[0] = span[1] = 0;
                    if (mine) {
                        zero_gather_unit_absmax(&e->z, which, u, p->first, st->work, st->host);
                        span[0] = p->first[(size_t)u * R], span[1] = p->first[(size_t)(u + 1) * R];
                    }
                    ckpt_staging_to_work(&p->span, e->space, sizeof p->span_host);
                    ckpt_route_to_root(g, s, t, p->span.work, sizeof p->span_host);
                    ckpt_staging_to_host(&p->span, e->space, sizeof p->span_host);
                    size_t blocks = (size_t)(span[1] - span[0]);
                    ckpt_route_to_root(g, s, t, st->work, blocks * sizeof(float));
                    size_t at = p->base[holder_index(g, s, t)] + (size_t)span[0];
                    if (writer && rc == 0 && blocks > 0) {
                        ckpt_staging_to_host(st, e->space, blocks * sizeof(float));
                        rc = resume_write_at(w, first_section + 3 + q, at, blocks, st->host, e2);
                    }
                }
            }
    }
    return rc;
}

/* The raw sections into this rank's states, unit by unit. */
static int load_codes(struct trainer *tr, struct resume_reader *r, const struct raw_plan *p,
                      const struct ckpt_staging *st, char e2[CKPT_ERR_LEN]) {
    struct engine *e = &tr->engine;
    const size_t R = (size_t)zero_raw_ranks(&e->z);
    struct state_decl d[RAW_SECTIONS];
    raw_decls(tr, p, d);
    int at[RAW_SECTIONS];
    for (int i = 1; i < RAW_SECTIONS; i++)
        if ((at[i] = resume_find(r, d[i].name, d[i].dtype, d[i].numel, e2)) < 0) return -1;
    size_t mine = p->base[holder_index(tr->grid, tr->grid->pp_rank, tr->grid->tp_rank)];
    int rc = 0;
    for (int q = 0; rc == 0 && q < states(tr); q++) {
        enum zero_state which = q == 0 ? STATE_OPT1 : STATE_OPT2;
        for (int u = 0; rc == 0 && u < e->lay.n_units; u++) {
            rc = codes_io(NULL, r, at[1 + q], &e->lay, u, st->host, e2);
            if (rc != 0) break;
            ckpt_staging_to_work(st, e->space, layout_unit_size(&e->lay, u));
            zero_scatter_unit_codes(&e->z, which, u, st->work);
            size_t a = p->first[(size_t)u * R], b = p->first[(size_t)(u + 1) * R];
            if (b > a) rc = resume_read_at(r, at[3 + q], mine + a, b - a, st->host, e2);
            if (rc != 0) break;
            ckpt_staging_to_work(st, e->space, (b - a) * sizeof(float));
            zero_scatter_unit_absmax(&e->z, which, u, p->first, st->work);
        }
    }
    return rc;
}

/* printf onto the end of out (len bytes), cut at its end. */
static void append(char *out, size_t len, const char *fmt, ...) {
    size_t n = strnlen(out, len);
    if (n + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + n, len - n, fmt, ap);
    va_end(ap);
}

/* "(dp a -> b, ZeRO a -> b" and whatever else of the key differs. */
static void describe_change(char *out, size_t len, const int32_t saved[RAW_KEYS], const int32_t mine[RAW_KEYS]) {
    out[0] = '\0';
    append(out, len, "8-bit states: requantized from fp32 for a new layout (dp %d -> %d, ZeRO %d -> %d", (int)saved[0],
           (int)mine[0], (int)saved[1], (int)mine[1]);
    if (saved[2] != mine[2]) append(out, len, ", min_8bit_size %d -> %d", (int)saved[2], (int)mine[2]);
    if (saved[3] != mine[3]) append(out, len, ", tp %d -> %d", (int)saved[3], (int)mine[3]);
    if (saved[4] != mine[4]) append(out, len, ", pp %d -> %d", (int)saved[4], (int)mine[4]);
    else if (saved[5] != mine[5]) append(out, len, ", another split of layers over stages");
    append(out, len, ")");
}

int raw_load(struct trainer *tr, struct resume_reader *r, const struct raw_plan *p, const struct ckpt_staging *st,
             char err[TRAINER_ERR_LEN]) {
    if (!p->on) return 0;
    char e2[CKPT_ERR_LEN];
    int32_t saved[RAW_KEYS];
    int at = resume_find(r, RAW_NAMES[0], DTYPE_U8, sizeof saved, e2);
    if (at < 0) {
        snprintf(tr->opt8_resume, sizeof tr->opt8_resume,
                 "8-bit states: requantized from fp32 (the state holds no 8-bit codes in this build's format)");
        return 0;
    }
    if (resume_read_at(r, at, 0, sizeof saved, saved, e2) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "loading resume state: %s", e2);
        return -1;
    }
    if (memcmp(saved, p->key, sizeof saved) != 0) {
        describe_change(tr->opt8_resume, sizeof tr->opt8_resume, saved, p->key);
        return 0;
    }
    if (load_codes(tr, r, p, st, e2) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "loading resume state: %s", e2);
        return -1;
    }
    snprintf(tr->opt8_resume, sizeof tr->opt8_resume, "8-bit states: loaded as saved (bit-exact)");
    return 0;
}
