/* The measured-vs-theory tables, per rank. train_main gathers each rank's
 * numbers into an array (rank order) and rank 0 prints. */
#ifndef SHARDLAB_REPORT_H
#define SHARDLAB_REPORT_H

#include <stdio.h>

#include "collectives.h"
#include "grid.h"
#include "mem.h"
#include "../measure/trainer.h"

/* One group's comm counters on one rank (calls as doubles too). */
struct rank_comm {
    double bytes[COLL_NUM_KINDS], calls[COLL_NUM_KINDS], seconds, exposed_seconds;
};

/* Doubles only: train_main gathers it as RANK_STATS_DOUBLES doubles. */
struct rank_stats {
    double live[MEM_NUM_CATEGORIES], peak[MEM_NUM_CATEGORIES];
    double tracked_peak, rss;
    double startup_tracked_peak, startup_rss; /* at the end of trainer_open: init or load done */
    double steady_tracked;  /* tracked bytes live when collected: the run's steady state */
    double one_unit;        /* bytes of the one-unit staging a save or load uses */
    struct rank_comm comm[GROUP_NUM];  /* per group of the grid: dp, tp, pp, tie */
    double pipe_total, pipe_busy, pipe_waiting; /* seconds in the schedule over the run (include/schedule.h) */
    double attention_flops; /* the run's attention FLOPs (exec_ctx.attention): cp's balance, report_cp_flops */
    /* a GPU run: tracked device bytes (peak) beside the driver's used bytes
     * (cudaMemGetInfo, highest seen at start-up and after each step) and
     * the device's total; all 0 on the CPU */
    double device_tracked_peak, device_used_peak, device_total;
};

enum { RANK_STATS_DOUBLES = sizeof(struct rank_stats) / sizeof(double) };

void rank_stats_collect(const struct trainer *tr, struct rank_stats *out);

/* What the libraries (MPI, OpenBLAS, OpenMP, libc, code, the data loader's
 * token buffer) may add to a rank's peak RSS beyond the tracked buffers:
 * measured on the tiny config (bench/RESULTS.md), with headroom. A rank's
 * peak RSS, at start-up and over the run, stays within tracked peak + this
 * (the tracked peak includes the one-unit staging of init and saves). */
enum { RSS_LIBRARY_ALLOWANCE = 64 << 20 };
/* The same for a rank on a GPU: CUDA's libraries add their own host memory. */
enum { RSS_CUDA_ALLOWANCE = 1536 << 20 };
/* An AddressSanitizer build (make san-test) keeps shadow memory and a
 * quarantine of freed blocks in the same RSS: tiny.conf's bf16 ZeRO-1 run on
 * 2 ranks measured 63-64 MiB untracked under ASan against 36 MiB without
 * (AMD Zen 4), so such a build adds this much to either allowance. */
#if defined(__SANITIZE_ADDRESS__)
enum { RSS_SANITIZER_ALLOWANCE = 64 << 20 };
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
enum { RSS_SANITIZER_ALLOWANCE = 64 << 20 };
#else
enum { RSS_SANITIZER_ALLOWANCE = 0 };
#endif
#else
enum { RSS_SANITIZER_ALLOWANCE = 0 };
#endif

void report_buffers(FILE *out, const struct trainer *tr);
/* json: when not NULL, a "memory_setup" record (ZeRO stage, ranks, tp, pp,
 * Psi, recompute), then memory records, one per rank and category. */
void report_memory(FILE *out, FILE *json, const struct trainer *tr, const struct rank_stats *ranks, int n,
                   const char *when);
void report_flops(FILE *out, const struct trainer *tr, int steps);
/* Rank 0's kernel time per step by kind (the CUDA build's profile:
 * include/counters.h); nothing when no kernel was profiled (the CPU build). */
void report_kernels(FILE *out, FILE *json, const struct trainer *tr, int steps);
/* The run's energy (train/report/report_energy.c): the joules of every
 * counted meter per step, per token and as model TFLOP per joule, beside
 * the planner's E = t x P, or "not available here" and why; json: when not
 * NULL, one "energy" record. report_energy_line: the banner's "energy:" line. */
void report_energy(FILE *out, FILE *json, const struct trainer *tr, int steps);
void report_energy_line(FILE *out, const struct trainer *tr);
/* Per group with traffic on any rank (dp always): bytes per step by kind,
 * with ZeRO's theory beside the dp rows ("-" elsewhere, for now); then the
 * time collectives were in flight and the part exposed (the compute thread
 * waiting), per step on rank 0. json: when not NULL, each row the table
 * shows as one "comm" record per rank (bytes and calls per step, theory or
 * null), for build/report. */
void report_comm(FILE *out, FILE *json, const struct trainer *tr, const struct rank_stats *ranks, int n,
                 int steps);
/* The memory timeline of the latest step (train/measure/timeline.h), ranks[]
 * in rank order: each rank's peak in use, its phase and the theory's peak;
 * json: a "memory_phase" record for every phase of every rank. */
void report_timeline(FILE *out, FILE *json, const struct trainer *tr, const struct mem_timeline *ranks, int n);
/* pp > 1: per rank its stage (layers, embedding, head), the schedule's
 * slots, the activation bytes beside the schedule's formula, the
 * boundary traffic beside its formula, and the measured bubble (1 - busy
 * / time in the schedule) beside (p - 1) / (m + p - 1). json: a
 * "pipeline" record per rank. */
void report_pipeline(FILE *out, FILE *json, const struct trainer *tr, const struct rank_stats *ranks, int n,
                     int steps);
/* --explain: for every unit, who owns which elements and which tensors the
 * cut passes through; which buffers each rank holds in full or in part. */
void report_shard_map(FILE *out, const struct trainer *tr);
/* --explain 2 (train/report/report_unit_life.c): each phase of one step on
 * every rank (its layout and schedule), ZeRO's collectives and releases
 * there and the bytes live from the timeline's theory. */
void report_unit_life(FILE *out, const struct trainer *tr);
/* --explain at tp > 1 (train/report/report_shardmap_tp.c): each tp rank's slice of every
 * tensor: rows, columns, heads, vocabulary rows and their padding. */
void report_tp_map(FILE *out, const struct trainer *tr);
/* --explain at cp > 1 (train/report/report_cp.c): the positions each cp
 * rank holds, the causal work of each (and of a contiguous split), the
 * ring. */
void report_cp_map(FILE *out, const struct trainer *tr);
/* At cp > 1: every rank's attention FLOPs per step beside its theory, equal
 * on every rank (the load-balanced split). */
void report_cp_flops(FILE *out, const struct trainer *tr, const struct rank_stats *ranks, int n, int steps);

#endif
