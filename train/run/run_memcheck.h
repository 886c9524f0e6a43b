/* The memory check before allocation: the bytes a rank will hold at its
 * start-up peak, from the theory (train/theory/accounting.h, the numbers the
 * memory table prints) plus the libraries' allowance, against the memory
 * this host can still give. A run that would not fit is refused with the
 * breakdown and, for each lever (ZeRO stage, recompute, micro-batch, 8-bit
 * optimizer), the total it would give, unless --force 1. Without it a model
 * too big for memory grows until the kernel's OOM killer ends it, with no
 * message (rc 137). */
#ifndef SHARDLAB_MEMCHECK_H
#define SHARDLAB_MEMCHECK_H

#include <stddef.h>

#include "../config/config.h"
#include "../measure/trainer.h"

/* What the host can give a new allocation, bytes; each field < 0 when
 * unknown or unlimited. */
struct mem_available {
    double meminfo;     /* /proc/meminfo MemAvailable */
    double cgroup;      /* the tightest cgroup limit on the way to the root, minus what the group uses
                         * (page cache it may reclaim, inactive_file, not counted as used) */
    int cgroup_version; /* 1 or 2 when cgroup >= 0 */
    double bytes;       /* the smaller of the two known ones; < 0: neither is known (no check) */
};

/* Reads the files under `root` ("/" on a real machine; a test passes a
 * folder holding proc/meminfo, proc/self/cgroup and sys/fs/cgroup/...). */
struct mem_available memcheck_available(const char *root);

/* World rank `rank` of N (the grid of the config's tp and pp) with `budget` bytes to itself: 0 when its start-up peak
 * plus the libraries' allowance fits; else -1 and, in err, the breakdown,
 * the total against `budget` (described by `where`), and the total each
 * lever would give with which of them would fit. */
int memcheck_judge(const struct config *c, int N, int rank, double budget, const char *where, char *err,
                   size_t err_len);

/* The check as the trainer runs it, before the engine allocates: this
 * host's available memory split over the ranks on this host, judged on
 * every rank and agreed (trainer_agree); a refusal ends with the hint
 * "--force 1 allocates anyway". With c->force a refusal becomes a
 * warning on stderr and the run goes on. Collective over the grid. */
int trainer_check_memory(struct trainer *tr, char err[TRAINER_ERR_LEN]);

#endif
