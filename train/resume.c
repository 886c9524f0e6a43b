/* Resume states: our own format of named sections, so a later optimizer
 * adds sections rather than a format version. On disk (native byte order,
 * fixed-width fields written one by one, so struct padding never leaks in):
 *
 *   header   u32 magic "SHLB", u32 version,
 *            u64 step, seed, data_epoch, data_cursor,
 *            i32 L, C, NH, T, V, Vp, u32 fingerprint, u32 n_sections
 *   section  char name[32] (NUL-padded), u32 dtype (0 fp32, 1 bf16, 2 u8),
 *            u64 numel, then numel elements of raw data
 *
 * Version 2 added the u8 dtype (8-bit optimizer codes saved as they are). A
 * file says the lowest version that reads it: 1 unless it has a u8
 * section, so states without one stay readable by version-1 builds; this
 * build reads both, and refuses a u8 section in a version-1 file.
 *
 * Once the sections are declared, every offset in the file is known, so a
 * writer lays down the header and all section headers first and then takes
 * the data in pieces, in any order. A reader scans the section headers
 * (seeking over the data), so sections are found by name, in any order,
 * and unknown ones are skipped. */
#include "checkpoint.h"
#include "fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

enum {
    RESUME_MAGIC = 0x53484C42, /* "SHLB" */
    RESUME_VERSION = 2,        /* the newest this build reads and writes */
    RESUME_VERSION_U8 = 2,     /* the first with u8 sections */
    HEADER_BYTES = 4 + 4 + 4 * 8 + 6 * 4 + 4 + 4,
    SECTION_HEAD_BYTES = STATE_NAME_LEN + 4 + 8,
    DISK_FP32 = 0,
    DISK_BF16 = 1,
    DISK_U8 = 2
};

static uint32_t disk_code(enum dtype dt) { return dt == DTYPE_BF16 ? DISK_BF16 : dt == DTYPE_U8 ? DISK_U8 : DISK_FP32; }

/* Where one section lies in the file. */
struct resume_file_section {
    char name[STATE_NAME_LEN + 1];
    enum dtype dtype;
    uint64_t numel;
    off_t data_offset;
};

static void put_u32(unsigned char **p, uint32_t v) { memcpy(*p, &v, 4), *p += 4; }
static void put_u64(unsigned char **p, uint64_t v) { memcpy(*p, &v, 8), *p += 8; }
static uint32_t get_u32(const unsigned char **p) { uint32_t v; memcpy(&v, *p, 4), *p += 4; return v; }
static uint64_t get_u64(const unsigned char **p) { uint64_t v; memcpy(&v, *p, 8), *p += 8; return v; }

/* A section name must fit its 32-byte field with its NUL. */
static int check_name(const char *name, char err[CKPT_ERR_LEN]) {
    size_t n = strnlen(name, STATE_NAME_LEN);
    if (n == 0 || n == STATE_NAME_LEN) {
        snprintf(err, CKPT_ERR_LEN, "section name '%.*s' must have 1 to %d characters", STATE_NAME_LEN, name,
                 STATE_NAME_LEN - 1);
        return -1;
    }
    return 0;
}

static int check_decls(const struct state_decl *d, int n, char err[CKPT_ERR_LEN]) {
    if (n < 0) {
        snprintf(err, CKPT_ERR_LEN, "%d sections given", n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (check_name(d[i].name, err)) return -1;
        if (d[i].dtype != DTYPE_FP32 && d[i].dtype != DTYPE_BF16 && d[i].dtype != DTYPE_U8) {
            snprintf(err, CKPT_ERR_LEN, "section '%s': unknown dtype %d", d[i].name, (int)d[i].dtype);
            return -1;
        }
        for (int j = 0; j < i; j++) {
            if (strcmp(d[i].name, d[j].name) == 0) {
                snprintf(err, CKPT_ERR_LEN, "section '%s' given twice", d[i].name);
                return -1;
            }
        }
    }
    return 0;
}

/* Elements [first, first + n) lie inside a section of numel elements. */
static int check_range(const struct resume_file_section *s, size_t first, size_t n, const char *path,
                       char err[CKPT_ERR_LEN]) {
    if (first > s->numel || n > s->numel - first) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: %zu elements from element %zu are outside section '%s' of %llu", path,
                 n, first, s->name, (unsigned long long)s->numel);
        return -1;
    }
    return 0;
}

/* ---- writer ---- */

static void writer_release(struct resume_writer *w) {
    free(w->sections);
    range_set_free(&w->written);
    w->sections = NULL, w->n = 0, w->open = false;
}

void resume_abort(struct resume_writer *w) {
    if (w->open) atomic_abort(&w->af);
    writer_release(w);
}

/* An error that abandons the file. */
static int writer_fail(struct resume_writer *w) {
    resume_abort(w);
    return -1;
}

/* atomic_write(_at) removes the temp file itself when it fails. */
static int writer_io(struct resume_writer *w, int rc) {
    if (rc == 0) return 0;
    w->open = false;
    return writer_fail(w);
}

int resume_create(struct resume_writer *w, const char *path, const struct resume_meta *meta,
                  const struct state_decl *decls, int n, char err[CKPT_ERR_LEN]) {
    *w = (struct resume_writer){0};
    range_set_init(&w->written);
    if (check_decls(decls, n, err)) return -1;
    if (n && !(w->sections = calloc((size_t)n, sizeof *w->sections))) {
        snprintf(err, CKPT_ERR_LEN, "out of memory saving %.300s", path);
        return -1;
    }
    w->n = n;
    /* Lay out the file: each section's header, then its data. */
    uint64_t pos = HEADER_BYTES;
    for (int i = 0; i < n; i++) {
        struct resume_file_section *s = &w->sections[i];
        snprintf(s->name, sizeof s->name, "%s", decls[i].name);
        s->dtype = decls[i].dtype, s->numel = decls[i].numel;
        uint64_t esz = dtype_size(s->dtype), limit = (uint64_t)INT64_MAX - pos - SECTION_HEAD_BYTES;
        if (s->numel > limit / esz) {
            snprintf(err, CKPT_ERR_LEN, "%.300s: section '%s' of %llu elements does not fit a file", path, s->name,
                     (unsigned long long)s->numel);
            return writer_fail(w);
        }
        s->data_offset = (off_t)(pos + SECTION_HEAD_BYTES);
        pos += SECTION_HEAD_BYTES + s->numel * esz;
    }

    uint32_t version = 1;
    for (int i = 0; i < n; i++)
        if (decls[i].dtype == DTYPE_U8) version = RESUME_VERSION_U8;
    unsigned char head[HEADER_BYTES], *p = head;
    put_u32(&p, RESUME_MAGIC), put_u32(&p, version);
    put_u64(&p, meta->step), put_u64(&p, meta->seed), put_u64(&p, meta->data_epoch), put_u64(&p, meta->data_cursor);
    const struct model_shape *sh = &meta->shape;
    int32_t dims[] = {sh->L, sh->C, sh->NH, sh->T, sh->V, sh->Vp};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) put_u32(&p, (uint32_t)dims[i]);
    put_u32(&p, meta->fingerprint), put_u32(&p, (uint32_t)n);

    if (atomic_open(&w->af, path, err)) return writer_fail(w);
    w->open = true;
    if (writer_io(w, atomic_write(&w->af, head, sizeof head, err))) return -1;
    for (int i = 0; i < n; i++) {
        const struct resume_file_section *s = &w->sections[i];
        unsigned char sec[SECTION_HEAD_BYTES] = {0}, *q = sec;
        memcpy(q, s->name, strlen(s->name)), q += STATE_NAME_LEN;
        put_u32(&q, disk_code(s->dtype));
        put_u64(&q, s->numel);
        if (writer_io(w, atomic_write_at(&w->af, s->data_offset - SECTION_HEAD_BYTES, sec, sizeof sec, err)))
            return -1;
    }
    return 0;
}

int resume_write_at(struct resume_writer *w, int section, size_t first, size_t n, const void *src,
                    char err[CKPT_ERR_LEN]) {
    if (!w->open) {
        snprintf(err, CKPT_ERR_LEN, "resume_write_at: the writer is not open (committed, aborted or failed before)");
        return -1;
    }
    if (section < 0 || section >= w->n) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: no section %d (%d declared)", w->af.path, section, w->n);
        return writer_fail(w);
    }
    const struct resume_file_section *s = &w->sections[section];
    if (check_range(s, first, n, w->af.path, err)) return writer_fail(w);
    size_t esz = dtype_size(s->dtype);
    off_t at = s->data_offset + (off_t)(first * esz);
    if (writer_io(w, atomic_write_at(&w->af, at, src, n * esz, err))) return -1;
    if (range_set_add(&w->written, (uint64_t)at, (uint64_t)at + n * esz)) {
        snprintf(err, CKPT_ERR_LEN, "out of memory saving %.300s", w->af.path);
        return writer_fail(w);
    }
    return 0;
}

int resume_commit(struct resume_writer *w, char err[CKPT_ERR_LEN]) {
    if (!w->open) {
        snprintf(err, CKPT_ERR_LEN, "resume_commit: the writer is not open (committed, aborted or failed before)");
        return -1;
    }
    for (int i = 0; i < w->n; i++) {
        const struct resume_file_section *s = &w->sections[i];
        uint64_t lo = (uint64_t)s->data_offset, esz = dtype_size(s->dtype);
        struct range gap;
        if (range_set_first_gap(&w->written, lo, lo + s->numel * esz, &gap)) {
            snprintf(err, CKPT_ERR_LEN, "%.300s not saved: elements [%llu, %llu) of section '%s' were never written",
                     w->af.path, (unsigned long long)((gap.lo - lo) / esz), (unsigned long long)((gap.hi - lo) / esz),
                     s->name);
            return writer_fail(w);
        }
    }
    int rc = atomic_commit(&w->af, err);
    writer_release(w);
    return rc;
}

/* ---- reader ---- */

/* Reads the header into meta and walks the section headers into table
 * (allocated here; *table may be NULL when the file has no sections). */
static int scan_file(FILE *f, const char *path, struct resume_meta *meta, struct resume_file_section **table,
                     int *count, char err[CKPT_ERR_LEN]) {
    off_t size = -1;
    if (fseeko(f, 0, SEEK_END) == 0) size = ftello(f);
    if (size < 0 || fseeko(f, 0, SEEK_SET) != 0) {
        snprintf(err, CKPT_ERR_LEN, "cannot seek in %.300s: %s", path, strerror(errno));
        return -1;
    }
    unsigned char head[HEADER_BYTES];
    if (read_exact(f, head, sizeof head, path, err)) return -1;
    const unsigned char *p = head;
    uint32_t magic = get_u32(&p), version = get_u32(&p);
    if (magic != RESUME_MAGIC) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: not a resume state (magic 0x%08x, expected 0x%08x)", path,
                 (unsigned)magic, (unsigned)RESUME_MAGIC);
        return -1;
    }
    if (version < 1 || version > RESUME_VERSION) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: resume state version %u, this build reads versions 1 to %d", path,
                 (unsigned)version, RESUME_VERSION);
        return -1;
    }
    meta->step = get_u64(&p), meta->seed = get_u64(&p);
    meta->data_epoch = get_u64(&p), meta->data_cursor = get_u64(&p);
    int *dims[] = {&meta->shape.L, &meta->shape.C, &meta->shape.NH, &meta->shape.T, &meta->shape.V, &meta->shape.Vp};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) *dims[i] = (int32_t)get_u32(&p);
    meta->fingerprint = get_u32(&p);
    uint32_t n = get_u32(&p);
    /* Bound the count by what the file could hold before allocating for it. */
    if ((uint64_t)n > (uint64_t)(size - HEADER_BYTES) / SECTION_HEAD_BYTES || n > INT32_MAX) {
        snprintf(err, CKPT_ERR_LEN, "%.300s is truncated: %u sections announced in %lld bytes", path, (unsigned)n,
                 (long long)size);
        return -1;
    }
    struct resume_file_section *t = n ? calloc(n, sizeof *t) : NULL;
    if (n && !t) {
        snprintf(err, CKPT_ERR_LEN, "out of memory reading %.300s", path);
        return -1;
    }
    off_t pos = HEADER_BYTES;
    for (uint32_t i = 0; i < n; i++) {
        unsigned char sh[SECTION_HEAD_BYTES];
        if (fseeko(f, pos, SEEK_SET) != 0 || read_exact(f, sh, sizeof sh, path, err)) goto fail;
        memcpy(t[i].name, sh, STATE_NAME_LEN); /* t[i].name[32] stays NUL */
        const unsigned char *q = sh + STATE_NAME_LEN;
        uint32_t code = get_u32(&q);
        t[i].numel = get_u64(&q);
        uint32_t known = version >= RESUME_VERSION_U8 ? DISK_U8 : DISK_BF16;
        if (code > known) {
            snprintf(err, CKPT_ERR_LEN, "%.300s: section '%s' has unknown dtype %u (version %u)", path, t[i].name,
                     (unsigned)code, (unsigned)version);
            goto fail;
        }
        t[i].dtype = code == DISK_BF16 ? DTYPE_BF16 : code == DISK_U8 ? DTYPE_U8 : DTYPE_FP32;
        t[i].data_offset = pos + SECTION_HEAD_BYTES;
        /* The section header was read whole, so data_offset <= size here. */
        uint64_t room = (uint64_t)(size - t[i].data_offset), esz = dtype_size(t[i].dtype);
        if (t[i].numel > room / esz) {
            snprintf(err, CKPT_ERR_LEN, "%.300s is truncated: section '%s' needs %llu elements, the file ends first",
                     path, t[i].name, (unsigned long long)t[i].numel);
            goto fail;
        }
        pos = t[i].data_offset + (off_t)(t[i].numel * esz);
    }
    if (pos != size) {
        snprintf(err, CKPT_ERR_LEN, "%.300s has %lld bytes of trailing data after its sections", path,
                 (long long)(size - pos));
        goto fail;
    }
    *table = t, *count = (int)n;
    return 0;
fail:
    free(t);
    return -1;
}


int resume_open(struct resume_reader *r, const char *path, struct resume_meta *meta, char err[CKPT_ERR_LEN]) {
    *r = (struct resume_reader){0};
    if (strlen(path) >= sizeof r->path) {
        snprintf(err, CKPT_ERR_LEN, "path too long: %.300s", path);
        return -1;
    }
    snprintf(r->path, sizeof r->path, "%s", path);
    if (!(r->f = fopen(path, "rb"))) {
        snprintf(err, CKPT_ERR_LEN, "cannot open %.300s: %s", path, strerror(errno));
        return -1;
    }
    struct resume_meta m;
    if (scan_file(r->f, path, &m, &r->sections, &r->n, err)) {
        resume_close(r);
        return -1;
    }
    *meta = m;
    return 0;
}

int resume_find(const struct resume_reader *r, const char *name, enum dtype dtype, size_t numel,
                char err[CKPT_ERR_LEN]) {
    for (int i = 0; i < r->n; i++) {
        const struct resume_file_section *s = &r->sections[i];
        if (strcmp(s->name, name) != 0) continue;
        if (s->dtype != dtype || s->numel != (uint64_t)numel) {
            snprintf(err, CKPT_ERR_LEN, "%.300s: section '%s' is %llu %s elements in the file, %zu %s expected",
                     r->path, name, (unsigned long long)s->numel, dtype_name(s->dtype), numel, dtype_name(dtype));
            return -1;
        }
        return i;
    }
    snprintf(err, CKPT_ERR_LEN, "%.300s: section '%.*s' is missing", r->path, STATE_NAME_LEN, name);
    return -1;
}

int resume_read_at(struct resume_reader *r, int section, size_t first, size_t n, void *dst, char err[CKPT_ERR_LEN]) {
    if (!r->f) {
        snprintf(err, CKPT_ERR_LEN, "resume_read_at: the reader is not open");
        return -1;
    }
    if (section < 0 || section >= r->n) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: no section %d (the file has %d)", r->path, section, r->n);
        return -1;
    }
    const struct resume_file_section *s = &r->sections[section];
    if (check_range(s, first, n, r->path, err)) return -1;
    size_t esz = dtype_size(s->dtype);
    return read_exact_at(r->f, s->data_offset + (off_t)(first * esz), dst, n * esz, r->path, err);
}

void resume_close(struct resume_reader *r) {
    if (r->f) fclose(r->f);
    free(r->sections);
    r->f = NULL, r->sections = NULL, r->n = 0;
}

/* ---- whole arrays ---- */

/* The caller's sections, checked, as declarations (*decls allocated here;
 * NULL when n is 0). */
static int declare(const struct state_section *s, int n, struct state_decl **decls, char err[CKPT_ERR_LEN]) {
    *decls = NULL;
    if (n < 0) {
        snprintf(err, CKPT_ERR_LEN, "%d sections given", n);
        return -1;
    }
    if (n && !(*decls = calloc((size_t)n, sizeof **decls))) {
        snprintf(err, CKPT_ERR_LEN, "out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        memcpy((*decls)[i].name, s[i].name, STATE_NAME_LEN);
        (*decls)[i].dtype = s[i].dtype, (*decls)[i].numel = s[i].numel;
    }
    if (check_decls(*decls, n, err)) goto fail;
    for (int i = 0; i < n; i++) {
        if (s[i].numel && !s[i].data) {
            snprintf(err, CKPT_ERR_LEN, "section '%s': no data for %zu elements", s[i].name, s[i].numel);
            goto fail;
        }
    }
    return 0;
fail:
    free(*decls);
    *decls = NULL;
    return -1;
}

int resume_save(const char *path, const struct resume_meta *meta, const struct state_section *sections, int n,
                char err[CKPT_ERR_LEN]) {
    struct state_decl *decls;
    if (declare(sections, n, &decls, err)) return -1;
    struct resume_writer w;
    int rc = resume_create(&w, path, meta, decls, n, err);
    free(decls);
    if (rc) return -1;
    /* A failed write has abandoned the file already. */
    for (int i = 0; i < n; i++)
        if (resume_write_at(&w, i, 0, sections[i].numel, sections[i].data, err)) return -1;
    return resume_commit(&w, err);
}

int resume_load(const char *path, struct resume_meta *meta, struct state_section *sections, int n,
                char err[CKPT_ERR_LEN]) {
    struct state_decl *decls;
    if (declare(sections, n, &decls, err)) return -1;
    free(decls);
    struct resume_reader r;
    struct resume_meta m;
    if (resume_open(&r, path, &m, err)) return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        struct state_section *s = &sections[i];
        int k = resume_find(&r, s->name, s->dtype, s->numel, err);
        rc = k < 0 ? -1 : resume_read_at(&r, k, 0, s->numel, s->data, err);
    }
    resume_close(&r);
    if (rc == 0) *meta = m;
    return rc;
}
