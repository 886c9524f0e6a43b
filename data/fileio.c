#include "fileio.h"
#include "crc32c.h"

#include <stdbool.h>

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* PATH + TEMP_TAG + host + "." + pid */
#define TEMP_TAG ".shardlab-tmp."
enum { HOST_LEN = 256 };

/* This host's name, with any '/' (impossible in a host name, but it would
 * make the temp name a path) replaced. */
static void host_name(char out[HOST_LEN]) {
    if (gethostname(out, HOST_LEN) != 0) snprintf(out, HOST_LEN, "unknown-host");
    out[HOST_LEN - 1] = '\0';
    for (char *c = out; *c; c++)
        if (*c == '/') *c = '_';
}

/* Symbolic links followed to the file a write replaces: the kernel's own
 * limit on a path's links (Linux's MAXSYMLINKS). */
enum { LINK_HOPS_MAX = 40 };

/* Where a write to path lands: path itself or, for a symbolic link, the
 * file it points to, followed link by link (a relative target from its
 * link's folder; the last may not exist yet). So the atomic rename
 * replaces that file and keeps the link, and the temp file sits beside it
 * on its file system. */
static int write_target(const char *path, char out[FILEIO_PATH_LEN], char err[FILEIO_ERR_LEN]) {
    if (snprintf(out, FILEIO_PATH_LEN, "%s", path) >= FILEIO_PATH_LEN) goto too_long;
    for (int hops = 0;; hops++) {
        struct stat st;
        if (lstat(out, &st) != 0 || !S_ISLNK(st.st_mode)) return 0;
        char to[FILEIO_PATH_LEN], link[FILEIO_PATH_LEN];
        ssize_t n = readlink(out, to, sizeof to - 1);
        if (hops == LINK_HOPS_MAX || n < 0) {
            snprintf(err, FILEIO_ERR_LEN, "cannot follow the symbolic link %.400s: %s", out,
                     n < 0 ? strerror(errno) : "too many levels of links");
            return -1;
        }
        if ((size_t)n >= sizeof to - 1) goto too_long;
        to[n] = '\0';
        memcpy(link, out, sizeof link);
        const char *slash = strrchr(link, '/');
        int len = to[0] == '/' || !slash ? snprintf(out, FILEIO_PATH_LEN, "%s", to)
                                         : snprintf(out, FILEIO_PATH_LEN, "%.*s/%s", (int)(slash - link), link, to);
        if (len >= FILEIO_PATH_LEN) goto too_long;
    }
too_long:
    snprintf(err, FILEIO_ERR_LEN, "path too long: %.200s (or the file its links lead to)", path);
    return -1;
}

int atomic_open(struct atomic_file *af, const char *link_or_path, char err[FILEIO_ERR_LEN]) {
    char host[HOST_LEN], path[FILEIO_PATH_LEN];
    if (write_target(link_or_path, path, err) != 0) return -1;
    host_name(host);
    snprintf(af->path, sizeof af->path, "%s", path);
    int n = snprintf(af->tmp_path, sizeof af->tmp_path, "%s" TEMP_TAG "%s.%ld", path, host, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof af->tmp_path) { /* the temp name beside the target does not fit */
        snprintf(err, FILEIO_ERR_LEN, "path too long: %.200s", path);
        return -1;
    }
    af->f = fopen(af->tmp_path, "w+b");
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

int atomic_complete(struct atomic_file *af, char err[FILEIO_ERR_LEN]) {
    if (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0) {
        snprintf(err, FILEIO_ERR_LEN, "flushing %.400s failed: %s", af->tmp_path, strerror(errno));
        atomic_abort(af);
        return -1;
    }
    int rc = fclose(af->f);
    af->f = NULL;
    if (rc != 0) {
        snprintf(err, FILEIO_ERR_LEN, "closing %.400s failed: %s", af->tmp_path, strerror(errno));
        remove(af->tmp_path);
        return -1;
    }
    return 0;
}

int atomic_place(struct atomic_file *af, char err[FILEIO_ERR_LEN]) {
    if (rename(af->tmp_path, af->path) != 0) {
        snprintf(err, FILEIO_ERR_LEN, "cannot move %.400s into place: %s", af->tmp_path, strerror(errno));
        remove(af->tmp_path);
        return -1;
    }
    return 0;
}

int atomic_commit(struct atomic_file *af, char err[FILEIO_ERR_LEN]) {
    return atomic_complete(af, err) == 0 ? atomic_place(af, err) : -1;
}

enum { CRC_PIECE_BYTES = 1 << 20 };

int file_crc32c(const char *path, uint32_t *crc, char err[FILEIO_ERR_LEN]) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf = malloc(CRC_PIECE_BYTES);
    *crc = 0;
    size_t n;
    while (f && buf && (n = fread(buf, 1, CRC_PIECE_BYTES, f)) > 0) *crc = crc32c(*crc, buf, n);
    bool bad = !f || !buf || ferror(f);
    if (bad) snprintf(err, FILEIO_ERR_LEN, "cannot read %.400s: %s", path, buf ? strerror(errno) : "out of memory");
    if (f) fclose(f);
    free(buf);
    return bad ? -1 : 0;
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

/* The pid of a temp file name's "<host>.<pid>" tail when <host> is ours;
 * 0 otherwise. */
static long temp_owner(const char *tail, const char *host) {
    size_t h = strlen(host);
    if (strncmp(tail, host, h) != 0 || tail[h] != '.') return 0;
    const char *digits = tail + h + 1;
    char *end;
    errno = 0;
    long pid = strtol(digits, &end, 10);
    if (errno || end == digits || *end || pid <= 0) return 0;
    return pid;
}

/* Whether process pid is gone from this host: kill(pid, 0) says ESRCH.
 * EPERM means it exists (another user's), so it is not ours to judge. */
static bool process_gone(long pid) {
    if (pid == (long)getpid()) return true; /* a reused pid: we have not written yet */
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int atomic_remove_stale(const char *link_or_path, FILE *log, char err[FILEIO_ERR_LEN]) {
    char dir[FILEIO_PATH_LEN], host[HOST_LEN], prefix[FILEIO_PATH_LEN + sizeof TEMP_TAG], path[FILEIO_PATH_LEN];
    if (write_target(link_or_path, path, err) != 0) return -1; /* where atomic_open puts them */
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path) + (slash == path), path);
    else snprintf(dir, sizeof dir, ".");
    snprintf(prefix, sizeof prefix, "%s" TEMP_TAG, slash ? slash + 1 : path);
    host_name(host);
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0; /* no folder, no temp files (the write will say so) */
        snprintf(err, FILEIO_ERR_LEN, "cannot read folder %.300s: %s", dir, strerror(errno));
        return -1;
    }
    int removed = 0;
    size_t np = strlen(prefix);
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, np) != 0) continue;
        long pid = temp_owner(e->d_name + np, host);
        if (!pid || !process_gone(pid)) continue;
        char full[FILEIO_PATH_LEN + 256];
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        if (unlink(full) != 0 && errno != ENOENT) {
            snprintf(err, FILEIO_ERR_LEN, "cannot remove stale temp file %.300s: %s", full, strerror(errno));
            closedir(d);
            return -1;
        }
        if (log) fprintf(log, "removed stale temp file %s (from a killed run, pid %ld)\n", full, pid);
        removed++;
    }
    closedir(d);
    if (log) fflush(log);
    return removed;
}

/* ---- what a path names ---- */

static const char *file_type_name(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
           : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

int path_check_input(const char *path, const char *what, char err[FILEIO_ERR_LEN]) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, FILEIO_ERR_LEN, "cannot open %s %.400s: %s", what, path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, FILEIO_ERR_LEN, "%s %.400s is %s, not a regular file (nothing was opened)", what, path,
                 file_type_name(st.st_mode));
        return -1;
    }
    return 0;
}

int path_check_output(const char *path, const char *what, char err[FILEIO_ERR_LEN]) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, FILEIO_ERR_LEN,
                 "%s %.400s cannot be written: it exists and is %s, not a regular file (it is left as it is)", what,
                 path, file_type_name(st.st_mode));
        return -1;
    }
    return 0;
}

/* What a write to path replaces, identified the way the write resolves
 * it: its links followed (write_target, a dangling one included), then the
 * folder that holds the target by (st_dev, st_ino), which a bind mount or
 * another spelling of the folder cannot hide, and the target's last name;
 * the file's own (st_dev, st_ino) when it exists (hard links). */
struct path_id {
    bool exists, dir_ok;
    dev_t dev, dir_dev;
    ino_t ino, dir_ino;
    char name[NAME_MAX + 1];
};

static void path_identify(const char *path, struct path_id *id) {
    char target[FILEIO_PATH_LEN], e[FILEIO_ERR_LEN], dir[FILEIO_PATH_LEN];
    memset(id, 0, sizeof *id);
    if (write_target(path, target, e) != 0) snprintf(target, sizeof target, "%s", path);
    struct stat st;
    if (stat(target, &st) == 0) {
        id->exists = true;
        id->dev = st.st_dev;
        id->ino = st.st_ino;
    }
    const char *slash = strrchr(target, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - target) + (slash == target), target);
    snprintf(id->name, sizeof id->name, "%.*s", NAME_MAX, slash ? slash + 1 : target);
    if (stat(dir, &st) == 0) {
        id->dir_ok = true;
        id->dir_dev = st.st_dev;
        id->dir_ino = st.st_ino;
    }
}

/* Whether a and b name one file: the same device and inode when both
 * exist; else the same real path of the parent folder and the same last
 * name (so "x", "./x" and "dir/../x" are one file before it exists). */
static bool path_same_file(const char *a, const char *b) {
    struct path_id ia, ib;
    path_identify(a, &ia);
    path_identify(b, &ib);
    if (ia.exists && ib.exists) return ia.dev == ib.dev && ia.ino == ib.ino;
    if (ia.exists != ib.exists) return false;
    if (!ia.dir_ok || !ib.dir_ok) return strcmp(a, b) == 0;
    return ia.dir_dev == ib.dir_dev && ia.dir_ino == ib.dir_ino && strcmp(ia.name, ib.name) == 0;
}

/* Whether output `out` would be a match of glob pattern `in` once written
 * (a file not there yet: the next run's glob would read it): the folder
 * that holds its target is one the pattern's folder part matches, by
 * (st_dev, st_ino), and its last name matches the pattern's last part. */
static bool inside_glob(const char *out, const char *in) {
    if (!strpbrk(in, "*?[")) return false;
    struct path_id o;
    path_identify(out, &o);
    const char *slash = strrchr(in, '/');
    char dirs[FILEIO_PATH_LEN];
    if (!o.dir_ok || fnmatch(slash ? slash + 1 : in, o.name, FNM_PERIOD) != 0) return false;
    if (!slash) snprintf(dirs, sizeof dirs, ".");
    else snprintf(dirs, sizeof dirs, "%.*s", (int)(slash - in) + (slash == in), in);
    glob_t g;
    bool inside = false;
    if (glob(dirs, GLOB_NOCHECK, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc && !inside; i++) {
            struct stat st;
            inside = stat(g.gl_pathv[i], &st) == 0 && st.st_dev == o.dir_dev && st.st_ino == o.dir_ino;
        }
        globfree(&g);
    }
    return inside;
}

/* Whether output `out` is a file of input `in` (a glob pattern: any match,
 * or a file the pattern would match once out is written). */
static bool names_input(const char *out, const char *in, char match[FILEIO_PATH_LEN]) {
    glob_t g;
    bool same = false;
    if (glob(in, GLOB_NOCHECK, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc && !same; i++)
            if ((same = path_same_file(out, g.gl_pathv[i]))) snprintf(match, FILEIO_PATH_LEN, "%s", g.gl_pathv[i]);
        globfree(&g);
    }
    if (!same && inside_glob(out, in)) {
        snprintf(match, FILEIO_PATH_LEN, "a match of its pattern once written");
        same = true;
    }
    return same;
}

int path_check_distinct(const struct named_path *paths, int n, char err[FILEIO_ERR_LEN]) {
    for (int i = 0; i < n; i++) {
        const struct named_path *o = &paths[i];
        if (!o->output || !o->path || !*o->path) continue;
        for (int j = 0; j < n; j++) {
            const struct named_path *p = &paths[j];
            if (j == i || !p->path || !*p->path || (p->output && j < i)) continue;
            char match[FILEIO_PATH_LEN];
            bool clash = p->output ? path_same_file(o->path, p->path)
                                   : strcmp(o->kind, p->kind) != 0 && names_input(o->path, p->path, match);
            if (!clash) continue;
            if (p->output)
                snprintf(err, FILEIO_ERR_LEN, "%s %.200s and %s %.200s are one file: each output needs its own",
                         o->key, o->path, p->key, p->path);
            else
                snprintf(err, FILEIO_ERR_LEN,
                         "%s %.120s is %s %.120s (%s%s%.120s): writing the %s would destroy it; nothing was written",
                         o->key, o->path, p->key, p->path, p->kind, strcmp(match, p->path) ? " " : "",
                         strcmp(match, p->path) ? match : "", o->kind);
            return -1;
        }
    }
    return 0;
}
