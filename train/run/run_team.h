/* The run's OpenMP team, sized to the cores other processes leave free
 * (train/run/run_team.c, docs/THREADS.md). */
#ifndef SHARDLAB_RUN_TEAM_H
#define SHARDLAB_RUN_TEAM_H

#include <stddef.h>

#include "../measure/trainer.h"

/* Sets the team up after the start-up probe, which measured busy cores of
 * others (-1: not measured): whether it follows the load (false, with the
 * reason in why, where it cannot or is told not to) and its first size,
 * the threads that fit. Returns tr->team_follows. */
bool run_team_start(struct trainer *tr, int cores, double busy, char *why, size_t why_len);
/* Between steps: at the end of each watch window, resizes the team to the
 * threads that fit, and says so on stdout when the size changes. */
void run_team_follow(struct trainer *tr);

#endif
