/* Atomic file writes: write to PATH.tmp.<pid>, fsync, rename over PATH. A
 * crash leaves either the old file or the new one, never half of one. */
#ifndef SHARDLAB_FILEIO_H
#define SHARDLAB_FILEIO_H

#include <stdio.h>
#include <sys/types.h>

enum { FILEIO_ERR_LEN = 512, FILEIO_PATH_LEN = 1100 };

struct atomic_file {
    FILE *f;
    char path[FILEIO_PATH_LEN];
    char tmp_path[FILEIO_PATH_LEN];
};

int atomic_open(struct atomic_file *af, const char *path, char err[FILEIO_ERR_LEN]);
/* Writes n bytes; on failure the temp file is removed and -1 returned. */
int atomic_write(struct atomic_file *af, const void *data, size_t n, char err[FILEIO_ERR_LEN]);
/* Writes n bytes at byte `offset` of the temp file, so a file may be written
 * in pieces, in any order (bytes never written read as zero: the caller
 * checks coverage). On failure the temp file is removed and -1 returned. */
int atomic_write_at(struct atomic_file *af, off_t offset, const void *data, size_t n, char err[FILEIO_ERR_LEN]);
/* Flush, fsync, close, rename. On failure the temp file is removed. */
int atomic_commit(struct atomic_file *af, char err[FILEIO_ERR_LEN]);
/* Give up: close and remove the temp file. */
void atomic_abort(struct atomic_file *af);

/* Reads exactly n bytes or fails with a message naming the file. */
int read_exact(FILE *f, void *data, size_t n, const char *path, char err[FILEIO_ERR_LEN]);
/* The same, from byte `offset`. */
int read_exact_at(FILE *f, off_t offset, void *data, size_t n, const char *path, char err[FILEIO_ERR_LEN]);

#endif
