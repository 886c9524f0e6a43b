/* The training loop's progress: the mean step time so far and the ETA it
 * gives, and how the per-step line is shown. In a log file (stdout not a
 * terminal) every step is its own line, which scripts read ('^step');
 * on a terminal the line is rewritten in place ("\r", erased to its end)
 * and only steps worth keeping (validation, a saved state, the last one)
 * end with a newline. */
#ifndef SHARDLAB_PROGRESS_H
#define SHARDLAB_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct progress {
    bool tty;            /* rewrite one line in place */
    bool line_open;      /* a rewritten line is on screen without its newline */
    int steps_seen;      /* steps timed by progress_step, the first included */
    double seconds;      /* their time, the first step's excluded (it warms caches and pages) */
};

void progress_init(struct progress *p, bool tty);
/* stdout is the user's terminal: a tty, and not one an MPI launcher made
 * (mpirun hands each rank a pseudo-terminal even when its own output goes
 * to a file, so under mpirun every step is its own line). */
bool progress_stdout_is_terminal(void);
/* One finished step of `seconds`. */
void progress_step(struct progress *p, double seconds);
/* Seconds for steps_left more steps at the mean so far; < 0 while no step
 * past the first has been timed (no mean yet). */
double progress_eta_seconds(const struct progress *p, int steps_left);
/* A duration for people: "12s", "3m05s", "1h02m", "3d04h"; "?" when < 0
 * (or beyond 100000 days). Rounded to the nearest second. out holds at least PROGRESS_ETA_LEN. */
enum { PROGRESS_ETA_LEN = 32 };
void progress_format_eta(double seconds, char out[PROGRESS_ETA_LEN]);
/* Shows one step line (text without newline): on a terminal over the last
 * one, ended with a newline when keep; elsewhere always as its own line. */
void progress_show(struct progress *p, FILE *out, const char *line, bool keep);
/* Ends a rewritten line still on screen, before other output. */
void progress_end_line(struct progress *p, FILE *out);

#endif
