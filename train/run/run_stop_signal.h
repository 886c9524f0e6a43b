/* Stopping a run by signal. SIGTERM, SIGINT and SIGHUP (and SIGUSR1, which
 * mpirun forwards to every rank at once) ask the run to finish the step it
 * is in, write a resume state and exit with SHARDLAB_EXIT_STOPPED; the
 * training loop polls the request at each step boundary and agrees it
 * across ranks. A second signal ends the process at once, by that signal's
 * default action (status 128 + signal in a shell), writing nothing more.
 * A signal that was ignored when the program started (nohup's SIGHUP, a
 * background job's SIGINT) stays ignored.
 * SIGPIPE is ignored: a step line that fails with EPIPE (stdout a pipe
 * whose reader is gone: `train | head`, a tee killed by SIGHUP) is a stop
 * request too (stop_signal_name(SIGPIPE)), said on stderr, and the run
 * exits SHARDLAB_EXIT_STOPPED with its resume state like the others. */
#ifndef SHARDLAB_STOP_SIGNAL_H
#define SHARDLAB_STOP_SIGNAL_H

#include "grid.h"

/* The process exit code of a run stopped by a signal after writing its
 * resume state: distinct from errors (1, bad arguments included) and from
 * the 2 some tools use for usage errors. */
enum { SHARDLAB_EXIT_STOPPED = 3 };

/* A stop that is not a signal, above every signal handled here (the ranks
 * agree the maximum, grid_agree_max, whose values end below
 * GRID_AGREE_MAX_VALUES): a step record of --log_json could not be
 * written. The state is written as for a signal; the run then fails
 * naming the log. */
enum { TRAINER_STOP_LOG = GRID_AGREE_MAX_VALUES - 1 };

/* Installs the handler for the signals above. */
void stop_signal_install(void);
/* The number of the first stop signal received; 0 when none was. */
int stop_signal_pending(void);
/* Forgets a handled request (for a process that trains again). */
void stop_signal_clear(void);
/* "SIGTERM", ..., the broken stdout for SIGPIPE, the log for
 * TRAINER_STOP_LOG, or "a signal" for another number. */
const char *stop_signal_name(int sig);

#endif
