#include "fileio.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

int atomic_open(struct atomic_file *af, const char *path, char err[FILEIO_ERR_LEN]) {
    if (strlen(path) + 32 >= FILEIO_PATH_LEN) {
        snprintf(err, FILEIO_ERR_LEN, "path too long: %.200s", path);
        return -1;
    }
    snprintf(af->path, sizeof af->path, "%s", path);
    snprintf(af->tmp_path, sizeof af->tmp_path, "%s.tmp.%ld", path, (long)getpid());
    af->f = fopen(af->tmp_path, "wb");
    if (!af->f) {
        snprintf(err, FILEIO_ERR_LEN, "cannot create %.400s: %s", af->tmp_path, strerror(errno));
        return -1;
    }
    return 0;
}

void atomic_abort(struct atomic_file *af) {
    if (af->f) fclose(af->f);
    af->f = NULL;
    remove(af->tmp_path);
}

int atomic_write(struct atomic_file *af, const void *data, size_t n, char err[FILEIO_ERR_LEN]) {
    if (n && fwrite(data, 1, n, af->f) != n) {
        snprintf(err, FILEIO_ERR_LEN, "write to %.400s failed: %s", af->tmp_path, strerror(errno));
        atomic_abort(af);
        return -1;
    }
    return 0;
}

int atomic_write_at(struct atomic_file *af, off_t offset, const void *data, size_t n, char err[FILEIO_ERR_LEN]) {
    if (fseeko(af->f, offset, SEEK_SET) != 0) {
        snprintf(err, FILEIO_ERR_LEN, "cannot seek to byte %lld of %.400s: %s", (long long)offset, af->tmp_path,
                 strerror(errno));
        atomic_abort(af);
        return -1;
    }
    return atomic_write(af, data, n, err);
}

int atomic_commit(struct atomic_file *af, char err[FILEIO_ERR_LEN]) {
    if (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0) {
        snprintf(err, FILEIO_ERR_LEN, "flushing %.400s failed: %s", af->tmp_path, strerror(errno));
        atomic_abort(af);
        return -1;
    }
    int rc = fclose(af->f);
    af->f = NULL;
    if (rc != 0 || rename(af->tmp_path, af->path) != 0) {
        snprintf(err, FILEIO_ERR_LEN, "cannot move %.400s into place: %s", af->tmp_path, strerror(errno));
        remove(af->tmp_path);
        return -1;
    }
    return 0;
}

int read_exact(FILE *f, void *data, size_t n, const char *path, char err[FILEIO_ERR_LEN]) {
    size_t got = n ? fread(data, 1, n, f) : 0;
    if (got != n) {
        snprintf(err, FILEIO_ERR_LEN, "%.400s is truncated: wanted %zu more bytes, got %zu", path, n, got);
        return -1;
    }
    return 0;
}

int read_exact_at(FILE *f, off_t offset, void *data, size_t n, const char *path, char err[FILEIO_ERR_LEN]) {
    if (fseeko(f, offset, SEEK_SET) != 0) {
        snprintf(err, FILEIO_ERR_LEN, "cannot seek to byte %lld of %.400s: %s", (long long)offset, path,
                 strerror(errno));
        return -1;
    }
    return read_exact(f, data, n, path, err);
}
