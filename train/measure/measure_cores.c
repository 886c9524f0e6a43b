/* How many of the machine's cores others keep busy (train/measure/machine.h:
 * machine_cpu_times, machine_cores_used_by_others): the CPU time every
 * core spent busy (/proc/stat's first line) less this process's own (all
 * its threads: /proc/self/stat's utime and stime), over a window's wall
 * time. A rank's threads wait for each other at every parallel region, so
 * a thread that shares its core with another process holds up them all
 * (docs/THREADS.md): the banner says when a run asks for more threads than
 * the cores it found free, and between steps the run's team follows the
 * cores left free (core_watch). Others include this job's other ranks on
 * the host: they take cores as any process does. */
#include <stdio.h>
#include <unistd.h>

#include "clock.h"
#include "machine.h"

struct cpu_times machine_cpu_times(void) {
    struct cpu_times t = {0};
    double ticks = (double)sysconf(_SC_CLK_TCK);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    FILE *f = fopen("/proc/stat", "r");
    if (!f || ticks <= 0 || cores < 1) {
        if (f) fclose(f);
        return t;
    }
    /* cpu  user nice system idle iowait irq softirq steal (USER_HZ ticks) */
    unsigned long long v[8];
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]);
    fclose(f);
    f = fopen("/proc/self/stat", "r");
    unsigned long utime = 0, stime = 0;
    /* pid (comm) state, then 10 fields, then utime and stime (fields 14, 15);
     * comm may hold spaces, so skip to its closing parenthesis */
    int m = f ? fscanf(f, "%*d (%*[^)]) %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) : 0;
    if (f) fclose(f);
    if (n != 8 || m != 2) return t;
    double busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]), idle = (double)(v[3] + v[4]);
    t = (struct cpu_times){.busy = busy / ticks, .total = (busy + idle) / ticks,
                           .self = (double)(utime + stime) / ticks, .cores = (int)cores, .ok = true};
    return t;
}

double machine_cores_used_by_others(const struct cpu_times *a, const struct cpu_times *b) {
    if (!a->ok || !b->ok || b->cores < 1) return -1.0;
    double wall = (b->total - a->total) / b->cores; /* every core's ticks advance with the clock */
    if (wall <= 0) return -1.0;
    double others = (b->busy - a->busy - (b->self - a->self)) / wall;
    return others < 0 ? 0.0 : others > b->cores ? b->cores : others;
}

/* A core others keep busy at least this share of the time is theirs. */
static const double WHOLE_CORE = 0.5;

int machine_threads_that_fit(int requested, int cores, double busy) {
    if (busy < 0 || cores < 1) return requested;
    int fit = (int)(cores - busy + WHOLE_CORE);
    return fit < 1 ? 1 : fit > requested ? requested : fit;
}

void core_watch_start(struct core_watch *w, double window, const struct cpu_times *now) {
    *w = (struct core_watch){.start = *now, .window = window, .busy = -1.0, .due = monotonic_seconds() + window};
}

bool core_watch_due(const struct core_watch *w) { return monotonic_seconds() >= w->due; }

bool core_watch_sample(struct core_watch *w, const struct cpu_times *now) {
    if (!w->start.ok) { /* /proc could not say at the start: try from here */
        w->start = *now;
        return false;
    }
    double seconds = now->ok && now->cores > 0 ? (now->total - w->start.total) / now->cores : 0.0;
    if (seconds < w->window) return false;
    w->busy = machine_cores_used_by_others(&w->start, now);
    w->seconds = seconds;
    w->due = monotonic_seconds() + w->window;
    w->start = *now;
    return w->busy >= 0;
}
