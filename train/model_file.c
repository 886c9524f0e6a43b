/* llm.c model files in and out of a rank's model states, one unit at a
 * time: every rank reads the units it holds (--init_from), and the ranks
 * gather each unit in turn to dp rank 0, which writes it (--save). No rank
 * holds more than one unit beyond its own shards. */
#include "bufops.h"
#include "checkpoint.h"
#include "trainer.h"

/* The whole model as llm.c files hold it (Vp without tp's extra padding). */
static struct model_shape file_shape(const struct model_layout *lay) {
    struct model_shape s = lay->shape;
    s.Vp = padded_vocab(s.V);
    return s;
}

/* Whether tensor t has its own place in the file: the head's copy of wte
 * is wte, written once (by the embedding). */
static bool in_file(const struct tensor_info *t) { return !(t->kind == UNIT_HEAD && t->id == HEAD_WTE); }

/* Elements of tensor t (this rank's slice) from the file into dst, row by
 * row where a tensor-parallel slice is not contiguous in the file. */
static int read_tensor(struct llmc_reader *r, const struct model_layout *lay, const struct tensor_info *t, float *dst,
                       char err[CKPT_ERR_LEN]) {
    struct tensor_id id = tensor_id_of(t);
    if (lay->rank.tp == 1 || t->split == SPLIT_REPLICATED) return llmc_read(r, id, 0, t->numel, dst, DTYPE_FP32, err);
    for (size_t row = 0; row < (size_t)t->rows; row++) {
        size_t at = layout_ref_index(lay, t, row * (size_t)t->cols);
        float *d = dst + row * (size_t)t->cols;
        if (at >= lay->ref_total) { /* tp's extra vocabulary padding: zero */
            for (int c = 0; c < t->cols; c++) d[c] = 0.0f;
            continue;
        }
        if (llmc_read(r, id, at - t->ref_offset, (size_t)t->cols, d, DTYPE_FP32, err) != 0) return -1;
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
                 "--init_from %.400s: seq_len %d is longer than the file's position table (max_seq_len %d)",
                 c->init_from, c->seq_len, file.maxT);
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
        if (rc == 0 && e->o.zero.param_dtype == DTYPE_BF16) buf_round_bf16(w, layout_unit_size(&e->lay, u));
        if (rc == 0) engine_set_unit(e, u, w);
    }
    mem_free(&tr->mem, w);
    llmc_close(&r);
    return rc;
}

int trainer_save_model(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]) {
    struct engine *e = &tr->engine;
    enum dtype dt = e->o.zero.param_dtype;
    bool writer = e->z.sh.rank == 0 && tr->grid->tp_rank == 0;
    struct model_shape shape = file_shape(&e->lay);
    struct llmc_writer w = {0};
    char e2[CKPT_ERR_LEN] = "";
    int rc = writer ? llmc_create(&w, path, &shape, dt, e2) : 0;
    void *work = mem_alloc(&tr->mem, MEM_HOST, MEM_SCRATCH, "model file staging (one unit)",
                           engine_unit_staging_bytes(e));
    if (!work) mem_failure_message(&tr->mem, err, TRAINER_ERR_LEN);
    if (trainer_agree(tr, work ? 0 : -1, err) != 0) {
        if (writer && rc == 0) llmc_abort(&w);
        mem_free(&tr->mem, work);
        return -1;
    }
    /* every rank takes part in every unit's gather, whatever happened on
     * the writer, so no rank waits on another */
    for (int u = 0; u < e->lay.n_units; u++) {
        zero_gather_unit(&e->z, STATE_PARAMS, u, work);
        size_t base = layout_unit_offset(&e->lay, u);
        for (int k = 0; writer && rc == 0 && k < layout_num_tensors(&e->lay); k++) {
            struct tensor_info t = layout_tensor(&e->lay, k);
            if (t.unit == u && in_file(&t))
                rc = llmc_write(&w, tensor_id_of(&t), 0, t.numel, (char *)work + (t.offset - base) * dtype_size(dt),
                                dt, e2);
        }
    }
    if (writer && rc == 0) rc = llmc_commit(&w, e2);
    if (writer && rc != 0) llmc_abort(&w);
    if (rc != 0) snprintf(err, TRAINER_ERR_LEN, "--save: %s", e2);
    mem_free(&tr->mem, work);
    return trainer_agree(tr, rc, err);
}
