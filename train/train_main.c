/* build/train: parse the configuration, train, report. Runs alone or under
 * mpirun; this build trains on one rank (data parallelism comes with the
 * ZeRO engine), so a larger world is refused on every rank. */
#include <cblas.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "peak.h"
#include "trainer.h"

static int fail(int rank, const char *msg) {
    if (rank == 0) fprintf(stderr, "error: %s\n", msg);
    MPI_Finalize();
    return 1;
}

static void print_banner(const struct config *c, const struct trainer *tr) {
    const struct model_layout *lay = &tr->engine.lay;
    printf("shardlab train: GPT-2 L=%d C=%d NH=%d T=%d V=%d (padded %d), %zu parameters\n", c->n_layer, c->d_model,
           c->n_head, c->seq_len, c->vocab_size, lay->shape.Vp, lay->total);
    printf("precision: params %s%s, grads %s, activations %s, rounding %s\n", dtype_name(c->param_dtype),
           c->param_dtype == DTYPE_BF16 ? " (+ fp32 master)" : "", dtype_name(c->grad_dtype),
           dtype_name(c->act_dtype), c->rounding == ROUND_NEAREST ? "nearest-even" : "stochastic");
    printf("batch: micro_batch %d x grad_accum %d x 1 rank = %d sequences = %d tokens per step\n", c->micro_batch,
           c->grad_accum, c->micro_batch * c->grad_accum, c->micro_batch * c->grad_accum * c->seq_len);
    printf("data: %s (%zu samples%s), val %s\n", c->train_data, tr->train.n_samples,
           c->shuffle ? ", shuffled" : ", sequential", tr->has_val ? c->val_data : "(none)");
    printf("peak: %.1f GFLOP/s (%s)\n", tr->peak_flops / 1e9,
           c->peak_flops > 0 ? "peak_flops from the config" : "measured: FMA microbenchmark x threads");
    printf("threads: %d | steps %d from step %d | lr %g %s, warmup %d\n", c->threads, c->steps, tr->step, c->lr,
           c->lr_schedule == LR_COSINE ? "cosine" : "constant", c->warmup_steps);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    struct config cfg;
    config_defaults(&cfg);
    char err[TRAINER_ERR_LEN];
    bool help = false;
    if (config_parse_args(&cfg, argc, argv, &help, err) != 0 || config_validate(&cfg, err) != 0)
        return fail(rank, err);
    if (help) {
        if (rank == 0) config_print_help(stdout, argv[0]);
        MPI_Finalize();
        return 0;
    }
    if (world > 1) {
        snprintf(err, sizeof err,
                 "this build trains on one rank; %d ranks were started (data parallelism and ZeRO are not "
                 "part of it yet)",
                 world);
        return fail(rank, err);
    }
    omp_set_num_threads(cfg.threads);
    openblas_set_num_threads(cfg.threads);

    struct trainer tr;
    if (trainer_open(&tr, &cfg, err) != 0) return fail(rank, err);
    tr.peak_flops = cfg.peak_flops > 0 ? cfg.peak_flops : measure_peak_flops(cfg.threads);
    print_banner(&cfg, &tr);
    report_buffers(stdout, &tr);
    report_memory(stdout, NULL, &tr, "after allocation");
    printf("\n");
    int start = tr.step;
    int rc = trainer_run(&tr, err);
    if (rc == 0) {
        printf("\ntrained %d steps in %.1f s\n", tr.step, tr.train_seconds);
        if (cfg.sample_tokens > 0) {
            printf("\nsample (%d tokens, temperature %.2f):\n", cfg.sample_tokens, cfg.sample_temperature);
            trainer_sample(&tr, stdout);
        }
        report_memory(stdout, tr.json, &tr, "end of run");
        report_flops(stdout, &tr, tr.step - start);
        report_comm(stdout, &tr);
    } else {
        fprintf(stderr, "error: %s\n", err);
    }
    trainer_close(&tr);
    MPI_Finalize();
    return rc == 0 ? 0 : 1;
}
