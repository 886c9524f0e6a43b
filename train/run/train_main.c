/* build/train: parse the configuration, build the process grid, train,
 * report. Runs alone (a 1-rank world) or under mpirun; N ranks form a
 * dp x cp x tp x pp grid (--cp, --tp, --pp; dp = N / (cp x tp x pp), with
 * ZeRO stage --zero over dp x cp). Rank 0 prints; every rank exits non-zero on any error. */
#include <cblas.h>
#include <errno.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/ckpt.h"
#include "fileio.h"
#include "device.h"
#include "run_device_grid.h"
#include "grid.h"
#include "run_outputs.h"
#include "../measure/peak.h"
#include "../report/report.h"
#include "../report/run_record.h"
#include "run_stop_signal.h"
#include "run_team.h"
#include "../theory/theory.h"
#include "../measure/trace_file.h"
#include "run.h"

/* Every rank fails together: the messages are gathered to rank 0, which
 * prints each distinct one once (and "another rank failed" only if nothing
 * better was said). Then every rank exits non-zero. */
static int fail(int rank, int world, const char *msg) {
    enum { LEN = TRAINER_ERR_LEN };
    char mine[LEN];
    snprintf(mine, sizeof mine, "%s", msg);
    char *all = rank == 0 ? calloc((size_t)world, LEN) : NULL;
    MPI_Gather(mine, LEN, MPI_CHAR, all, LEN, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        int printed = 0;
        for (int r = 0; r < world; r++) {
            const char *m = all + (size_t)r * LEN;
            bool seen = !m[0] || strstr(m, "another rank failed");
            for (int q = 0; q < r && !seen; q++) seen = strcmp(m, all + (size_t)q * LEN) == 0;
            if (seen) continue;
            char who[256] = "";
            size_t used = 0;
            for (int q = r; q < world && used + 16 < sizeof who; q++)
                if (strcmp(m, all + (size_t)q * LEN) == 0)
                    used += (size_t)snprintf(who + used, sizeof who - used, "%s%d", used ? "," : "", q);
            if (world > 1) fprintf(stderr, "error (rank %s): %s\n", who, m);
            else fprintf(stderr, "error: %s\n", m);
            printed++;
        }
        if (!printed) fprintf(stderr, "error: %s\n", all[0] ? all : "a rank failed");
        free(all);
    }
    MPI_Finalize();
    return 1;
}

/* The input keys whose files the ranks compare by contents
 * (agree_contents), so each rank may spell or reach them its own way
 * (data/kjv_train.bin, ./data/kjv_train.bin, mpirun -wdir): their value there, NULL for another
 * key. Only whether each is given is compared with the configuration. */
static const char *by_contents(const char *key, const struct config *c) {
    if (strcmp(key, "train_data") == 0) return c->train_data;
    if (strcmp(key, "val_data") == 0) return c->val_data;
    if (strcmp(key, "init_from") == 0) return c->init_from;
    return NULL;
}

/* Every rank parsed its arguments (mpirun's "A : B" form starts ranks with
 * different ones) and all run one configuration: each key's value
 * checksummed (CRC32C; the input files' keys only by whether they are
 * given, by_contents),
 * the min and max of every hash over the world; a key whose min and max
 * differ is named, on every rank, before anything is opened. */
static int agree_config(const struct config *c, int mine, const char *differ, char err[TRAINER_ERR_LEN]) {
    int all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all != 0) {
        if (mine == 0) snprintf(err, TRAINER_ERR_LEN, "another rank failed reading its configuration");
        return -1;
    }
    int n = config_num_keys();
    uint32_t *h = malloc(3 * (size_t)n * sizeof *h), *lo = h + n, *hi = h + 2 * n;
    if (!h) MPI_Abort(MPI_COMM_WORLD, 1); /* a few hundred bytes */
    for (int i = 0; i < n; i++) {
        const char *path = by_contents(config_key_name(i), c);
        h[i] = path ? *path != '\0' : config_key_hash(c, i);
    }
    MPI_Allreduce(h, lo, n, MPI_UINT32_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(h, hi, n, MPI_UINT32_T, MPI_MAX, MPI_COMM_WORLD);
    size_t used = 0;
    for (int i = 0; i < n && used + 64 < TRAINER_ERR_LEN; i++)
        if (lo[i] != hi[i])
            used += (size_t)snprintf(err + used, TRAINER_ERR_LEN - used, "%s%s",
                                     used ? ", " : differ,
                                     config_key_name(i));
    free(h);
    if (!used) return 0;
    snprintf(err + used, TRAINER_ERR_LEN - used, " differ%s (every rank must run one configuration)",
             strchr(err, ',') ? "" : "s");
    return -1;
}

/* The files each rank read, compared by contents (a path may be spelled,
 * or lead, differently on each rank: mpirun -wdir): the --init_from
 * file's CRC32C (tr NULL: before the trainer opens), then the data
 * loaders' digests (include/data.h's data_content). A difference is
 * refused, naming the first rank whose contents differ from rank 0's. */
enum { CONTENT_INIT_FROM, CONTENT_TRAIN, CONTENT_VAL, CONTENT_KINDS };

static int agree_contents(const struct config *c, const struct trainer *tr, int world, char err[TRAINER_ERR_LEN]) {
    uint32_t mine[CONTENT_KINDS] = {0};
    int ok = 1, all_ok = 0;
    char e2[FILEIO_ERR_LEN];
    if (!tr && file_crc32c(c->init_from, &mine[CONTENT_INIT_FROM], e2) != 0) ok = 0;
    if (tr) {
        mine[CONTENT_TRAIN] = tr->train.content.digest;
        mine[CONTENT_VAL] = tr->has_val ? tr->val.content.digest : 0;
    }
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        snprintf(err, TRAINER_ERR_LEN, "%s", ok ? "another rank failed reading --init_from" : e2);
        return -1;
    }
    uint32_t *all = malloc((size_t)world * sizeof mine);
    if (!all) MPI_Abort(MPI_COMM_WORLD, 1); /* a few bytes per rank */
    MPI_Allgather(mine, CONTENT_KINDS, MPI_UINT32_T, all, CONTENT_KINDS, MPI_UINT32_T, MPI_COMM_WORLD);
    static const char *const key[CONTENT_KINDS] = {"--init_from", "train_data", "val_data"};
    const char *path[CONTENT_KINDS] = {c->init_from, c->train_data, c->val_data};
    int rc = 0;
    for (int r = 1; r < world && rc == 0; r++)
        for (int k = 0; k < CONTENT_KINDS && rc == 0; k++) {
            uint32_t theirs = all[(size_t)r * CONTENT_KINDS + k], first = all[k];
            if (theirs == first) continue;
            snprintf(err, TRAINER_ERR_LEN,
                     "rank %d's %s %.300s has other contents than rank 0's (%s 0x%08x, rank 0 0x%08x): every rank "
                     "must read the same files (the same contents under another path are fine)",
                     r, key[k], path[k], k == CONTENT_INIT_FROM ? "CRC32C" : "data digest", (unsigned)theirs,
                     (unsigned)first);
            rc = -1;
        }
    free(all);
    return rc;
}

/* Everything printed reached stdout: a failed write (stdout on a full
 * disk, > /dev/full) is an error naming its reason, never exit 0. A run
 * stopped because its stdout's reader went away (EPIPE) said so on stderr
 * (say_stopped): its status is the stop's. */
static int stdout_written(const struct trainer *tr, int rc, char err[TRAINER_ERR_LEN]) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
    if (rc > 0 && tr->stdout_broken) return 0;
    snprintf(err, TRAINER_ERR_LEN, "writing the run's output to stdout failed: %s",
             errno ? strerror(errno) : "an earlier write failed");
    return -1;
}

/* Trials of the peak: at least this many, over at least this long (the
 * start-up cost, after a ~8 ms warm-up trial). */
enum { PEAK_MIN_TRIALS = 5 };
static const double PEAK_SECONDS = 0.3;

static void print_banner(const struct config *c, const struct trainer *tr, const struct run_record *run) {
    const struct model_layout *lay = &tr->engine.lay;
    const struct grid *g = tr->grid;
    char positions[48] = ""; /* a position table longer than the run's sequences (an llm.c file's) */
    if (lay->shape.maxT != c->seq_len) /* LLaMA has no table: its file's block_size */
        snprintf(positions, sizeof positions, " (%s %d)", c->arch == ARCH_LLAMA ? "block_size" : "position table",
                 lay->shape.maxT);
    /* the whole model's count; under tp or pp rank 0 holds a share of it */
    char share[64] = "";
    if (lay->total != lay->ref_total) snprintf(share, sizeof share, " (rank 0 holds %zu)", lay->total);
    char blocks[96] = "GPT-2"; /* LLaMA's: its key/value heads, MLP width and RoPE */
    if (c->arch == ARCH_LLAMA)
        snprintf(blocks, sizeof blocks, "LLaMA KV=%d F=%d rope_theta=%g%s eps=%g", kv_heads(&lay->shape),
                 mlp_width(&lay->shape), (double)c->rope_theta, c->rope_scaled ? " (3.1 scaling)" : "",
                 (double)c->norm_eps);
    printf("shardlab train: %s L=%d C=%d NH=%d T=%d%s V=%d (padded %d), %zu parameters%s\n", blocks, c->n_layer,
           c->d_model, c->n_head, c->seq_len, positions, c->vocab_size, lay->shape.Vp, lay->ref_total, share);
    printf("precision: params %s%s, grads %s, activations %s, rounding %s\n", dtype_name(c->param_dtype),
           c->param_dtype == DTYPE_BF16 ? " (+ fp32 master)" : "", dtype_name(c->grad_dtype),
           dtype_name(c->act_dtype), c->rounding == ROUND_NEAREST ? "nearest-even" : "stochastic");
    if (g->cp == 1)
        printf("grid: %d rank%s = dp %d x tp %d x pp %d; ZeRO-%d over the %d data-parallel ranks\n", g->world_size,
               g->world_size == 1 ? "" : "s", g->dp, g->tp, g->pp, c->zero, g->dp);
    else /* cp ranks hold the same weights: gradients and ZeRO over dp x cp */
        printf("grid: %d ranks = dp %d x cp %d x tp %d x pp %d; ZeRO-%d over the %d ranks of dp x cp; each cp rank "
               "holds %d of the %d positions of every sequence\n", g->world_size, g->dp, g->cp, g->tp, g->pp, c->zero,
               g->dp * g->cp, c->seq_len / g->cp, c->seq_len);
    /* not in int: micro_batch and grad_accum go up to 2^20 each; a double is
     * exact to 2^53 and cannot overflow */
    double sequences = (double)c->micro_batch * c->grad_accum * g->dp;
    printf("batch: micro_batch %d x grad_accum %d x dp %d = %.0f sequences = %.0f tokens per step\n", c->micro_batch,
           c->grad_accum, g->dp, sequences, sequences * c->seq_len);
    printf("data: %s (%zu samples%s), val %s\n", c->train_data, tr->train.n_samples,
           c->shuffle ? ", shuffled" : ", sequential", tr->has_val ? c->val_data : "(none)");
    run_record_print(stdout, run);
    run_record_print_threads(stdout, run);
    config_print_optimizer(stdout, c);
    report_energy_line(stdout, tr);
    printf("steps %d from step %d | lr %g %s, warmup %d\n", c->steps, tr->step, c->lr,
           c->lr_schedule == LR_COSINE ? "cosine" : "constant", c->warmup_steps);
    char stop[FILEIO_PATH_LEN];
    trainer_stop_state_path(c, stop);
    printf("stop: SIGTERM, SIGINT, SIGHUP or SIGUSR1 finish the step, write a resume state to %s and exit %d\n",
           stop, SHARDLAB_EXIT_STOPPED);
}

/* The metrics log, closed: a write that failed on the way (a full disk)
 * is an error, not a short log and exit 0, whatever else ended the run.
 * A step record that failed stopped the run at that step (run_loop.c's
 * log_write_failed); stdio keeps the error flag of any other write, and
 * fclose writes what is still buffered. */
static int close_log(struct trainer *tr, char err[TRAINER_ERR_LEN]) {
    int why = tr->json_errno; /* the first failed write's reason */
    if (tr->json) {
        errno = 0;
        bool bad = ferror(tr->json) != 0;
        bad = fclose(tr->json) != 0 || bad;
        tr->json = NULL;
        if (bad && !why) why = errno ? errno : EIO;
    }
    if (!why) return 0;
    char at[96] = "";
    if (tr->json_failed_step > 0)
        snprintf(at, sizeof at, " at step %d's record (it keeps the records before it)", tr->json_failed_step);
    snprintf(err, TRAINER_ERR_LEN, "writing log_json %.400s failed%s: %s", tr->cfg->log_json, at, strerror(why));
    return -1;
}

/* close_log on every path: its error becomes the run's, or joins the one
 * that already ended it. */
static int finish_log(struct trainer *tr, int rc, char err[TRAINER_ERR_LEN]) {
    char mine[TRAINER_ERR_LEN] = "";
    if (trainer_agree(tr, close_log(tr, mine), mine) == 0) return rc;
    if (rc >= 0) snprintf(err, TRAINER_ERR_LEN, "%s", mine);
    else if (*mine && !strstr(mine, "another rank failed")) {
        size_t used = strlen(err);
        snprintf(err + used, TRAINER_ERR_LEN - used, "; and %.500s", mine);
    }
    return -1;
}

static int print_stopped(FILE *out, const struct trainer *tr, int sig) {
    char stop[FILEIO_PATH_LEN];
    trainer_stop_state_path(tr->cfg, stop);
    fprintf(out, "\nstopped by %s after step %d of %d: resume state in %s (continue with --resume %s)\n",
            stop_signal_name(sig), tr->step, tr->cfg->steps, stop, stop);
    return fflush(out);
}

/* The stop, said by rank 0 on stdout; on stderr when stdout is a pipe
 * whose reader is gone (the stop's cause, or found by this very line). */
static void say_stopped(struct trainer *tr, int sig) {
    if (!tr->stdout_broken) {
        errno = 0;
        if (print_stopped(stdout, tr, sig) == 0 || errno != EPIPE) return;
        tr->stdout_broken = true;
    }
    fprintf(stderr, "stdout is a broken pipe (EPIPE: its reader is gone): the run stops here");
    print_stopped(stderr, tr, sig);
}

/* Every rank's numbers, gathered to rank 0 (ranks[] matters there only). */
static void gather_stats(const struct trainer *tr, struct rank_stats *ranks) {
    struct rank_stats mine;
    rank_stats_collect(tr, &mine);
    MPI_Gather(&mine, RANK_STATS_DOUBLES, MPI_DOUBLE, ranks, RANK_STATS_DOUBLES, MPI_DOUBLE, 0, MPI_COMM_WORLD);
}

/* Every rank's timeline of the latest step, gathered to rank 0 as bytes
 * (the same struct on every rank); NULL on the other ranks. */
static struct mem_timeline *gather_timelines(const struct trainer *tr, int rank, int world) {
    struct mem_timeline *all = rank == 0 ? calloc((size_t)world, sizeof *all) : NULL;
    MPI_Gather(&tr->timeline, (int)sizeof tr->timeline, MPI_BYTE, all, (int)sizeof tr->timeline, MPI_BYTE, 0,
               MPI_COMM_WORLD);
    return all;
}

/* --device (include/device.h), every rank agreeing; on GPUs the grid's
 * groups then move to NCCL (train/run/run_device_grid.h). */
static int open_device(const struct config *cfg, struct device_info *dev, struct grid *grid,
                       char err[TRAINER_ERR_LEN]) {
    int ok = device_open(cfg->device, cfg->gpu_path, cfg->gpu_unverified, dev, err, TRAINER_ERR_LEN) == 0, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        if (ok) snprintf(err, TRAINER_ERR_LEN, "another rank failed opening its device");
        return -1;
    }
    char gerr[GRID_ERR_LEN];
    if (device_grid_attach(dev, grid, gerr) != 0) {
        snprintf(err, TRAINER_ERR_LEN, "%s", gerr);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    struct config cfg;
    config_defaults(&cfg);
    char err[TRAINER_ERR_LEN] = "";
    bool help = false;
    int parsed = config_parse_args(&cfg, argc, argv, &help, err) != 0 || config_validate(&cfg, err) != 0 ? -1 : 0;
    if (agree_config(&cfg, parsed, "the ranks were started with different configurations: ", err) != 0)
        return fail(rank, world, err);
    if (help) {
        if (rank == 0) config_print_help(stdout, argv[0], false);
        MPI_Finalize();
        return 0;
    }
    if (*cfg.init_from) { /* the model's shape from the file; every rank reads it, and all agree */
        int mine = trainer_adopt_model_file(&cfg, err) == 0 ? config_validate(&cfg, err) : -1, all = 0;
        MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (all != 0) {
            if (mine == 0) snprintf(err, sizeof err, "another rank failed reading --init_from");
            return fail(rank, world, err);
        }
        /* the keys the file set (max_seq_len, the shape): each rank read its own copy */
        if (agree_config(&cfg, 0, "the ranks' --init_from files are of different models: ", err) != 0 ||
            agree_contents(&cfg, NULL, world, err) != 0)
            return fail(rank, world, err);
    }
    if (rank == 0) config_warnings(&cfg, stderr);
    struct grid grid;
    char gerr[GRID_ERR_LEN];
    if (grid_init(&grid, cfg.tp, cfg.cp, cfg.pp, gerr) != 0) return fail(rank, world, gerr);
    struct device_info dev;
    if (open_device(&cfg, &dev, &grid, err) != 0) {
        device_grid_free(&dev, &grid);
        return fail(rank, world, err);
    }
    cfg.device = dev.kind; /* what auto opened: the theory of what the run allocates follows it (config_gemm_dtype) */
    omp_set_num_threads(cfg.threads);
    openblas_set_num_threads(cfg.threads);

    /* from here a stop signal is a request the loop honours at a step boundary */
    stop_signal_install();
    struct trainer tr;
    if (trainer_open(&tr, &cfg, &grid, &dev, err) != 0) {
        device_grid_free(&dev, &grid);
        return fail(rank, world, err);
    }
    if (agree_contents(&cfg, &tr, world, err) != 0) {
        trainer_close(&tr);
        device_grid_free(&dev, &grid);
        return fail(rank, world, err);
    }
    struct run_record run = {.world_size = world, .threads = cfg.threads, .peak_measured = !(cfg.peak_flops > 0),
                             .cores_busy = -1.0};
    /* the cores others keep busy, over the peak probe (a few tenths of a
     * second with every thread of this rank at work) */
    struct cpu_times before = machine_cpu_times();
    if (tr.space == MEM_DEVICE) { /* MFU against the GPU: its data sheet's dense bf16 peak */
        run.on_gpu = true;
        /* the GPU's kernels (--gpu_path) and what verified them, or
         * UNVERIFIED and why: the trainer's device, which trainer_open may
         * have marked (run_device.c) */
        snprintf(run.gpu, sizeof run.gpu, "%s, gpu_path %s, %s", tr.dev.name, gpu_path_name(tr.dev.path),
                 tr.dev.verification);
        char perr[DEVICE_ERR_LEN];
        if (device_measure_peak(&dev, &run.gpu_peak, perr, sizeof perr) != 0 && rank == 0)
            fprintf(stderr, "warning: %s\n", perr);
        const struct theory_device *sheet_of = theory_device_of_gpu(dev.name);
        run.gpu_peak.spec_bf16 = sheet_of ? sheet_of->peak_flops : 0.0;
        double sheet = run.gpu_peak.spec_bf16 > 0 ? run.gpu_peak.spec_bf16 : run.gpu_peak.gemm_bf16;
        run.peak_flops = tr.peak_flops = run.peak_measured ? sheet : cfg.peak_flops;
    } else {
        /* MFU against the peak of the dtype the GEMMs run in: bf16 GEMMs
         * (oneDNN) against the bf16 GEMM's own best rate */
        run.peak_gemm = tr.flops.onednn != NULL;
        if (run.peak_measured && run.peak_gemm)
            peak_measure_bf16_gemm(&run.peak, tr.flops.onednn, cfg.threads, PEAK_MIN_TRIALS, PEAK_SECONDS);
        else if (run.peak_measured)
            peak_measure(&run.peak, cfg.threads, PEAK_MIN_TRIALS, PEAK_SECONDS);
        run.peak_flops = tr.peak_flops = run.peak_measured ? run.peak.best : cfg.peak_flops;
    }
    struct cpu_times after = machine_cpu_times();
    run.cores = after.cores;
    if (run.peak_measured) run.cores_busy = machine_cores_used_by_others(&before, &after);
    run_record_describe_threading(&run);
    run.team_follows = run_team_start(&tr, run.cores, run.cores_busy, run.team_fixed_why, sizeof run.team_fixed_why);
    tr.peak_source = run_record_peak_source(&run);
    /* a probed CPU peak follows the best rate the run measures */
    peak_tracker_start(&tr.peak, tr.peak_flops, run.peak_measured && !run.on_gpu);
    struct rank_stats *ranks = calloc((size_t)world, sizeof *ranks);
    gather_stats(&tr, ranks);
    if (rank == 0) {
        run_record_describe_machine(&run);
        run_record_describe_gemms(&run, &tr.flops, tr.gemm_dtype);
        print_banner(&cfg, &tr, &run);
        run_record_warn(stderr, &run);
        if (tr.json) run_record_json(tr.json, &run);
        if (cfg.explain >= 1) report_shard_map(stdout, &tr);
        if (cfg.explain >= 2) report_unit_life(stdout, &tr);
        report_buffers(stdout, &tr);
        report_memory(stdout, NULL, &tr, ranks, world, "after allocation");
        printf("\n");
        fflush(stdout);
    }
    int start = tr.step;
    int rc = trainer_run(&tr, err);
    if (rc >= 0 && *cfg.trace && trainer_recheck_output(&tr, "--trace", cfg.trace, err) != 0) rc = -1;
    if (rc >= 0 && trace_file_write(&tr, err) != 0) rc = -1; /* --trace: also after a stop signal */
    if (rc > 0 && rank == 0) say_stopped(&tr, rc);
    if (rc == 0) {
        if (rank == 0) {
            char val[64] = ""; /* validation runs between the steps: its time apart */
            if (tr.val_seconds > 0) snprintf(val, sizeof val, ", and validated in %.1f s", tr.val_seconds);
            printf("\ntrained %d steps in %.1f s%s\n", tr.step - start, tr.train_seconds, val);
        }
        if (cfg.sample_tokens > 0) {
            if (rank == 0)
                printf("\nsample (%d tokens, temperature %.2f):\n", cfg.sample_tokens, cfg.sample_temperature);
            struct exec_ctx steps_only = tr.flops; /* sampling is not part of a step's count */
            trainer_sample(&tr, rank == 0 ? stdout : NULL); /* every rank runs the forward (ZeRO-3 gathers) */
            device_kernels_sync(&tr.dev, &tr.flops); /* its spans end before the counter goes back */
            tr.flops = steps_only;
        }
        device_kernels_sync(&tr.dev, &tr.flops);
        gather_stats(&tr, ranks);
        struct mem_timeline *timelines = gather_timelines(&tr, rank, world);
        if (rank == 0) {
            report_memory(stdout, tr.json, &tr, ranks, world, "end of run");
            if (timelines) report_timeline(stdout, tr.json, &tr, timelines, world);
            report_flops(stdout, &tr, tr.step - start);
            report_cp_flops(stdout, &tr, ranks, world, tr.step - start);
            report_kernels(stdout, tr.json, &tr, tr.step - start);
            report_energy(stdout, tr.json, &tr, tr.step - start);
            report_comm(stdout, tr.json, &tr, ranks, world, tr.step - start);
            report_pipeline(stdout, tr.json, &tr, ranks, world, tr.step - start);
        }
        free(timelines);
    }
    rc = finish_log(&tr, rc, err); /* rank 0 writes it */
    if (rc >= 0 && trainer_agree(&tr, stdout_written(&tr, rc, err), err) != 0) rc = -1;
    free(ranks);
    trainer_close(&tr);
    device_grid_free(&dev, &grid);
    if (rc < 0) return fail(rank, world, err);
    MPI_Finalize();
    return rc > 0 ? SHARDLAB_EXIT_STOPPED : 0;
}
