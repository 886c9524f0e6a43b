/* Atomic file writes: write to PATH.shardlab-tmp.<host>.<pid>, fsync,
 * rename over PATH. A crash leaves either the old file or the new one, never
 * half of one; a kill -9 during the write also leaves the temp file, which
 * the name lets a later run find and remove (atomic_remove_stale). */
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

/* The temp file is opened for reading too (a writer may read back what it
 * wrote, e.g. to checksum pieces that came out of order). */
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

/* The temp files of target `path` left by runs that are gone: those named
 * PATH.shardlab-tmp.<host>.<pid> with <host> this host and <pid> no live
 * process here (or this process, which has not started a write to path
 * yet when it calls this). Each is removed and reported on `log` (may be
 * NULL); temp files of other hosts or of live processes are left alone.
 * Returns how many were removed, -1 (with err) when the folder cannot be
 * read or a stale file cannot be removed. */
int atomic_remove_stale(const char *path, FILE *log, char err[FILEIO_ERR_LEN]);

/* Reads exactly n bytes or fails with a message naming the file. */
int read_exact(FILE *f, void *data, size_t n, const char *path, char err[FILEIO_ERR_LEN]);
/* The same, from byte `offset`. */
int read_exact_at(FILE *f, off_t offset, void *data, size_t n, const char *path, char err[FILEIO_ERR_LEN]);

#endif
