/* The run's output files, checked before step 1 rather than found
 * unwritable after the last: --save, --save_state and the resume state a
 * stop signal writes (train/run/run_stop_signal.h). */
#ifndef SHARDLAB_OUTPUTS_H
#define SHARDLAB_OUTPUTS_H

#include <stdint.h>
#include <stdio.h>

#include "fileio.h"
#include "../measure/trainer.h"

/* Where a stopped run writes its resume state: --save_state; else
 * <save>.state when --save is given; else shardlab_state.bin in the working
 * directory. */
void trainer_stop_state_path(const struct config *c, char path[FILEIO_PATH_LEN]);

/* Whether a file of `bytes` can be written at path the way atomic_open
 * writes it: path, if it exists, is a regular file (rename replaces it),
 * and a temporary file can be made beside it (made and removed here). On
 * failure err names `what` and the path. When the file system has less
 * than `bytes` free, a warning goes to `warn` (if not NULL) and the check
 * still passes: space may be freed before the file is written. */
int outputs_check_path(const char *path, const char *what, uint64_t bytes, FILE *warn, char err[TRAINER_ERR_LEN]);

/* Collective: the writer (rank 0) checks that no output names another
 * output or an input of another kind (path_check_distinct), then --save
 * (an llm.c file in param_dtype), --save_state, --trace and --log_json
 * (which a resumed run appends to: it must end in a newline); an
 * unwritable one fails every rank. The
 * default stop state path only warns when it cannot be written. */
int trainer_check_outputs(struct trainer *tr, char err[TRAINER_ERR_LEN]);

/* Collective, as an output is opened for writing: the checks of
 * start-up again for `key` at `path` (it is no device or FIFO) and for the
 * whole set (no output is another or an input), since links and files
 * may have appeared there during the run. */
int trainer_recheck_output(struct trainer *tr, const char *key, const char *path, char err[TRAINER_ERR_LEN]);

#endif
