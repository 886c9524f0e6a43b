/* Resume states: the model states plus the loop's position, bit-exact. */
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "crc32c.h"
#include "trainer.h"

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

/* What train_data matches now: every file's canonical path and size, so
 * the same files under another pattern or relative path are the same
 * data, and a file that grew or was replaced is not. */
static int data_sources(const char *pattern, struct data_sources *d, char err[TRAINER_ERR_LEN]) {
    *d = (struct data_sources){0};
    snprintf(d->pattern, sizeof d->pattern, "%s", pattern);
    glob_t g;
    if (glob(pattern, GLOB_ERR, NULL, &g) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "train_data %s: no file matches it any more", pattern);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) {
        char real[PATH_MAX], line[PATH_MAX + 32];
        struct stat st;
        if (!realpath(g.gl_pathv[i], real) || stat(real, &st) != 0) {
            snprintf(err, TRAINER_ERR_LEN, "train_data %s: %s", g.gl_pathv[i], strerror(errno));
            rc = -1;
            break;
        }
        int n = snprintf(line, sizeof line, "%s\t%lld\n", real, (long long)st.st_size);
        d->digest = crc32c(d->digest, line, (size_t)n);
        d->files++, d->bytes += (uint64_t)st.st_size;
    }
    globfree(&g);
    return rc;
}

/* A resume state holds full, unsharded arrays in the model's reference
 * order, whatever the layout that wrote it: N ranks at stage K gather one
 * unit at a time to rank 0, which writes it; M ranks at stage J each read
 * the units they hold and keep their part. No rank holds more than one
 * unit beyond its own shards. */
enum { MAX_SECTIONS = 4 };

static const struct {
    const char *name;
    enum zero_state which;
} STATES[MAX_SECTIONS] = {
    {"params", STATE_PARAMS}, {"master", STATE_MASTER}, {"optim_state1", STATE_OPT1}, {"optim_state2", STATE_OPT2}};

/* The sections this run's states have; returns how many. which[i] is the
 * state of section i. */
static int sections(const struct engine *e, struct state_decl d[MAX_SECTIONS], enum zero_state which[MAX_SECTIONS]) {
    int n = 0;
    for (int i = 0; i < MAX_SECTIONS; i++) {
        if (!zero_has_state(&e->z, STATES[i].which)) continue;
        d[n] = (struct state_decl){.dtype = zero_state_dtype(&e->z, STATES[i].which), .numel = e->lay.ref_total};
        snprintf(d[n].name, sizeof d[n].name, "%s", STATES[i].name);
        which[n++] = STATES[i].which;
    }
    return n;
}

uint64_t trainer_state_bytes(const struct trainer *tr) {
    struct state_decl d[MAX_SECTIONS];
    enum zero_state which[MAX_SECTIONS];
    int n = sections(&tr->engine, d, which);
    return resume_file_bytes(d, n);
}

/* Where tensor t's elements lie in a section (reference order). With
 * tp = 1 a tensor is contiguous there; the head's copy of wte is not
 * stored (the embedding's wte is). */
static bool section_place(const struct model_layout *lay, const struct tensor_info *t, size_t *first) {
    if (t->kind == UNIT_HEAD && t->id == HEAD_WTE) return false;
    *first = layout_ref_index(lay, t, 0);
    return true;
}

/* ---- 8-bit states as they are (adamw8bit) -------------------------------
 * Besides the dequantized fp32 states (which let any layout load them), an
 * adamw8bit state holds the codes and block absmax unchanged, with the
 * layout that wrote them: a run of the same layout takes those and
 * continues bit for bit; another requantizes from fp32. Sections:
 *   optim8_layout            u8, RAW_KEYS int32: dp size, ZeRO stage, min_8bit_size
 *   optim8_codes1, _codes2   u8, one per reference element (0 for fp32-state tensors)
 *   optim8_absmax1, _absmax2 fp32, the layout's blocks (zero_raw_block_table) */
enum { RAW_SECTIONS = 5, RAW_KEYS = 3 };

static const char *const RAW_NAMES[RAW_SECTIONS] = {"optim8_layout", "optim8_codes1", "optim8_codes2",
                                                    "optim8_absmax1", "optim8_absmax2"};

struct raw_plan {
    bool on, failed;
    int32_t key[RAW_KEYS];
    size_t *first; /* the block table, n_units x R + 1 */
};

static void raw_key(const struct trainer *tr, int32_t key[RAW_KEYS]) {
    key[0] = tr->grid->dp, key[1] = tr->cfg->zero, key[2] = tr->cfg->min_8bit_size;
}

static int raw_plan(struct trainer *tr, struct raw_plan *p) {
    *p = (struct raw_plan){.on = tr->cfg->optimizer == OPTIM_ADAMW8BIT};
    if (!p->on) return 0;
    raw_key(tr, p->key);
    struct zero *z = &tr->engine.z;
    size_t cells = (size_t)tr->engine.lay.n_units * (size_t)zero_raw_ranks(z) + 1;
    p->first = mem_alloc(&tr->mem, MEM_HOST, MEM_SCRATCH, "8-bit block table (resume)", cells * sizeof *p->first);
    p->failed = !p->first || zero_raw_block_table(z, p->first) != 0;
    return p->failed ? -1 : 0;
}

static void raw_free(struct trainer *tr, struct raw_plan *p) { mem_free(&tr->mem, p->first); }

static size_t raw_blocks(const struct trainer *tr, const struct raw_plan *p) {
    return p->first[(size_t)tr->engine.lay.n_units * (size_t)zero_raw_ranks(&tr->engine.z)];
}

static void raw_decls_of(const struct trainer *tr, const struct raw_plan *p, struct state_decl d[RAW_SECTIONS]) {
    size_t numel[RAW_SECTIONS] = {RAW_KEYS * sizeof(int32_t), tr->engine.lay.ref_total, tr->engine.lay.ref_total,
                                  raw_blocks(tr, p), raw_blocks(tr, p)};
    for (int i = 0; i < RAW_SECTIONS; i++) {
        d[i] = (struct state_decl){.dtype = i == 0 || i == 1 || i == 2 ? DTYPE_U8 : DTYPE_FP32, .numel = numel[i]};
        snprintf(d[i].name, sizeof d[i].name, "%s", RAW_NAMES[i]);
    }
}

/* Codes and absmax gathered one unit at a time (every rank takes part in
 * every gather, whatever happened on rank 0, which writes them). */
static int save_raw(struct trainer *tr, const struct raw_plan *p, struct resume_writer *w, int base, bool writer,
                    int rc, void *work, char e2[CKPT_ERR_LEN]) {
    struct engine *e = &tr->engine;
    const size_t R = (size_t)zero_raw_ranks(&e->z);
    if (writer && rc == 0) rc = resume_write_at(w, base, 0, sizeof p->key, p->key, e2);
    for (int s = 0; s < 2; s++) {
        enum zero_state which = s == 0 ? STATE_OPT1 : STATE_OPT2;
        for (int u = 0; u < e->lay.n_units; u++) {
            zero_gather_unit_codes(&e->z, which, u, work);
            size_t ubase = layout_unit_offset(&e->lay, u), first;
            for (int k = 0; writer && rc == 0 && k < layout_num_tensors(&e->lay); k++) {
                struct tensor_info t = layout_tensor(&e->lay, k);
                if (t.unit == u && section_place(&e->lay, &t, &first))
                    rc = resume_write_at(w, base + 1 + s, first, t.numel, (char *)work + (t.offset - ubase), e2);
            }
            zero_gather_unit_absmax(&e->z, which, u, p->first, work);
            size_t a = p->first[(size_t)u * R], b = p->first[(size_t)(u + 1) * R];
            if (writer && rc == 0 && b > a) rc = resume_write_at(w, base + 3 + s, a, b - a, work, e2);
        }
    }
    return rc;
}

/* The raw sections into this rank's states, unit by unit. */
static int load_raw(struct trainer *tr, struct resume_reader *r, const struct raw_plan *p, void *work,
                    char e2[CKPT_ERR_LEN]) {
    struct engine *e = &tr->engine;
    const size_t R = (size_t)zero_raw_ranks(&e->z);
    struct state_decl d[RAW_SECTIONS];
    raw_decls_of(tr, p, d);
    int at[RAW_SECTIONS];
    for (int i = 1; i < RAW_SECTIONS; i++)
        if ((at[i] = resume_find(r, d[i].name, d[i].dtype, d[i].numel, e2)) < 0) return -1;
    int rc = 0;
    for (int s = 0; rc == 0 && s < 2; s++) {
        enum zero_state which = s == 0 ? STATE_OPT1 : STATE_OPT2;
        for (int u = 0; rc == 0 && u < e->lay.n_units; u++) {
            size_t ubase = layout_unit_offset(&e->lay, u), first;
            for (int k = 0; rc == 0 && k < layout_num_tensors(&e->lay); k++) {
                struct tensor_info t = layout_tensor(&e->lay, k);
                if (t.unit == u && section_place(&e->lay, &t, &first))
                    rc = resume_read_at(r, at[1 + s], first, t.numel, (char *)work + (t.offset - ubase), e2);
            }
            if (rc == 0) zero_scatter_unit_codes(&e->z, which, u, work);
            size_t a = p->first[(size_t)u * R], b = p->first[(size_t)(u + 1) * R];
            if (rc == 0 && b > a) rc = resume_read_at(r, at[3 + s], a, b - a, work, e2);
            if (rc == 0) zero_scatter_unit_absmax(&e->z, which, u, p->first, work);
        }
    }
    return rc;
}

/* After the fp32 sections (which requantized the 8-bit states): the raw
 * ones instead, when this run's layout wrote them. Says which happened in
 * tr->opt8_resume. */
static int load_8bit_states(struct trainer *tr, struct resume_reader *r, void *work, char err[TRAINER_ERR_LEN]) {
    if (tr->cfg->optimizer != OPTIM_ADAMW8BIT) return 0;
    char e2[CKPT_ERR_LEN];
    int32_t saved[RAW_KEYS], mine[RAW_KEYS];
    raw_key(tr, mine);
    int at = resume_find(r, RAW_NAMES[0], DTYPE_U8, sizeof saved, e2);
    if (at < 0) {
        snprintf(tr->opt8_resume, sizeof tr->opt8_resume,
                 "8-bit states: requantized from fp32 (the state holds no 8-bit codes)");
        return 0;
    }
    if (resume_read_at(r, at, 0, sizeof saved, saved, e2) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "loading resume state: %s", e2);
        return -1;
    }
    if (memcmp(saved, mine, sizeof saved) != 0) {
        int n = snprintf(tr->opt8_resume, sizeof tr->opt8_resume,
                         "8-bit states: requantized from fp32 for a new layout (dp %d -> %d, ZeRO %d -> %d",
                         (int)saved[0], (int)mine[0], (int)saved[1], (int)mine[1]);
        if (saved[2] != mine[2] && n > 0 && (size_t)n < sizeof tr->opt8_resume)
            n += snprintf(tr->opt8_resume + n, sizeof tr->opt8_resume - (size_t)n, ", min_8bit_size %d -> %d",
                          (int)saved[2], (int)mine[2]);
        if (n > 0 && (size_t)n < sizeof tr->opt8_resume)
            snprintf(tr->opt8_resume + n, sizeof tr->opt8_resume - (size_t)n, ")");
        return 0;
    }
    struct raw_plan p;
    if (raw_plan(tr, &p) != 0) {
        mem_failure_message(&tr->mem, err, TRAINER_ERR_LEN);
        raw_free(tr, &p);
        return -1;
    }
    int rc = load_raw(tr, r, &p, work, e2);
    raw_free(tr, &p);
    if (rc != 0) {
        snprintf(err, TRAINER_ERR_LEN, "loading resume state: %s", e2);
        return -1;
    }
    snprintf(tr->opt8_resume, sizeof tr->opt8_resume, "8-bit states: loaded as saved (bit-exact)");
    return 0;
}

int trainer_save_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]) {
    struct engine *e = &tr->engine;
    struct state_decl d[MAX_SECTIONS + RAW_SECTIONS];
    enum zero_state which[MAX_SECTIONS];
    int n = sections(e, d, which);
    struct raw_plan raw;
    if (raw_plan(tr, &raw) != 0) mem_failure_message(&tr->mem, err, TRAINER_ERR_LEN);
    if (trainer_agree(tr, raw.failed ? -1 : 0, err) != 0) {
        raw_free(tr, &raw);
        return -1;
    }
    if (raw.on) raw_decls_of(tr, &raw, d + n);
    struct resume_meta meta = {.step = (uint64_t)tr->step,
                               .seed = (uint64_t)tr->cfg->seed,
                               .data_epoch = tr->train.pos.epoch,
                               .data_cursor = tr->train.pos.cursor,
                               .skipped_steps = (uint64_t)tr->skipped_steps,
                               .shape = tr->engine.lay.shape,
                               .fingerprint = fingerprint(tr->cfg, tr->grid->dp)};
    bool writer = tr->grid->world_rank == 0;
    struct resume_writer w = {0};
    char e2[CKPT_ERR_LEN] = "";
    int rc = writer ? data_sources(tr->cfg->train_data, &meta.data, err) : 0;
    if (rc != 0) snprintf(e2, sizeof e2, "%.*s", CKPT_ERR_LEN - 1, err);
    if (writer && rc == 0) rc = resume_create(&w, path, &meta, d, n + (raw.on ? RAW_SECTIONS : 0), e2);
    void *work = mem_alloc(&tr->mem, MEM_HOST, MEM_SCRATCH, "resume state staging (one unit)",
                           engine_unit_staging_bytes(e));
    if (!work) mem_failure_message(&tr->mem, err, TRAINER_ERR_LEN);
    if (trainer_agree(tr, work ? 0 : -1, err) != 0) {
        if (writer && rc == 0) resume_abort(&w);
        mem_free(&tr->mem, work);
        raw_free(tr, &raw);
        return -1;
    }
    /* every rank takes part in every gather, whatever happened on rank 0 */
    for (int i = 0; i < n; i++)
        for (int u = 0; u < e->lay.n_units; u++) {
            zero_gather_unit(&e->z, which[i], u, work);
            size_t base = layout_unit_offset(&e->lay, u), elem = dtype_size(d[i].dtype), first;
            for (int k = 0; writer && rc == 0 && k < layout_num_tensors(&e->lay); k++) {
                struct tensor_info t = layout_tensor(&e->lay, k);
                if (t.unit == u && section_place(&e->lay, &t, &first))
                    rc = resume_write_at(&w, i, first, t.numel, (char *)work + (t.offset - base) * elem, e2);
            }
        }
    if (raw.on) rc = save_raw(tr, &raw, &w, n, writer, rc, work, e2);
    if (writer && rc == 0) rc = resume_commit(&w, e2);
    if (writer && rc != 0) resume_abort(&w);
    if (rc != 0)
        snprintf(err, TRAINER_ERR_LEN, "step %d: saving resume state: %s (any earlier file there is untouched)",
                 tr->step, e2);
    mem_free(&tr->mem, work);
    raw_free(tr, &raw);
    return trainer_agree(tr, rc, err);
}

/* Every section's units this rank holds, read and scattered into the
 * states one unit at a time; then the 8-bit states as saved, if they fit. */
static int read_sections(struct trainer *tr, struct resume_reader *r, char err[TRAINER_ERR_LEN]) {
    struct engine *e = &tr->engine;
    struct state_decl d[MAX_SECTIONS];
    enum zero_state which[MAX_SECTIONS];
    int n = sections(e, d, which), rc = 0;
    char e2[CKPT_ERR_LEN];
    void *work = mem_alloc(&tr->mem, MEM_HOST, MEM_SCRATCH, "resume state staging (one unit)",
                           engine_unit_staging_bytes(e));
    if (!work) {
        mem_failure_message(&tr->mem, err, TRAINER_ERR_LEN);
        return -1;
    }
    for (int i = 0; rc == 0 && i < n; i++) {
        int at = resume_find(r, d[i].name, d[i].dtype, d[i].numel, e2);
        rc = at < 0 ? -1 : 0;
        for (int u = 0; rc == 0 && u < e->lay.n_units; u++) {
            size_t base = layout_unit_offset(&e->lay, u), elem = dtype_size(d[i].dtype), first;
            for (int k = 0; rc == 0 && k < layout_num_tensors(&e->lay); k++) {
                struct tensor_info t = layout_tensor(&e->lay, k);
                if (t.unit == u && section_place(&e->lay, &t, &first))
                    rc = resume_read_at(r, at, first, t.numel, (char *)work + (t.offset - base) * elem, e2);
            }
            if (rc == 0) zero_scatter_unit(&e->z, which[i], u, work);
        }
    }
    if (rc != 0) snprintf(err, TRAINER_ERR_LEN, "loading resume state: %s", e2);
    if (rc == 0) rc = load_8bit_states(tr, r, work, err);
    mem_free(&tr->mem, work);
    return rc;
}

/* The state must be of this model, dtypes, optimizer and global batch. */
static int check_meta(const struct trainer *tr, const char *path, const struct resume_meta *m,
                      char err[TRAINER_ERR_LEN]) {
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
        snprintf(err, TRAINER_ERR_LEN,
                 "%s was saved with a different dtype, optimizer or global batch; resume needs the same "
                 "param_dtype, grad_dtype, optimizer and micro_batch x grad_accum x ranks (the ZeRO stage and "
                 "the number of ranks may change)",
                 path);
        return -1;
    }
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
    return 0;
}

/* The state's data position means something only on the data it was saved
 * with: other train_data is refused unless allow_data_change, which the
 * log then says. */
static int check_data(const struct trainer *tr, const char *path, const struct data_sources *saved,
                      char err[TRAINER_ERR_LEN]) {
    struct data_sources now;
    if (data_sources(tr->cfg->train_data, &now, err) != 0) return -1;
    if (now.files == saved->files && now.bytes == saved->bytes && now.digest == saved->digest) return 0;
    char what[TRAINER_ERR_LEN];
    snprintf(what, sizeof what,
             "%.300s was saved with train_data %.200s (%llu files, %llu bytes), this run's train_data %.200s is "
             "other data (%llu files, %llu bytes%s)",
             path, saved->pattern, (unsigned long long)saved->files, (unsigned long long)saved->bytes, now.pattern,
             (unsigned long long)now.files, (unsigned long long)now.bytes,
             now.files == saved->files && now.bytes == saved->bytes ? ", other paths or contents" : "");
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

static int load_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]) {
    struct resume_meta meta;
    struct resume_reader r;
    char e2[CKPT_ERR_LEN];
    /* Meta first: a state of another shape must be refused by the
     * fingerprint, not by whichever section size differs first. */
    if (resume_open(&r, path, &meta, e2) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "loading resume state: %s", e2);
        return -1;
    }
    int rc = check_meta(tr, path, &meta, err);
    if (rc == 0) rc = check_data(tr, path, &meta.data, err);
    if (rc == 0) rc = read_sections(tr, &r, err);
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

/* Every rank reads the file and keeps its part. */
int trainer_load_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]) {
    return trainer_agree(tr, load_state(tr, path, err), err);
}
