/* Resume states: the model states plus the loop's position, bit-exact. */
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
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

/* A resume state holds full, unsharded arrays in layout order, whatever
 * the layout that wrote it: N ranks at stage K save through the engine's
 * gather, M ranks at stage J load through its scatter. */
enum { MAX_SECTIONS = 4 };

static const struct {
    const char *name;
    enum zero_state which;
} STATES[MAX_SECTIONS] = {
    {"params", STATE_PARAMS}, {"master", STATE_MASTER}, {"optim_state1", STATE_OPT1}, {"optim_state2", STATE_OPT2}};

/* Sections with freshly allocated full buffers; returns how many. */
static int sections(const struct trainer *tr, struct state_section s[MAX_SECTIONS]) {
    const struct engine *e = &tr->engine;
    size_t psi = e->lay.total;
    int n = 0;
    for (int i = 0; i < MAX_SECTIONS; i++) {
        if (!zero_has_state(&e->z, STATES[i].which)) continue;
        enum dtype dt = STATES[i].which == STATE_PARAMS ? tr->cfg->param_dtype : DTYPE_FP32;
        s[n] = (struct state_section){.dtype = dt, .numel = psi, .data = malloc(psi * dtype_size(dt))};
        snprintf(s[n].name, sizeof s[n].name, "%s", STATES[i].name);
        n++;
    }
    return n;
}

static enum zero_state state_of(const struct state_section *s) {
    for (int i = 0; i < MAX_SECTIONS; i++)
        if (strcmp(s->name, STATES[i].name) == 0) return STATES[i].which;
    return STATE_PARAMS;
}

static void free_sections(struct state_section *s, int n) {
    for (int i = 0; i < n; i++) free(s[i].data);
}

int trainer_save_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]) {
    struct state_section s[MAX_SECTIONS];
    int n = sections(tr, s);
    struct engine *e = &tr->engine;
    void *work = mem_alloc(&tr->mem, MEM_HOST, MEM_SCRATCH, "checkpoint staging (one unit)", engine_unit_staging_bytes(e));
    for (int i = 0; i < n; i++)
        for (int u = 0; u < e->lay.n_units; u++) {
            zero_gather_unit(&e->z, state_of(&s[i]), u, work);
            if (e->z.sh.rank == 0)
                memcpy((char *)s[i].data + layout_unit_offset(&e->lay, u) * dtype_size(s[i].dtype), work,
                       layout_unit_size(&e->lay, u) * dtype_size(s[i].dtype));
        }
    mem_free(&tr->mem, work);
    struct resume_meta meta = {.step = (uint64_t)tr->step,
                               .seed = (uint64_t)tr->cfg->seed,
                               .data_epoch = tr->train.pos.epoch,
                               .data_cursor = tr->train.pos.cursor,
                               .shape = tr->engine.lay.shape,
                               .fingerprint = fingerprint(tr->cfg, tr->grid->dp)};
    char e2[CKPT_ERR_LEN];
    int rc = 0;
    if (tr->grid->world_rank == 0 && resume_save(path, &meta, s, n, e2) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "saving resume state: %s", e2);
        rc = -1;
    }
    free_sections(s, n);
    return trainer_agree(tr, rc, err);
}

static int load_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]) {
    struct resume_meta meta;
    char e2[CKPT_ERR_LEN];
    /* Meta first (no sections): a state of another shape must be refused by
     * the fingerprint, not by whichever section size differs first. */
    if (resume_load(path, &meta, NULL, 0, e2) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "loading resume state: %s", e2);
        return -1;
    }
    const struct model_shape *have = &tr->engine.lay.shape;
    if (meta.shape.L != have->L || meta.shape.C != have->C || meta.shape.NH != have->NH || meta.shape.T != have->T ||
        meta.shape.V != have->V) {
        snprintf(err, TRAINER_ERR_LEN,
                 "%s was saved with a different model: n_layer %d, d_model %d, n_head %d, seq_len %d, vocab_size %d "
                 "(this config: %d, %d, %d, %d, %d)",
                 path, meta.shape.L, meta.shape.C, meta.shape.NH, meta.shape.T, meta.shape.V, have->L, have->C,
                 have->NH, have->T, have->V);
        return -1;
    }
    if (meta.fingerprint != fingerprint(tr->cfg, tr->grid->dp)) {
        snprintf(err, TRAINER_ERR_LEN,
                 "%s was saved with a different dtype, optimizer or global batch; resume needs the same "
                 "param_dtype, grad_dtype, optimizer and micro_batch x grad_accum x ranks (the ZeRO stage and "
                 "the number of ranks may change)",
                 path);
        return -1;
    }
    if (meta.seed != (uint64_t)tr->cfg->seed) {
        snprintf(err, TRAINER_ERR_LEN, "%s was saved with seed %llu, this run has seed %lld", path,
                 (unsigned long long)meta.seed, tr->cfg->seed);
        return -1;
    }
    if (meta.step > (uint64_t)tr->cfg->steps) {
        snprintf(err, TRAINER_ERR_LEN, "%s is at step %llu, beyond steps = %d", path,
                 (unsigned long long)meta.step, tr->cfg->steps);
        return -1;
    }
    struct state_section s[MAX_SECTIONS];
    int n = sections(tr, s);
    int rc = resume_load(path, &meta, s, n, e2);
    if (rc != 0) snprintf(err, TRAINER_ERR_LEN, "loading resume state: %s", e2);
    struct engine *e = &tr->engine;
    for (int i = 0; rc == 0 && i < n; i++)
        for (int u = 0; u < e->lay.n_units; u++)
            zero_scatter_unit(&e->z, state_of(&s[i]), u,
                              (const char *)s[i].data + layout_unit_offset(&e->lay, u) * dtype_size(s[i].dtype));
    free_sections(s, n);
    if (rc != 0) return -1;
    struct loader_position pos = {meta.data_epoch, meta.data_cursor};
    char e3[DATA_ERR_LEN];
    if (loader_seek(&tr->train, pos, e3) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "%s: %s", path, e3);
        return -1;
    }
    tr->step = (int)meta.step;
    engine_params_changed(&tr->engine);
    return 0;
}

/* Every rank reads the file and keeps its part. */
int trainer_load_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]) {
    return trainer_agree(tr, load_state(tr, path, err), err);
}
