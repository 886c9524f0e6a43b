/* Resume states: the model states plus the loop's position, bit-exact. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "checkpoint.h"
#include "ckpt_grid.h"
#include "ckpt_staging.h"
#include "ckpt_ref_runs.h"
#include "ckpt_state_raw.h"
#include "factored.h"
#include "../measure/trainer.h"

/* FNV-1a over what must not change across a resume. The batch enters as
 * the global batch (micro_batch x grad_accum x dp), so a state moves
 * between layouts that split the same batch differently. */
static uint32_t fingerprint(const struct config *c, int dp) {
    int keys[] = {c->n_layer,        c->d_model,         c->n_head,          c->seq_len,
                  c->vocab_size,     (int)c->param_dtype, (int)c->grad_dtype, (int)c->optimizer,
                  c->micro_batch * c->grad_accum * dp};
    uint32_t h = 2166136261u;
    const unsigned char *p = (const unsigned char *)keys;
    for (size_t i = 0; i < sizeof keys; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

/* The training data as this run's loader read it (data_content: by
 * contents, so the same files under another path are the same data, and
 * a file changed in place is not). */
static struct data_sources data_sources(const struct trainer *tr) {
    struct data_sources d = {.files = tr->train.content.files, .bytes = tr->train.content.bytes,
                             .digest = tr->train.content.digest, .of_contents = true};
    snprintf(d.pattern, sizeof d.pattern, "%s", tr->cfg->train_data);
    return d;
}

/* A resume state holds full, unsharded arrays in the model's reference
 * order, whatever the grid that wrote it: each holder's units (a pipeline
 * stage and tp rank, train/ckpt/ckpt_grid.h) are gathered over its dp group
 * one at a time and sent to world rank 0, which writes them; on load every
 * rank reads the units it holds and keeps its part. The head's copy of wte
 * (pp > 1) is saved once, as wte (from the embedding: the copies stay
 * equal, their gradients being summed), and loaded into both. No rank
 * holds more than one unit beyond its own shards. The staging lives where
 * the model does and files see its host side (train/ckpt/ckpt_staging.h). */
enum { MAX_SECTIONS = 5 };

static const struct {
    const char *name;
    enum zero_state which;
} STATES[MAX_SECTIONS] = {
    {"params", STATE_PARAMS}, {"master", STATE_MASTER}, {"optim_state1", STATE_OPT1}, {"optim_state2", STATE_OPT2},
    {"adafactor_stats_tp%d", STATE_FACTORED}};

/* The sections this run's states have; returns how many. which[i] is the
 * state of section i. Adafactor's statistics as they are
 * (parallel/zero/factored.c) are in the slices' coordinates: their
 * section is named by the tp that wrote them, and a run at another tp
 * does not find it (its R and C are re-derived from optim_state1's V);
 * a shape that cannot hold them (factored_raw_usable) saves none. */
static int sections(const struct engine *e, struct state_decl d[MAX_SECTIONS], enum zero_state which[MAX_SECTIONS]) {
    int n = 0;
    for (int i = 0; i < MAX_SECTIONS; i++) {
        if (!zero_has_state(&e->z, STATES[i].which)) continue;
        if (STATES[i].which == STATE_FACTORED && !factored_raw_usable(&e->lay)) continue;
        d[n] = (struct state_decl){.dtype = zero_state_dtype(&e->z, STATES[i].which), .numel = e->lay.ref_total};
        snprintf(d[n].name, sizeof d[n].name, STATES[i].name, e->lay.rank.tp);
        which[n++] = STATES[i].which;
    }
    return n;
}

/* The keys besides the shape that a resume must share (the fingerprint's),
 * kept as they are in a section of their own, so that a refusal names the
 * key that differs; a state without the section (older) gets the
 * fingerprint's general message. */
enum { KEY_PARAM_DTYPE, KEY_GRAD_DTYPE, KEY_OPTIMIZER, KEY_GLOBAL_BATCH, RUN_KEYS };
static const char RUN_KEYS_SECTION[] = "run_keys";

/* The global batch as one number: a state is byte-equal whatever grid
 * wrote it (micro_batch x grad_accum x dp may be split differently). */
static void run_keys(const struct config *c, int dp, int32_t k[RUN_KEYS]) {
    k[KEY_PARAM_DTYPE] = (int32_t)c->param_dtype, k[KEY_GRAD_DTYPE] = (int32_t)c->grad_dtype;
    k[KEY_OPTIMIZER] = (int32_t)c->optimizer, k[KEY_GLOBAL_BATCH] = c->micro_batch * c->grad_accum * dp;
}

static struct state_decl run_keys_decl(void) {
    struct state_decl d = {.dtype = DTYPE_U8, .numel = RUN_KEYS * sizeof(int32_t)};
    snprintf(d.name, sizeof d.name, "%s", RUN_KEYS_SECTION);
    return d;
}

uint64_t trainer_state_bytes(const struct trainer *tr) {
    struct state_decl d[MAX_SECTIONS + 1];
    enum zero_state which[MAX_SECTIONS];
    int n = sections(&tr->engine, d, which);
    d[n++] = run_keys_decl();
    return resume_file_bytes(d, n);
}

/* Whether holder lay saves tensor t: not the head's copy of wte, and a
 * replicated tensor from tp rank 0 alone. */
static bool saves(const struct model_layout *lay, const struct tensor_info *t) {
    return !(t->kind == UNIT_HEAD && t->id == HEAD_WTE) && (lay->rank.tp_rank == 0 || t->split != SPLIT_REPLICATED);
}

static bool unit_saves(const struct model_layout *lay, int u) {
    for (int k = 0; k < layout_num_tensors(lay); k++) {
        struct tensor_info t = layout_tensor(lay, k);
        if (t.unit == u && saves(lay, &t)) return true;
    }
    return false;
}

/* Unit u of holder lay (elem bytes an element, as the gather leaves it)
 * into section i, run by run at its reference places (tp's extra
 * vocabulary padding rows are in no state). */
static int write_unit(struct resume_writer *w, int i, const struct model_layout *lay, int u, const char *data,
                      size_t elem, char e2[CKPT_ERR_LEN]) {
    size_t base = layout_unit_offset(lay, u);
    for (int k = 0; k < layout_num_tensors(lay); k++) {
        struct tensor_info t = layout_tensor(lay, k);
        if (t.unit != u || !saves(lay, &t)) continue;
        for (size_t j = 0, n, ref; j < t.numel; j += n) {
            n = ref_run(lay, &t, j, &ref);
            if (ref < lay->ref_total && resume_write_at(w, i, ref, n, data + (t.offset - base + j) * elem, e2) != 0)
                return -1;
        }
    }
    return 0;
}

/* This rank's unit u from section `at`: every tensor, the head's copy of
 * wte from wte; padding rows zero. */
static int read_unit(struct resume_reader *r, int at, const struct model_layout *lay, int u, char *data, size_t elem,
                     char e2[CKPT_ERR_LEN]) {
    size_t base = layout_unit_offset(lay, u);
    for (int k = 0; k < layout_num_tensors(lay); k++) {
        struct tensor_info t = layout_tensor(lay, k);
        if (t.unit != u) continue;
        for (size_t j = 0, n, ref; j < t.numel; j += n) {
            n = ref_run(lay, &t, j, &ref);
            char *d = data + (t.offset - base + j) * elem;
            if (ref >= lay->ref_total) memset(d, 0, n * elem);
            else if (resume_read_at(r, at, ref, n, d, e2) != 0) return -1;
        }
    }
    return 0;
}

/* Collective: section i (state `which`) from every holder to world rank 0,
 * which writes it while rc is 0; returns rc updated. */
static int save_section(struct trainer *tr, struct resume_writer *w, int i, enum zero_state which, size_t elem,
                        const struct ckpt_staging *st, int rc, char e2[CKPT_ERR_LEN]) {
    struct engine *e = &tr->engine;
    struct grid *g = tr->grid;
    for (int s = 0; s < g->pp; s++)
        for (int t = 0; t < g->tp; t++) {
            struct model_layout lay;
            if (ckpt_holder_layout(tr->cfg, g, s, t, &lay) != 0) continue; /* trainer_open refused it */
            for (int u = 0; u < lay.n_units; u++) {
                if (ckpt_is_holder(g, s, t)) zero_gather_unit(&e->z, which, u, st->work);
                if (!unit_saves(&lay, u)) continue;
                size_t bytes = ckpt_unit_elems(&lay, u, false) * elem;
                ckpt_route_to_root(g, s, t, st->work, bytes);
                if (g->world_rank != 0 || rc != 0) continue;
                ckpt_staging_to_host(st, e->space, bytes);
                rc = write_unit(w, i, &lay, u, st->host, elem, e2);
            }
        }
    return rc;
}

int trainer_save_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]) {
    struct engine *e = &tr->engine;
    struct state_decl d[MAX_SECTIONS + RAW_SECTIONS + 1];
    enum zero_state which[MAX_SECTIONS];
    int n = sections(e, d, which);
    struct raw_plan raw;
    raw_plan(tr, &raw);
    if (raw.failed) mem_failure_message(&tr->mem, err, TRAINER_ERR_LEN);
    if (trainer_agree(tr, raw.failed ? -1 : 0, err) != 0) {
        raw_free(tr, &raw);
        return -1;
    }
    if (raw.on) raw_decls(tr, &raw, d + n);
    int keys_at = n + (raw.on ? RAW_SECTIONS : 0); /* the last section */
    d[keys_at] = run_keys_decl();
    int32_t keys[RUN_KEYS];
    run_keys(tr->cfg, tr->grid->dp, keys);
    struct resume_meta meta = {.step = (uint64_t)tr->step,
                               .seed = (uint64_t)tr->cfg->seed,
                               .data_epoch = tr->train.pos.epoch,
                               .data_cursor = tr->train.pos.cursor,
                               .skipped_steps = (uint64_t)tr->skipped_steps,
                               .shape = tr->engine.lay.shape,
                               .fingerprint = fingerprint(tr->cfg, tr->grid->dp)};
    meta.shape.Vp = reference_vocab(&meta.shape); /* the reference's, not tp's padding */
    bool writer = tr->grid->world_rank == 0;
    struct resume_writer w = {0};
    char e2[CKPT_ERR_LEN] = "";
    meta.data = data_sources(tr);
    int rc = writer ? resume_create(&w, path, &meta, d, keys_at + 1, e2) : 0;
    struct ckpt_staging st;
    int got = ckpt_staging_alloc(&st, &tr->mem, tr->space, "resume state staging (one unit)",
                                 ckpt_staging_bytes(tr->cfg, tr->grid, engine_unit_staging_bytes(e)));
    if (got != 0) mem_failure_message(&tr->mem, err, TRAINER_ERR_LEN);
    if (trainer_agree(tr, got, err) != 0) {
        if (writer && rc == 0) resume_abort(&w);
        ckpt_staging_free(&st, &tr->mem);
        raw_free(tr, &raw);
        return -1;
    }
    /* every rank takes part in every gather and transfer, whatever
     * happened on world rank 0 */
    for (int i = 0; i < n; i++) rc = save_section(tr, &w, i, which[i], dtype_size(d[i].dtype), &st, rc, e2);
    if (raw.on) rc = raw_save(tr, &raw, &w, n, rc, &st, e2);
    if (writer && rc == 0) rc = resume_write_at(&w, keys_at, 0, sizeof keys, keys, e2);
    if (writer && rc == 0) rc = resume_commit(&w, e2);
    if (writer && rc != 0) resume_abort(&w);
    if (rc != 0)
        snprintf(err, TRAINER_ERR_LEN, "step %d: saving resume state: %s (any earlier file there is untouched)",
                 tr->step, e2);
    ckpt_staging_free(&st, &tr->mem);
    raw_free(tr, &raw);
    return trainer_agree(tr, rc, err);
}

/* Every section's units this rank holds, read and scattered into the
 * states one unit at a time; then the 8-bit states as saved, if they fit. */
static int read_sections(struct trainer *tr, struct resume_reader *r, const struct raw_plan *raw,
                         char err[TRAINER_ERR_LEN]) {
    struct engine *e = &tr->engine;
    struct state_decl d[MAX_SECTIONS];
    enum zero_state which[MAX_SECTIONS];
    int n = sections(e, d, which), rc = 0;
    char e2[CKPT_ERR_LEN];
    struct ckpt_staging st; /* read on the host, scattered from the model's space */
    if (ckpt_staging_alloc(&st, &tr->mem, tr->space, "resume state staging (one unit)",
                           engine_unit_staging_bytes(e)) != 0) {
        mem_failure_message(&tr->mem, err, TRAINER_ERR_LEN);
        return -1;
    }
    bool stats_as_saved = false;
    for (int i = 0; rc == 0 && i < n; i++) {
        int at = resume_find(r, d[i].name, d[i].dtype, d[i].numel, e2);
        if (which[i] == STATE_FACTORED) { /* at another tp, or an older state: none (re-derived) */
            stats_as_saved = at >= 0;
            if (!stats_as_saved) continue;
        }
        rc = at < 0 ? -1 : 0;
        for (int u = 0; rc == 0 && u < e->lay.n_units; u++) {
            rc = read_unit(r, at, &e->lay, u, st.host, dtype_size(d[i].dtype), e2);
            if (rc != 0) break;
            ckpt_staging_to_work(&st, e->space, layout_unit_size(&e->lay, u) * dtype_size(d[i].dtype));
            zero_scatter_unit(&e->z, which[i], u, st.work);
        }
    }
    if (rc != 0) snprintf(err, TRAINER_ERR_LEN, "loading resume state: %s", e2);
    if (rc == 0) rc = raw_load(tr, r, raw, &st, err);
    if (rc == 0 && tr->cfg->optimizer == OPTIM_ADAFACTOR) { /* parallel/zero/factored.c */
        zero_states_loaded(&e->z, stats_as_saved);
        if (stats_as_saved)
            snprintf(tr->opt8_resume, sizeof tr->opt8_resume,
                     "adafactor: R, C and v loaded as saved at tp = %d (bit-exact)", e->lay.rank.tp);
        else
            snprintf(tr->opt8_resume, sizeof tr->opt8_resume,
                     "adafactor: R and C re-derived from the saved second moment (row and column sums, equal up to "
                     "rounding): the state has none saved at tp = %d", e->lay.rank.tp);
    }
    ckpt_staging_free(&st, &tr->mem);
    return rc;
}

/* Appends to out what differs between the saved keys and this run's. */
static void name_changed_keys(const struct config *c, int dp, const int32_t saved[RUN_KEYS],
                              const int32_t mine[RUN_KEYS], char *out, size_t len) {
    static const struct { int at; const char *key; } choices[] = {
        {KEY_PARAM_DTYPE, "param_dtype"}, {KEY_GRAD_DTYPE, "grad_dtype"}, {KEY_OPTIMIZER, "optimizer"}};
    size_t used = strlen(out);
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++) {
        int at = choices[i].at;
        if (saved[at] != mine[at] && used < len)
            used += (size_t)snprintf(out + used, len - used, "; %s: saved %s, this run %s", choices[i].key,
                                     config_choice_name(choices[i].key, saved[at]),
                                     config_choice_name(choices[i].key, mine[at]));
    }
    if (saved[KEY_GLOBAL_BATCH] != mine[KEY_GLOBAL_BATCH] && used < len)
        snprintf(out + used, len - used,
                 "; the global batch (micro_batch x grad_accum x data-parallel ranks): saved %d, this run %d x %d x "
                 "%d = %d",
                 (int)saved[KEY_GLOBAL_BATCH], c->micro_batch, c->grad_accum, dp, (int)mine[KEY_GLOBAL_BATCH]);
}

/* A state's run_keys section, when it has one, is read whenever the state
 * is (resume_find checks its CRC32C), not only when the fingerprint
 * differs: a flipped bit there was accepted. Its keys must be this run's,
 * since the fingerprint already said they are. */
static int check_run_keys(const struct trainer *tr, struct resume_reader *r, const char *path,
                          char err[TRAINER_ERR_LEN]) {
    if (!resume_has(r, RUN_KEYS_SECTION)) return 0; /* an older state */
    int32_t saved[RUN_KEYS], mine[RUN_KEYS];
    char e2[CKPT_ERR_LEN];
    run_keys(tr->cfg, tr->grid->dp, mine);
    int at = resume_find(r, RUN_KEYS_SECTION, DTYPE_U8, sizeof saved, e2);
    if (at < 0 || resume_read_at(r, at, 0, sizeof saved, saved, e2) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "%s", e2);
        return -1;
    }
    if (memcmp(saved, mine, sizeof saved) == 0) return 0;
    snprintf(err, TRAINER_ERR_LEN, "%s: its run_keys section disagrees with its fingerprint (the state is corrupt)",
             path);
    return -1;
}

/* The state must be of this model, dtypes, optimizer and global batch. */
static int check_meta(const struct trainer *tr, struct resume_reader *r, const char *path,
                      const struct resume_meta *m, char err[TRAINER_ERR_LEN]) {
    const struct model_shape *have = &tr->engine.lay.shape;
    if (m->shape.L != have->L || m->shape.C != have->C || m->shape.NH != have->NH || m->shape.T != have->T ||
        m->shape.V != have->V) {
        snprintf(err, TRAINER_ERR_LEN,
                 "%s was saved with a different model: n_layer %d, d_model %d, n_head %d, seq_len %d, vocab_size %d "
                 "(this config: %d, %d, %d, %d, %d)",
                 path, m->shape.L, m->shape.C, m->shape.NH, m->shape.T, m->shape.V, have->L, have->C,
                 have->NH, have->T, have->V);
        return -1;
    }
    if (m->fingerprint != fingerprint(tr->cfg, tr->grid->dp)) {
        int32_t saved[RUN_KEYS], mine[RUN_KEYS];
        char which[TRAINER_ERR_LEN / 2] = "", e2[CKPT_ERR_LEN];
        run_keys(tr->cfg, tr->grid->dp, mine);
        int at = resume_find(r, RUN_KEYS_SECTION, DTYPE_U8, sizeof saved, e2);
        if (at >= 0 && resume_read_at(r, at, 0, sizeof saved, saved, e2) == 0)
            name_changed_keys(tr->cfg, tr->grid->dp, saved, mine, which, sizeof which);
        snprintf(err, TRAINER_ERR_LEN,
                 "%s was saved with a different dtype, optimizer or global batch%s; resume needs the same "
                 "param_dtype, grad_dtype, optimizer and micro_batch x grad_accum x ranks (the ZeRO stage and "
                 "the number of ranks may change)",
                 path, which);
        return -1;
    }
    if (check_run_keys(tr, r, path, err) != 0) return -1;
    if (m->seed != (uint64_t)tr->cfg->seed) {
        snprintf(err, TRAINER_ERR_LEN, "%s was saved with seed %llu, this run has seed %lld", path,
                 (unsigned long long)m->seed, tr->cfg->seed);
        return -1;
    }
    if (m->skipped_steps > (uint64_t)INT_MAX) {
        snprintf(err, TRAINER_ERR_LEN, "%s: %llu skipped steps recorded", path, (unsigned long long)m->skipped_steps);
        return -1;
    }
    if (m->step > (uint64_t)tr->cfg->steps) {
        snprintf(err, TRAINER_ERR_LEN, "%s is at step %llu, beyond steps = %d", path,
                 (unsigned long long)m->step, tr->cfg->steps);
        return -1;
    }
    if (m->step == (uint64_t)tr->cfg->steps && *tr->cfg->save_state) { /* as steps = 0 (config_validate) */
        snprintf(err, TRAINER_ERR_LEN,
                 "%s is at step %llu = steps: no step runs, so no resume state would be written to save_state "
                 "%.300s (raise steps, or drop save_state; save writes a model file without a step)",
                 path, (unsigned long long)m->step, tr->cfg->save_state);
        return -1;
    }
    return 0;
}

/* The state's data position means something only on the data it was saved
 * with: other train_data is refused unless allow_data_change, which the
 * log then says. */
static int check_data(const struct trainer *tr, const char *path, const struct data_sources *saved,
                      char err[TRAINER_ERR_LEN]) {
    struct data_sources now = data_sources(tr);
    bool sizes = now.files == saved->files && now.bytes == saved->bytes;
    if (sizes && !saved->of_contents) {
        if (tr->grid->world_rank == 0) {
            printf("resume: %s is a version-2 state, whose data digest is of paths, not contents: train_data was "
                   "checked by its file count and bytes only (%llu files, %llu bytes)\n",
                   path, (unsigned long long)now.files, (unsigned long long)now.bytes);
            fflush(stdout);
        }
        return 0;
    }
    if (sizes && now.digest == saved->digest) return 0;
    char what[TRAINER_ERR_LEN], digests[96] = "";
    if (sizes)
        snprintf(digests, sizeof digests, ", other contents: data digest 0x%08x, saved 0x%08x", (unsigned)now.digest,
                 (unsigned)saved->digest);
    snprintf(what, sizeof what,
             "%.300s was saved with train_data %.200s (%llu files, %llu bytes), this run's train_data %.200s is "
             "other data (%llu files, %llu bytes%s)",
             path, saved->pattern, (unsigned long long)saved->files, (unsigned long long)saved->bytes, now.pattern,
             (unsigned long long)now.files, (unsigned long long)now.bytes, digests);
    if (!tr->cfg->allow_data_change) {
        snprintf(err, TRAINER_ERR_LEN, "%.900s; pass --allow_data_change 1 to resume on it anyway", what);
        return -1;
    }
    if (tr->grid->world_rank == 0) {
        printf("resume: %s; continuing because allow_data_change = 1 (the data position is kept)\n", what);
        fflush(stdout);
    }
    return 0;
}

static int load_state(struct trainer *tr, const char *path, const struct raw_plan *raw, char err[TRAINER_ERR_LEN]) {
    struct resume_meta meta;
    struct resume_reader r;
    char e2[CKPT_ERR_LEN];
    /* Meta first: a state of another shape must be refused by the
     * fingerprint, not by whichever section size differs first. */
    if (resume_open(&r, path, &meta, e2) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "loading resume state: %s", e2);
        return -1;
    }
    int rc = check_meta(tr, &r, path, &meta, err);
    if (rc == 0) rc = check_data(tr, path, &meta.data, err);
    if (rc == 0) rc = read_sections(tr, &r, raw, err);
    resume_close(&r);
    if (rc != 0) return -1;
    struct loader_position pos = {meta.data_epoch, meta.data_cursor};
    char e3[DATA_ERR_LEN];
    if (loader_seek(&tr->train, pos, e3) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "%s: %s", path, e3);
        return -1;
    }
    tr->step = (int)meta.step;
    tr->skipped_steps = (int)meta.skipped_steps;
    engine_params_changed(&tr->engine);
    if (*tr->opt8_resume && tr->grid->world_rank == 0) printf("%s\n", tr->opt8_resume);
    return 0;
}

/* Every rank reads the file and keeps its part. The 8-bit plan first:
 * it is collective, and the reads that follow may fail on one rank. */
int trainer_load_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]) {
    struct raw_plan raw;
    raw_plan(tr, &raw);
    if (raw.failed) mem_failure_message(&tr->mem, err, TRAINER_ERR_LEN);
    int rc = trainer_agree(tr, raw.failed ? -1 : 0, err);
    if (rc == 0) rc = trainer_agree(tr, load_state(tr, path, &raw, err), err);
    raw_free(tr, &raw);
    return rc;
}
