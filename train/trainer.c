/* The training loop. */
#include "trainer.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accounting.h"
#include "checkpoint.h"
#include "optim.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int init_weights(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    const struct config *c = tr->cfg;
    struct engine *e = &tr->engine;
    if (!*c->init_from) {
        engine_init_params(e);
        return 0;
    }
    char e2[CKPT_ERR_LEN];
    if (llmc_load(c->init_from, &e->lay, e->st.params, c->param_dtype, e2) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "--init_from: %s", e2);
        return -1;
    }
    engine_sync_master_from_params(e);
    return 0;
}

int trainer_open(struct trainer *tr, const struct config *cfg, char err[TRAINER_ERR_LEN]) {
    memset(tr, 0, sizeof *tr);
    tr->cfg = cfg;
    tr->last_val_loss = -1.0;
    if (cfg->arch != ARCH_GPT2 || cfg->n_kv_head != 0 || cfg->ffn_dim != 0) {
        snprintf(err, TRAINER_ERR_LEN,
                 "the trainer implements GPT-2 blocks (arch = gpt2, n_kv_head = 0, ffn_dim = 0); "
                 "LLaMA-style configs are for build/plan");
        tr->cfg = NULL;
        return -1;
    }
    char derr[DATA_ERR_LEN];
    if (loader_open(&tr->train, cfg->train_data, cfg->vocab_size, cfg->micro_batch, cfg->seq_len, 0, 1,
                    cfg->shuffle, (uint64_t)cfg->seed, derr) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "train_data: %s", derr);
        return -1;
    }
    tr->has_val = cfg->val_data[0] && cfg->val_every > 0;
    if (tr->has_val && loader_open(&tr->val, cfg->val_data, cfg->vocab_size, cfg->micro_batch, cfg->seq_len, 0, 1,
                                   false, 0, derr) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "val_data: %s", derr);
        loader_close(&tr->train);
        return -1;
    }
    engine_init(&tr->engine, cfg, &tr->mem, &tr->flops);
    size_t bt = (size_t)cfg->micro_batch * cfg->seq_len;
    tr->inputs = mem_alloc(&tr->mem, MEM_SCRATCH, "batch inputs", bt * sizeof(int32_t));
    tr->targets = mem_alloc(&tr->mem, MEM_SCRATCH, "batch targets", bt * sizeof(int32_t));
    int rc = init_weights(tr, err);
    if (rc == 0 && *cfg->resume) rc = trainer_load_state(tr, cfg->resume, err);
    if (rc == 0 && *cfg->log_json && !(tr->json = fopen(cfg->log_json, tr->step ? "a" : "w"))) {
        snprintf(err, TRAINER_ERR_LEN, "cannot open log_json %s", cfg->log_json);
        rc = -1;
    }
    if (rc != 0) trainer_close(tr);
    return rc;
}

void trainer_close(struct trainer *tr) {
    if (!tr->cfg) return;
    if (tr->json) fclose(tr->json);
    loader_close(&tr->train);
    if (tr->has_val) loader_close(&tr->val);
    engine_free(&tr->engine);
    mem_free_all(&tr->mem);
    tr->cfg = NULL;
}

float trainer_validate(struct trainer *tr) {
    struct flop_counter training = tr->flops; /* validation is not part of a step's count */
    loader_rewind(&tr->val);
    double sum = 0.0;
    for (int i = 0; i < tr->cfg->val_batches; i++) {
        loader_next(&tr->val, tr->inputs, tr->targets);
        sum += engine_forward(&tr->engine, tr->inputs, tr->targets);
    }
    tr->flops = training;
    return (float)(sum / tr->cfg->val_batches);
}

struct step_metrics {
    float loss, val_loss, lr;
    double grad_norm, ms, tokens_per_s, flops, model_flops, mfu, gemm_ms;
};

static void log_step(struct trainer *tr, const struct step_metrics *m) {
    printf("step %5d/%d | loss %.4f", tr->step, tr->cfg->steps, m->loss);
    if (m->val_loss >= 0) printf(" | val %.4f", m->val_loss);
    printf(" | lr %.2e | norm %.3f | %.1f ms (gemm %.0f%%) | %.0f tok/s | MFU %.1f%%\n", m->lr, m->grad_norm, m->ms,
           100.0 * m->gemm_ms / m->ms, m->tokens_per_s, 100.0 * m->mfu);
    fflush(stdout);
    if (!tr->json) return;
    char val[32] = "null";
    if (m->val_loss >= 0) snprintf(val, sizeof val, "%.6f", m->val_loss);
    fprintf(tr->json,
            "{\"type\":\"step\",\"step\":%d,\"loss\":%.6f,\"val_loss\":%s,\"lr\":%.6e,\"grad_norm\":%.6f,"
            "\"ms\":%.3f,\"tokens_per_s\":%.1f,\"flops\":%.6e,\"model_flops\":%.6e,\"mfu\":%.5f,"
            "\"gemm_ms\":%.3f}\n",
            tr->step, m->loss, val, m->lr, m->grad_norm, m->ms, m->tokens_per_s, m->flops, m->model_flops, m->mfu,
            m->gemm_ms);
    fflush(tr->json);
}

static struct step_metrics train_step(struct trainer *tr) {
    const struct config *c = tr->cfg;
    struct engine *e = &tr->engine;
    struct flop_counter before = tr->flops;
    double t0 = now();
    engine_zero_grads(e);
    double loss = 0.0;
    for (int k = 0; k < c->grad_accum; k++) {
        loader_next(&tr->train, tr->inputs, tr->targets);
        loss += engine_forward_backward(e, tr->inputs, tr->targets, 1.0f / (float)c->grad_accum);
    }
    struct step_result r = engine_optimizer_step(e, tr->step);
    double dt = now() - t0;
    tr->train_seconds += dt;
    tr->step++;
    double tokens = (double)c->micro_batch * c->seq_len * c->grad_accum;
    double model_flops = theory_trainer_flops(c).model;
    return (struct step_metrics){
        .model_flops = model_flops, .mfu = tr->peak_flops > 0 ? model_flops / dt / tr->peak_flops : 0.0,
        .loss = (float)(loss / c->grad_accum), .val_loss = -1.0f, .lr = r.lr, .grad_norm = r.grad_norm,
        .ms = dt * 1e3, .tokens_per_s = tokens / dt, .flops = flops_total(&tr->flops) - flops_total(&before),
        .gemm_ms = (tr->flops.gemm_seconds - before.gemm_seconds) * 1e3};
}

int trainer_run(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    const struct config *c = tr->cfg;
    while (tr->step < c->steps && (tr->stop_after <= 0 || tr->step < tr->stop_after)) {
        struct step_metrics m = train_step(tr);
        bool last = tr->step == c->steps, stop = tr->step == tr->stop_after;
        if (tr->has_val && (tr->step % c->val_every == 0 || last)) m.val_loss = tr->last_val_loss = trainer_validate(tr);
        log_step(tr, &m);
        bool periodic = c->save_state_every > 0 && tr->step % c->save_state_every == 0;
        if (*c->save_state && (periodic || last || stop) && trainer_save_state(tr, c->save_state, err) != 0) return -1;
    }
    if (tr->step < c->steps) return 0; /* stopped early: no final model */
    char e2[CKPT_ERR_LEN];
    if (*c->save && llmc_save(c->save, &tr->engine.lay, tr->engine.st.params, c->param_dtype, c->param_dtype, e2) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "--save: %s", e2);
        return -1;
    }
    return 0;
}
