/* The run's OpenMP team follows the cores other processes leave free.
 *
 * A rank's threads wait for each other at the end of every parallel
 * region, so one thread that shares its core with another process holds
 * up the whole team: on 2 cores with one busy, a 2-thread step took 2.5 to
 * 4x its quiet time, while 1 thread took 1.7x (bench/RESULTS.md). So
 * between steps, once per window, the rank measures how many cores others
 * kept busy (machine.h's core_watch: /proc/stat less this process's own
 * time) and sizes its team to the threads that fit, from 1 up to
 * --threads: fewer when a process takes a core, all of them again when
 * it leaves.
 *
 * The team's size never changes a run's numbers: every kernel splits its
 * work by the shape, not by the thread count (the GEMMs in fixed blocks,
 * model/cpu/matmul.c; the sums in fixed parts or row order), so a run
 * gives the same bits on 1 or N threads, and tests/threads_bits.sh checks
 * it, for the fp32 GEMMs and oneDNN's bf16 ones alike (their fixed blocks
 * are one-thread primitives: model/cpu/matmul_onednn.c). A GPU run's team
 * stays fixed, and the banner says why: its threads only feed the device.
 * Buffers sized by the thread
 * count (the attention's per-thread scratch) are sized for --threads, the
 * largest the team gets. */
#include <omp.h>
#include <stdio.h>

#include "run_team.h"

/* A window long enough for /proc's 100 Hz tick counts to resolve a tenth
 * of a core, short enough to answer within a second or two of a change. */
static const double TEAM_WINDOW_SECONDS = 1.0;

static void resize(struct trainer *tr, int size) {
    tr->team = size;
    omp_set_num_threads(size);
}

bool run_team_start(struct trainer *tr, int cores, double busy, char *why, size_t why_len) {
    const struct config *c = tr->cfg;
    tr->team = c->threads;
    tr->team_follows = false;
    why[0] = '\0';
    if (!c->threads_adapt) snprintf(why, why_len, "--threads_adapt 0");
    else if (c->threads == 1) snprintf(why, why_len, "--threads 1");
    else if (tr->space == MEM_DEVICE) snprintf(why, why_len, "the model runs on a GPU");
    if (why[0]) return false;
    tr->team_follows = true;
    struct cpu_times now = machine_cpu_times();
    core_watch_start(&tr->cores, TEAM_WINDOW_SECONDS, &now);
    resize(tr, machine_threads_that_fit(c->threads, cores, busy));
    return true;
}

void run_team_follow(struct trainer *tr) {
    if (!tr->team_follows || !core_watch_due(&tr->cores)) return;
    struct cpu_times now = machine_cpu_times();
    if (!core_watch_sample(&tr->cores, &now)) return;
    int fit = machine_threads_that_fit(tr->cfg->threads, now.cores, tr->cores.busy);
    if (fit == tr->team) return;
    if (tr->grid->world_rank == 0) progress_end_line(&tr->progress, stdout);
    printf("rank %d: team %d -> %d thread%s after step %d: other processes kept %.1f of the %d cores busy over the "
           "last %.1f s\n",
           tr->grid->world_rank, tr->team, fit, fit == 1 ? "" : "s", tr->step, tr->cores.busy, now.cores,
           tr->cores.seconds);
    fflush(stdout);
    resize(tr, fit);
}
