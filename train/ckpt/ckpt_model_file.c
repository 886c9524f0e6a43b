/* llm.c model files in and out of a rank's model states, one unit at a
 * time, on any grid: every rank reads the units it holds (--init_from; the
 * head's copy of wte from the file's wte), and for --save each holder's
 * units are gathered over its dp group and sent to world rank 0, which
 * writes them (train/ckpt/ckpt_grid.h). No rank holds more than one unit
 * beyond its own shards. A model in GPU memory is gathered and routed in
 * device staging and written from its host mirror (train/ckpt/ckpt_staging.h);
 * a load reads into host memory and engine_set_unit copies it over. */
#include "ckpt.h"
#include "bufops.h"
#include "checkpoint.h"
#include "ckpt_grid.h"
#include "ckpt_staging.h"
#include "ckpt_ref_runs.h"
#include "../measure/trainer.h"

/* The whole model as llm.c files hold it (Vp without tp's extra padding;
 * LLaMA's unpadded). */
static struct model_shape file_shape(const struct model_layout *lay) {
    struct model_shape s = lay->shape;
    s.Vp = reference_vocab(&s);
    return s;
}

/* Whether tensor t has its own place in the file: the head's copy of wte
 * is wte, written once (by the embedding). */
static bool in_file(const struct tensor_info *t) { return !(t->kind == UNIT_HEAD && t->id == HEAD_WTE); }

/* Whether holder lay writes tensor t: a replicated tensor is written by tp
 * rank 0 alone. */
static bool writes(const struct model_layout *lay, const struct tensor_info *t) {
    return in_file(t) && (lay->rank.tp_rank == 0 || t->split != SPLIT_REPLICATED);
}

/* Elements of tensor t (this rank's slice) from the file into dst, run by
 * run where a tensor-parallel slice is not contiguous in the file (tp's
 * extra vocabulary padding rows are zero). */
static int read_tensor(struct llmc_reader *r, const struct model_layout *lay, const struct tensor_info *t, float *dst,
                       char err[CKPT_ERR_LEN]) {
    struct tensor_id id = tensor_id_of(t);
    for (size_t i = 0, n, ref; i < t->numel; i += n) {
        n = ref_run(lay, t, i, &ref);
        if (ref >= lay->ref_total) {
            for (size_t k = 0; k < n; k++) dst[i + k] = 0.0f;
            continue;
        }
        if (llmc_read(r, id, ref - t->ref_offset, n, dst + i, DTYPE_FP32, err) != 0) return -1;
    }
    return 0;
}

/* Unit u of holder lay, its elements in dt as the gather leaves them, into
 * the file: each tensor it writes, run by run at its reference place. */
static int write_unit(struct llmc_writer *w, const struct model_layout *lay, int u, const char *data, enum dtype dt,
                      char err[CKPT_ERR_LEN]) {
    size_t base = layout_unit_offset(lay, u), esz = dtype_size(dt);
    for (int k = 0; k < layout_num_tensors(lay); k++) {
        struct tensor_info t = layout_tensor(lay, k);
        if (t.unit != u || !writes(lay, &t)) continue;
        for (size_t i = 0, n, ref; i < t.numel; i += n) {
            n = ref_run(lay, &t, i, &ref);
            if (ref < lay->ref_total &&
                llmc_write(w, tensor_id_of(&t), ref - t.ref_offset, n, data + (t.offset - base + i) * esz, dt, err) != 0)
                return -1;
        }
    }
    return 0;
}

/* Whether holder lay writes anything of unit u (a tp rank's head holds
 * only replicated norms besides the wte copy: nothing). */
static bool unit_writes(const struct model_layout *lay, int u) {
    for (int k = 0; k < layout_num_tensors(lay); k++) {
        struct tensor_info t = layout_tensor(lay, k);
        if (t.unit == u && writes(lay, &t)) return true;
    }
    return false;
}

/* A LLaMA file's keys beyond GPT-2's. The architecture is the file's
 * (the config cannot say it left arch unset: gpt2 is the default), but a
 * config that asks for llama refuses a GPT-2 file. n_kv_head and ffn_dim
 * are taken when 0 (their "unset") and must match otherwise, as
 * max_seq_len; rope_theta and rope_scaled are exact in the file and must
 * match the config, as the shape keys; norm_eps is not in the file
 * (ckpt_llmc_llama.c): the config's is used. */
static int adopt_llama(struct config *c, const struct model_shape *file, char err[TRAINER_ERR_LEN]) {
    if (file->arch != ARCH_LLAMA) {
        if (c->arch == ARCH_GPT2) return 0;
        snprintf(err, TRAINER_ERR_LEN, "--init_from %.400s: a GPT-2 model file, and the config says --arch llama",
                 c->init_from);
        return -1;
    }
    c->arch = ARCH_LLAMA;
    const struct { const char *key; int *config, file; } taken[] = {
        {"n_kv_head", &c->n_kv_head, file->KV}, {"ffn_dim", &c->ffn_dim, file->F}};
    for (size_t i = 0; i < sizeof taken / sizeof taken[0]; i++) {
        if (*taken[i].config != 0 && *taken[i].config != taken[i].file) {
            snprintf(err, TRAINER_ERR_LEN, "--init_from %.400s: %s: config %d, file %d (leave it 0 to take the file's)",
                     c->init_from, taken[i].key, *taken[i].config, taken[i].file);
            return -1;
        }
        *taken[i].config = taken[i].file;
    }
    if (c->rope_theta != file->rope_theta || c->rope_scaled != file->rope_scaled) {
        snprintf(err, TRAINER_ERR_LEN, "--init_from %.400s: rope_theta %g, rope_scaled %d in the config; the file's "
                 "are %g, %d (give --rope_theta %g --rope_scaled %d)", c->init_from, (double)c->rope_theta,
                 (int)c->rope_scaled, (double)file->rope_theta, (int)file->rope_scaled, (double)file->rope_theta,
                 (int)file->rope_scaled);
        return -1;
    }
    return 0;
}

int trainer_adopt_model_file(struct config *c, char err[TRAINER_ERR_LEN]) {
    struct model_shape file;
    int version;
    char e2[CKPT_ERR_LEN];
    if (llmc_read_header(c->init_from, &file, &version, e2) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "--init_from: %s", e2);
        return -1;
    }
    if (adopt_llama(c, &file, err) != 0) return -1;
    const struct { const char *key; int config, file; } same[] = {
        {"n_layer", c->n_layer, file.L}, {"d_model", c->d_model, file.C},
        {"n_head", c->n_head, file.NH},  {"vocab_size", c->vocab_size, file.V},
    };
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        if (same[i].config != same[i].file) {
            snprintf(err, TRAINER_ERR_LEN, "--init_from %.400s: %s: config %d, file %d (the model's shape is the file's)",
                     c->init_from, same[i].key, same[i].config, same[i].file);
            return -1;
        }
    }
    if (c->max_seq_len != 0 && c->max_seq_len != file.maxT) {
        snprintf(err, TRAINER_ERR_LEN, "--init_from %.400s: max_seq_len: config %d, file %d (leave it 0 to take the file's)",
                 c->init_from, c->max_seq_len, file.maxT);
        return -1;
    }
    if (c->seq_len > file.maxT) {
        snprintf(err, TRAINER_ERR_LEN,
                 "--init_from %.400s: seq_len %d is longer than the file's %s %d)", c->init_from, c->seq_len,
                 file.arch == ARCH_LLAMA ? "block_size (max_seq_len" : "position table (max_seq_len", file.maxT);
        return -1;
    }
    c->max_seq_len = file.maxT;
    return 0;
}

int trainer_load_model(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]) {
    struct engine *e = &tr->engine;
    struct model_shape shape = file_shape(&e->lay);
    struct llmc_reader r;
    char e2[CKPT_ERR_LEN];
    if (llmc_open(&r, path, &shape, e2) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "--init_from: %s", e2);
        return -1;
    }
    float *w = mem_alloc(&tr->mem, MEM_HOST, MEM_SCRATCH, "model file staging (one unit, fp32)",
                         engine_unit_staging_bytes(e));
    int rc = w ? 0 : -1;
    if (!w) mem_failure_message(&tr->mem, err, TRAINER_ERR_LEN);
    for (int u = 0; rc == 0 && u < e->lay.n_units; u++) {
        size_t base = layout_unit_offset(&e->lay, u);
        for (int k = 0; rc == 0 && k < layout_num_tensors(&e->lay); k++) {
            struct tensor_info t = layout_tensor(&e->lay, k);
            if (t.unit != u) continue;
            rc = read_tensor(&r, &e->lay, &t, w + (t.offset - base), e2);
            if (rc != 0) snprintf(err, TRAINER_ERR_LEN, "--init_from: %s", e2);
        }
        /* bf16 params hold the file's values rounded once, as llm.c does;
         * the master starts from exactly those */
        if (rc == 0 && e->o.zero.param_dtype == DTYPE_BF16) buf_round_bf16(MEM_HOST, w, layout_unit_size(&e->lay, u));
        if (rc == 0) engine_set_unit(e, u, w);
    }
    mem_free(&tr->mem, w);
    llmc_close(&r);
    return rc;
}

int trainer_save_model(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]) {
    struct engine *e = &tr->engine;
    struct grid *g = tr->grid;
    enum dtype dt = e->o.zero.param_dtype;
    bool writer = g->world_rank == 0;
    struct model_shape shape = file_shape(&e->lay);
    struct llmc_writer w = {0};
    char e2[CKPT_ERR_LEN] = "";
    int rc = writer ? llmc_create(&w, path, &shape, dt, e2) : 0;
    struct ckpt_staging st; /* gathered and routed in the model's space, written from the host */
    int got = ckpt_staging_alloc(&st, &tr->mem, tr->space, "model file staging (one unit)",
                                 ckpt_staging_bytes(tr->cfg, g, engine_unit_staging_bytes(e)));
    if (got != 0) mem_failure_message(&tr->mem, err, TRAINER_ERR_LEN);
    if (trainer_agree(tr, got, err) != 0) {
        if (writer && rc == 0) llmc_abort(&w);
        ckpt_staging_free(&st, &tr->mem);
        return -1;
    }
    /* every rank takes part in every gather and transfer, whatever
     * happened on the writer, so no rank waits on another */
    for (int s = 0; s < g->pp; s++)
        for (int t = 0; t < g->tp; t++) {
            struct model_layout lay;
            if (ckpt_holder_layout(tr->cfg, g, s, t, &lay) != 0) continue; /* trainer_open refused it */
            for (int u = 0; u < lay.n_units; u++) {
                if (ckpt_is_holder(g, s, t)) zero_gather_unit(&e->z, STATE_PARAMS, u, st.work);
                if (!unit_writes(&lay, u)) continue;
                size_t bytes = ckpt_unit_elems(&lay, u, false) * dtype_size(dt);
                ckpt_route_to_root(g, s, t, st.work, bytes);
                if (!writer || rc != 0) continue;
                ckpt_staging_to_host(&st, e->space, bytes);
                rc = write_unit(&w, &lay, u, st.host, dt, e2);
            }
        }
    if (writer && rc == 0) rc = llmc_commit(&w, e2);
    if (writer && rc != 0) llmc_abort(&w);
    if (rc != 0) snprintf(err, TRAINER_ERR_LEN, "--save: %s", e2);
    ckpt_staging_free(&st, &tr->mem);
    return trainer_agree(tr, rc, err);
}
