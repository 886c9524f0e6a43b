/* Atomic file writes: write to PATH.shardlab-tmp.<host>.<pid>, fsync,
 * rename over PATH. A PATH that is a symbolic link is written through: PATH
 * is the file it leads to (the link stays a link, the temp file sits beside
 * its target). A crash leaves either the old file or the new one, never
 * half of one; a kill -9 during the write also leaves the temp file, which
 * the name lets a later run find and remove (atomic_remove_stale). */
#ifndef SHARDLAB_FILEIO_H
#define SHARDLAB_FILEIO_H

#include <stdbool.h>
#include <stdint.h>
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
/* atomic_commit in two halves, for files that must appear together (a
 * train and a validation shard): atomic_complete flushes, fsyncs and
 * closes the temp file, atomic_place renames it into place; each removes
 * the temp file on failure. atomic_abort removes a completed one too. */
int atomic_complete(struct atomic_file *af, char err[FILEIO_ERR_LEN]);
int atomic_place(struct atomic_file *af, char err[FILEIO_ERR_LEN]);
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

/* ---- what a path names, checked before it is opened ---- */

/* An input's check before it is opened for reading: it is a regular file.
 * open() of a FIFO blocks until a writer comes (for ever), a folder reads
 * as empty, a device as whatever it yields. `what` names the key in err. */
int path_check_input(const char *path, const char *what, char err[FILEIO_ERR_LEN]);
/* An output's check before anything is written: path does not exist or is
 * a regular file. atomic_commit's rename would replace anything else (a
 * device node, a FIFO, a symlink's target is kept but a device it points
 * to is not written) with a regular file. */
int path_check_output(const char *path, const char *what, char err[FILEIO_ERR_LEN]);

/* A program's files by key, for path_check_distinct. `kind` says what the
 * file holds (a model file, a resume state, a log...). */
struct named_path {
    const char *key;  /* "--save" */
    const char *path; /* "" or NULL: not given */
    const char *kind;
    bool output;
};
/* Refuses two outputs that name one file, and an output that names an
 * input of another kind (--save over the --resume state). An output over
 * an input of its own kind is the run continuing in place (--save_state
 * over --resume: read whole at start-up, replaced atomically at the end)
 * and is kept. An input may be a glob pattern: each match is compared.
 * err names both keys and the paths. */
int path_check_distinct(const struct named_path *paths, int n, char err[FILEIO_ERR_LEN]);

/* The CRC32C of a whole file (include/crc32c.h), read in pieces. */
int file_crc32c(const char *path, uint32_t *crc, char err[FILEIO_ERR_LEN]);

/* Reads exactly n bytes or fails with a message naming the file. */
int read_exact(FILE *f, void *data, size_t n, const char *path, char err[FILEIO_ERR_LEN]);
/* The same, from byte `offset`. */
int read_exact_at(FILE *f, off_t offset, void *data, size_t n, const char *path, char err[FILEIO_ERR_LEN]);

#endif
