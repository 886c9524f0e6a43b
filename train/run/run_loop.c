/* The training loop. */
#include "../ckpt/ckpt.h"
#include "run.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../theory/accounting.h"
#include "../ckpt/checkpoint.h"
#include "clock.h"
#include "../measure/machine.h"
#include "run_memcheck.h"
#include "optim.h"
#include "run_outputs.h"
#include "pipe_stages.h"
#include "schedule.h"
#include "step.h"
#include "run_stop_signal.h"
#include "run_team.h"
#include "../measure/trace_file.h"



/* Temp files of --save and --save_state that a killed run left behind
 * (include/fileio.h): removed, and said so, by the rank that writes them. */
static int remove_stale_temps(const struct config *cfg, const struct grid *g, char err[TRAINER_ERR_LEN]) {
    if (g->world_rank != 0) return 0;
    const char *targets[] = {cfg->save, cfg->save_state, cfg->trace};
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        char e2[FILEIO_ERR_LEN];
        if (*targets[i] && atomic_remove_stale(targets[i], stdout, e2) < 0) {
            snprintf(err, TRAINER_ERR_LEN, "%s", e2);
            return -1;
        }
    }
    return 0;
}

/* Start-up progress: rank 0 says what it is doing as it goes, one line each. */
static void say(const struct trainer *tr, const char *fmt, ...) {
    if (tr->grid->world_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static int init_weights(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    if (*tr->cfg->init_from) {
        /* a LLaMA file's norm_eps slot is int32 (1e-5 is 0): the config's eps is used */
        if (tr->cfg->arch == ARCH_LLAMA)
            say(tr, "loading %s (LLaMA 3; norm_eps %g is the config's: the file does not keep it) ...",
                tr->cfg->init_from, (double)tr->cfg->norm_eps);
        else
            say(tr, "loading %s ...", tr->cfg->init_from);
        return trainer_load_model(tr, tr->cfg->init_from, err);
    }
    say(tr, "initialising weights (seed %lld) ...", tr->cfg->seed);
    engine_init_params(&tr->engine);
    return 0;
}

static int open_data(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    const struct config *cfg = tr->cfg;
    const struct grid *g = tr->grid;
    char derr[DATA_ERR_LEN];
    if (loader_open(&tr->train, cfg->train_data, cfg->vocab_size, cfg->micro_batch, cfg->seq_len, g->dp_rank,
                    g->dp, cfg->shuffle, (uint64_t)cfg->seed, derr) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "train_data: %s", derr);
        return -1;
    }
    tr->has_val = cfg->val_data[0] && cfg->val_every > 0;
    if (tr->has_val && loader_open(&tr->val, cfg->val_data, cfg->vocab_size, cfg->micro_batch, cfg->seq_len,
                                   g->dp_rank, g->dp, false, 0, derr) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "val_data: %s", derr);
        loader_close(&tr->train);
        tr->has_val = false;
        return -1;
    }
    /* a validation takes val_batches x dp x micro_batch samples from the
     * start of the split: more than it holds reads it over and over */
    double per_val = (double)cfg->val_batches * g->dp * cfg->micro_batch;
    if (tr->has_val && g->world_rank == 0 && per_val > (double)tr->val.n_samples)
        fprintf(stderr,
                "warning: val_batches %d x %d ranks x micro_batch %d = %.0f samples per validation, but val_data has "
                "%zu: each validation reads it %.1f times over (lower val_batches to at most %zu)\n",
                cfg->val_batches, g->dp, cfg->micro_batch, per_val, tr->val.n_samples,
                per_val / (double)tr->val.n_samples, tr->val.n_samples / ((size_t)g->dp * (size_t)cfg->micro_batch));
    return 0;
}

/* --log_json, opened by rank 0 once start-up has passed (its checks came
 * with the outputs', before the weights were loaded), so that a run that
 * fails at start-up leaves an old log as it was: a resumed run appends to
 * the log it continues (a resume state is never of step 0; the log ends in
 * a newline, trainer_check_outputs), a new run starts it. */
static int open_log(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    const struct config *cfg = tr->cfg;
    if (!*cfg->log_json || tr->grid->world_rank != 0) return 0;
    if ((tr->json = fopen(cfg->log_json, *cfg->resume ? "a" : "w"))) return 0;
    snprintf(err, TRAINER_ERR_LEN, "cannot open log_json %.400s: %s", cfg->log_json, strerror(errno));
    return -1;
}

int trainer_open(struct trainer *tr, const struct config *cfg, struct grid *grid, const struct device_info *dev,
                 char err[TRAINER_ERR_LEN]) {
    memset(tr, 0, sizeof *tr);
    tr->cfg = cfg;
    tr->grid = grid;
    trainer_place(tr, dev);
    tr->last_val_loss = NO_VAL_LOSS;
    tr->team = cfg->threads; /* fixed until run_team_start says otherwise */
    progress_init(&tr->progress, progress_stdout_is_terminal());
    double t_start = monotonic_seconds();
    int rc = trainer_agree(tr, config_check_grid(cfg, grid, err), err);
    if (rc == 0) rc = trainer_agree(tr, trainer_open_kernels(tr, err), err);
    if (rc == 0) rc = trainer_agree(tr, remove_stale_temps(cfg, grid, err), err);
    bool data_open = false;
    if (rc == 0) {
        say(tr, "loading data %s ...", cfg->train_data);
        int mine = open_data(tr, err);
        data_open = mine == 0;
        rc = trainer_agree(tr, mine, err);
    }
    if (rc != 0) {
        if (data_open) {
            loader_close(&tr->train);
            if (tr->has_val) loader_close(&tr->val);
        }
        trainer_close_kernels(tr);
        tr->cfg = NULL;
        return -1;
    }
    /* this rank's part of the model (the split was checked by check_layout) */
    struct model_layout lay;
    struct rank_place place = rank_place_of_grid(grid);
    if (rank_layout(cfg, place, &lay) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "the model (n_layer %d, n_head %d, d_model %d) cannot be split over pp %d x tp %d",
                 cfg->n_layer, cfg->n_head, cfg->d_model, grid->pp, grid->tp);
        trainer_agree(tr, -1, err);
        trainer_close(tr);
        return -1;
    }
    struct engine_options eo = trainer_engine_options(cfg);
    eo.gemm_dtype = tr->gemm_dtype; /* --gemm_dtype auto resolved for this machine */
    trainer_attach_observers(tr);
    eo.zero.hooks = &tr->hooks; /* each unit's spans, collectives and releases: include/step_hooks.h */
    eo.slots = schedule_slots(cfg->schedule, grid->pp, grid->pp_rank, cfg->grad_accum);
    int v = lay.rank.n_chunks;
    if (v > 1)
        for (int c = 0; c < v; c++)
            eo.chunk_slots[c] = schedule_chunk_slots(cfg->schedule, grid->pp, grid->pp_rank, cfg->grad_accum, v, c);
    if (trainer_check_memory(tr, err) != 0) { /* refuse what would be OOM-killed without a word */
        trainer_close(tr);
        return -1;
    }
    say(tr, "allocating %.1f MiB per rank (theory, rank 0) ...",
        theory_trainer_memory(cfg, rank_place_of(cfg, grid->world_size, grid->world_rank)).total / MIB_BYTES);
    rc = engine_init(&tr->engine, &eo, &lay, grid, &tr->mem, tr->space, &tr->flops, err, TRAINER_ERR_LEN);
    tr->engine_open = true;
    if (rc == 0 && pipeline_init(&tr->pipe, &tr->engine, &grid->pp_comm, cfg->schedule, cfg->grad_accum, &tr->mem) != 0) {
        mem_failure_message(&tr->mem, err, TRAINER_ERR_LEN);
        rc = -1;
    }
    /* the model's FLOPs for this dp rank's tokens, shared by its cp x tp x pp ranks: MFU is the job's */
    tr->model_flops_per_step = theory_trainer_flops(cfg, rank_place_dp(1, 0)).model / (grid->cp * grid->tp * grid->pp);
    size_t bt = (size_t)cfg->micro_batch * cfg->seq_len;
    tr->inputs = mem_alloc(&tr->mem, MEM_HOST, MEM_SCRATCH, "batch inputs", bt * sizeof(int32_t));
    tr->targets = mem_alloc(&tr->mem, MEM_HOST, MEM_SCRATCH, "batch targets", bt * sizeof(int32_t));
    trace_open(&tr->trace, &tr->mem, trace_capacity(cfg)); /* --trace; a failure is the tracker's, below */
    if (rc == 0 && mem_failed(&tr->mem)) {
        mem_failure_message(&tr->mem, err, TRAINER_ERR_LEN);
        rc = -1;
    }
    rc = trainer_agree(tr, rc, err);
    if (rc == 0) rc = trainer_check_outputs(tr, err); /* before any work that a bad path would waste */
    if (rc == 0) rc = trainer_agree(tr, init_weights(tr, err), err);
    if (rc == 0 && *cfg->resume) rc = trainer_load_state(tr, cfg->resume, err);
    rc = trainer_agree(tr, rc, err);
    if (rc == 0 && *cfg->log_json) rc = trainer_recheck_output(tr, "--log_json", cfg->log_json, err);
    if (rc == 0) rc = trainer_agree(tr, open_log(tr, err), err);
    if (rc == 0) trainer_open_energy(tr); /* collective, on every rank alike */
    if (rc != 0) trainer_close(tr);
    else say(tr, "ready in %.1f s", monotonic_seconds() - t_start);
    tr->startup_tracked_peak = (double)tr->mem.peak_space[MEM_HOST]; /* beside the RSS */
    tr->startup_rss = peak_rss_bytes();
    trainer_sample_device_memory(tr);
    for (int g = 0; g < GROUP_NUM; g++) { /* count steps only */
        struct collectives *c = grid_group(grid, (enum grid_group)g);
        if (c) c->counters = (struct comm_counters){0};
    }
    if (rc == 0) grid_attach_trace(grid, &tr->trace); /* from here every call is on the timeline */
    return rc;
}

void trainer_close(struct trainer *tr) {
    if (!tr->cfg) return;
    if (tr->json) fclose(tr->json);
    energy_close(&tr->energy);
    loader_close(&tr->train);
    if (tr->has_val) loader_close(&tr->val);
    pipeline_free(&tr->pipe, &tr->mem);
    if (tr->engine_open) engine_free(&tr->engine);
    tr->engine_open = false;
    grid_attach_trace(tr->grid, NULL);
    trace_close(&tr->trace, &tr->mem);
    mem_free_all(&tr->mem);
    trainer_close_kernels(tr);
    tr->cfg = NULL;
}

/* Each data-parallel rank evaluates val_batches micro-batches of its own
 * (its loader strides the validation split over dp), through the pipeline's
 * stages; the mean is taken over all val_batches x dp of them. */
float trainer_validate(struct trainer *tr) {
    struct collectives *dp = &tr->grid->dp_comm;
    double t0 = monotonic_seconds();
    struct exec_ctx flops = tr->flops; /* validation is not part of a step's count */
    struct coll_uncounted kept[GROUP_NUM]; /* nor of its traffic: tp's f and g, pp's sends, all groups */
    for (int g = 0; g < GROUP_NUM; g++) kept[g] = coll_uncounted_begin(grid_group(tr->grid, (enum grid_group)g));
    int ev = trace_begin(&tr->trace, TRACE_VALIDATION, -1);
    loader_rewind(&tr->val);
    struct batch_source src = {&tr->val, NULL}; /* no trace: validation's forwards are not a step's */
    double sum = step_validate(&tr->pipe, tr->cfg->val_batches, &src, tr->inputs, tr->targets);
    trace_end(&tr->trace, ev);
    tr->flops = flops;
    for (int g = 0; g < GROUP_NUM; g++) coll_uncounted_end(kept[g]);
    tr->val_seconds += monotonic_seconds() - t0;
    return (float)(sum / (tr->cfg->val_batches * dp->size));
}

/* A JSON number, or null for NaN and Inf (which JSON cannot hold). */
static void json_number(char out[32], const char *fmt, double x) {
    if (isfinite(x)) snprintf(out, 32, fmt, x);
    else snprintf(out, 32, "null");
}

/* A step record that could not be written (a full disk): the log is
 * closed and cut back to its last whole record (start: its length before
 * this one), so it never ends mid-line, and the loop stops the run at this
 * step with its state (TRAINER_STOP_LOG); main reports json_errno. */
static void log_write_failed(struct trainer *tr, long start) {
    tr->json_errno = errno ? errno : EIO;
    tr->json_failed_step = tr->step;
    fclose(tr->json); /* fails too: what it still held is lost with the record */
    tr->json = NULL;
    struct stat st; /* cut only what reached the file (bytes still buffered never did) */
    bool reached = start >= 0 && stat(tr->cfg->log_json, &st) == 0 && st.st_size > start;
    if (reached && truncate(tr->cfg->log_json, start) != 0)
        fprintf(stderr, "warning: log_json %s could not be cut back to its last whole record: %s\n",
                tr->cfg->log_json, strerror(errno));
}

/* keep: the line stays on a terminal (validation, a saved state, the end). */
static void log_step(struct trainer *tr, const struct step_metrics *m, bool keep) {
    progress_step(&tr->progress, m->ms * 1e-3);
    if (tr->grid->world_rank != 0) return;
    char line[320], val_part[32] = "", eta[PROGRESS_ETA_LEN];
    if (has_val_loss(m->val_loss)) snprintf(val_part, sizeof val_part, " | val %.4f", m->val_loss);
    progress_format_eta(progress_eta_seconds(&tr->progress, tr->cfg->steps - tr->step), eta);
    snprintf(line, sizeof line,
             "step %5d/%d | loss %.4f%s | lr %.2e | norm %.3f | %.1f ms (gemm %.0f%%) | %.0f tok/s | MFU %.1f%% | ETA %s%s",
             tr->step, tr->cfg->steps, m->loss, val_part, m->lr, m->grad_norm, m->ms, 100.0 * m->gemm_ms / m->ms,
             m->tokens_per_s, 100.0 * m->mfu, eta, m->nonfinite ? " | non-finite: update not applied" : "");
    if (isfinite(m->joules)) {
        size_t used = strlen(line);
        snprintf(line + used, sizeof line - used, " | %.1f J", m->joules);
    }
    errno = 0;
    progress_show(&tr->progress, stdout, line, keep);
    if (ferror(stdout) && errno == EPIPE) tr->stdout_broken = true; /* a stop request (trainer_run) */
    if (!tr->json) return;
    char val[32] = "null", loss[32], norm[32];
    if (has_val_loss(m->val_loss)) snprintf(val, sizeof val, "%.6f", m->val_loss);
    json_number(loss, "%.6f", m->loss);
    json_number(norm, "%.6f", m->grad_norm);
    /* energy (docs/ENERGY.md): the job's model FLOPs over the job's joules */
    char joules[32], per_token[32], tflop_per_j[32], planned[32];
    json_number(joules, "%.6g", m->joules);
    json_number(per_token, "%.6g", m->joules / m->tokens);
    json_number(tflop_per_j, "%.6g", m->model_flops * tr->grid->world_size / m->joules / 1e12);
    json_number(planned, "%.6g", m->planned_joules);
    long start = ftell(tr->json);
    fprintf(tr->json,
            "{\"type\":\"step\",\"step\":%d,\"loss\":%s,\"val_loss\":%s,\"lr\":%.6e,\"grad_norm\":%s,"
            "\"ms\":%.3f,\"tokens_per_s\":%.1f,\"flops\":%.6e,\"model_flops\":%.6e,\"mfu\":%.5f,"
            "\"gemm_ms\":%.3f,\"optimizer_ms\":%.3f,\"threads\":%d,\"skipped\":%s,\"joules\":%s,\"joules_per_token\":%s,"
            "\"tflop_per_joule\":%s,\"planned_joules\":%s,\"peak_flops\":%.6e,\"peak_source\":\"%s\"}\n",
            tr->step, loss, val, m->lr, norm, m->ms, m->tokens_per_s, m->flops, m->model_flops, m->mfu, m->gemm_ms,
            m->optimizer_ms, tr->team, m->nonfinite ? "true" : "false", joules, per_token, tflop_per_j, planned,
            tr->peak_flops, peak_tracker_source(&tr->peak));
    errno = 0;
    if (fflush(tr->json) != 0 || ferror(tr->json)) log_write_failed(tr, start);
}

/* One optimizer step, top-down: every phase one call, in order
 * (docs/ARCHITECTURE.md walks it). It names its points (STEP_BEGINS,
 * OPTIMIZER_BEGINS, ...: include/step_hooks.h) and no instrument: the
 * trace, the memory timeline, the FLOP count and peak, the kernels' timing
 * and energy observe those points (train/run/run_hooks.c). */
static struct step_metrics train_step(struct trainer *tr) {
    const struct config *c = tr->cfg;
    const struct step_hooks *hooks = &tr->hooks; /* the instruments: train/run/run_hooks.c */
    step_hook(hooks, (struct step_event){.at = STEP_BEGINS, .step = tr->step + 1});
    double t0 = monotonic_seconds();
    /* the step itself: parallel/step.c */
    struct batch_source src = {&tr->train, hooks};
    struct step_result r = step_run(&tr->pipe, &src, tr->step, tr->inputs, tr->targets);
    tr->pipe_run.total += tr->pipe.last.total; /* the measured bubble (pp > 1) */
    tr->pipe_run.busy += tr->pipe.last.busy;
    tr->pipe_run.waiting += tr->pipe.last.waiting;
    double dt = monotonic_seconds() - t0;
    tr->train_seconds += dt;
    tr->step++;
    double tokens = (double)c->micro_batch * c->seq_len * c->grad_accum * tr->grid->dp;
    struct step_metrics m = {
        .tokens = tokens, .model_flops = tr->model_flops_per_step, .loss = (float)r.loss,
        .val_loss = NO_VAL_LOSS, .lr = lr_at(&tr->engine.o.zero.optim.lr, tr->step - 1), .grad_norm = r.grad_norm,
        .ms = dt * 1e3, .tokens_per_s = tokens / dt, .optimizer_ms = r.optimizer_s * 1e3, .nonfinite = !r.updated,
        .joules = NAN, .planned_joules = NAN};
    /* the FLOPs, the MFU and the joules: the observers' (collective when energy is measured) */
    step_hook(hooks, (struct step_event){.at = STEP_ENDS, .step = tr->step, .metrics = &m});
    return m;
}

/* A step whose update was not applied: 0 to go on (skip_step, within the
 * limit), -1 with the message otherwise, which says what save_state holds
 * (saved_step: the step of the last state this run wrote there, -1 none).
 * Every rank decides alike (the loss and norm are agreed), so no rank is
 * left waiting. */
static int on_nonfinite(struct trainer *tr, const struct step_metrics *m, int saved_step,
                        char err[TRAINER_ERR_LEN]) {
    const struct config *c = tr->cfg;
    char what[96], kept[CONFIG_PATH_LEN + 96] = "";
    if (!isfinite(m->loss)) snprintf(what, sizeof what, "the loss is %g", (double)m->loss);
    else snprintf(what, sizeof what, "the gradient norm is %g (loss %g)", m->grad_norm, (double)m->loss);
    if (*c->save_state && saved_step >= 0)
        snprintf(kept, sizeof kept, "; %s keeps the state written after step %d", c->save_state, saved_step);
    else if (*c->save_state)
        snprintf(kept, sizeof kept, "; this run wrote no state to %s (%s)", c->save_state,
                 access(c->save_state, F_OK) == 0 ? "it holds what it held before" : "it does not exist");
    if (c->on_nonfinite == NONFINITE_SKIP_STEP) {
        tr->skipped_steps++;
        if (tr->skipped_steps <= c->max_skipped_steps) return 0;
        snprintf(err, TRAINER_ERR_LEN,
                 "step %d: %s (non-finite): %d updates skipped, more than max_skipped_steps = %d; training stops "
                 "without saving%s",
                 tr->step, what, tr->skipped_steps, c->max_skipped_steps, kept);
        return -1;
    }
    snprintf(err, TRAINER_ERR_LEN,
             "step %d: %s (non-finite): its update was not applied and training stops without saving "
             "(on_nonfinite = stop)%s. Lower lr, set grad_clip, or use --on_nonfinite skip_step",
             tr->step, what, kept);
    return -1;
}

/* The writes of the run's files, each checked again as it is opened
 * (trainer_recheck_output). */
static int save_state_checked(struct trainer *tr, const char *key, const char *path, char err[TRAINER_ERR_LEN]) {
    return trainer_recheck_output(tr, key, path, err) == 0 ? trainer_save_state(tr, path, err) : -1;
}
static int save_model_checked(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    const char *path = tr->cfg->save;
    return trainer_recheck_output(tr, "--save", path, err) == 0 ? trainer_save_model(tr, path, err) : -1;
}

/* A resume state (key at path) could not be written (err says why): the
 * model file is still written, so the run's weights are not lost with it.
 * Returns -1, err naming both files. */
static int save_model_after(struct trainer *tr, const char *key, const char *path, char err[TRAINER_ERR_LEN]) {
    const struct config *c = tr->cfg;
    if (!*c->save) return -1;
    char first[TRAINER_ERR_LEN], second[TRAINER_ERR_LEN];
    snprintf(first, sizeof first, "%s", err);
    bool saved = save_model_checked(tr, second) == 0;
    snprintf(err, TRAINER_ERR_LEN, "%s %.150s was not written: %.250s; --save %.150s %s%.250s", key, path, first,
             c->save, saved ? "was written" : "failed too: ", saved ? "" : second);
    return -1;
}

/* A stop signal reached some rank, agreed at a step boundary: every rank
 * writes the resume state where the start-up banner said, unless
 * save_state already holds this step; if it cannot, the model file as at
 * the end. Returns the signal's number. */
static int stop_run(struct trainer *tr, int sig, int saved_step, char err[TRAINER_ERR_LEN]) {
    char path[FILEIO_PATH_LEN];
    trainer_stop_state_path(tr->cfg, path);
    if (saved_step == tr->step && strcmp(path, tr->cfg->save_state) == 0) return sig;
    const char *key = *tr->cfg->save_state ? "--save_state" : "the stop state";
    return save_state_checked(tr, key, path, err) == 0 ? sig : save_model_after(tr, key, path, err);
}

int trainer_run(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    const struct config *c = tr->cfg;
    int saved_step = -1; /* the step of the last state written to save_state */
    while (tr->step < c->steps && (tr->stop_after <= 0 || tr->step < tr->stop_after)) {
        /* one scalar all-reduce per step, off the books like trainer_agree */
        int sig = stop_signal_pending();
        if (!sig && tr->stdout_broken) sig = SIGPIPE;
        if (tr->json_errno) sig = TRAINER_STOP_LOG; /* above every signal: the agreed maximum says it */
        sig = trainer_agree_max(tr, sig);
        if (sig > 0) {
            if (tr->grid->world_rank == 0) progress_end_line(&tr->progress, stdout);
            return stop_run(tr, sig, saved_step, err);
        }
        run_team_follow(tr);
        struct step_metrics m = train_step(tr);
        if (m.nonfinite && on_nonfinite(tr, &m, saved_step, err) != 0) {
            log_step(tr, &m, true);
            return -1;
        }
        bool last = tr->step == c->steps, stop = tr->step == tr->stop_after;
        if (tr->has_val && (tr->step % c->val_every == 0 || last)) m.val_loss = tr->last_val_loss = trainer_validate(tr);
        bool periodic = c->save_state_every > 0 && tr->step % c->save_state_every == 0;
        bool saves = *c->save_state && (periodic || last || stop);
        trainer_sample_device_memory(tr);
        log_step(tr, &m, last || stop || saves || has_val_loss(m.val_loss));
        if (saves) {
            if (save_state_checked(tr, "--save_state", c->save_state, err) != 0)
                return last ? save_model_after(tr, "--save_state", c->save_state, err) : -1;
            saved_step = tr->step;
        }
    }
    if (tr->step < c->steps) return 0; /* stopped early: no final model */
    return *c->save ? save_model_checked(tr, err) : 0;
}
