/* Resume states: our own format of named sections, so a later optimizer
 * adds sections rather than a format version. On disk (native byte order,
 * fixed-width fields written one by one, so struct padding never leaks in):
 *
 *   header   u32 magic "SHLB", u32 version, u32 crc32c of the rest of the
 *            header and the section table,
 *            u64 step, seed, data_epoch, data_cursor, skipped_steps,
 *            i32 L, C, NH, T, V, Vp, u32 fingerprint,
 *            char data_pattern[512] (NUL-padded), u64 data_files,
 *            u64 data_bytes, u32 data_digest, u32 n_sections
 *   table    per section: char name[32] (NUL-padded), u32 dtype (0 fp32,
 *            1 bf16, 2 u8: 8-bit optimizer codes saved as they are), u64
 *            numel, u32 crc32c of its data
 *   data     each section's numel raw elements, in table order
 *
 * data_digest is include/data.h's data_content digest of what the loader
 * read (CRC32C over each shard's CRC32C and size). Version 2 had the same
 * layout with a digest of the files' paths and sizes: it is read, and its
 * digest not compared. Version 1 interleaved section headers with data and
 * had no checksums.
 * Once the sections are declared every offset is known, so a writer takes
 * the data in pieces, in any order, and writes header and table last, when
 * the checksums are known. A reader checks the header's checksum on open
 * and a section's when it is found by name (streamed in chunks, never the
 * whole section in memory); unknown sections are skipped. */
#include "checkpoint.h"
#include "crc32c.h"
#include "fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

enum {
    RESUME_MAGIC = 0x53484C42, /* "SHLB" */
    RESUME_VERSION = 3,
    /* the same layout, its data_digest over the files' paths and sizes
     * (version 3: over the contents the loader read); still read */
    RESUME_VERSION_PATH_DIGEST = 2,
    CRC_FROM = 12, /* the header checksum covers bytes [CRC_FROM, end of table) */
    HEADER_BYTES = 4 + 4 + 4 + 5 * 8 + 6 * 4 + 4 + DATA_PATTERN_LEN + 2 * 8 + 4 + 4,
    TABLE_ENTRY_BYTES = STATE_NAME_LEN + 4 + 8 + 4,
    DISK_FP32 = 0,
    DISK_BF16 = 1,
    DISK_U8 = 2,
    VERIFY_CHUNK = 1 << 16 /* bytes streamed at a time to check a checksum */
};

/* Where one section lies in the file, and its checksum. While writing,
 * `next` and `running` follow pieces that arrive in order, so the common
 * case needs no read-back at commit. */
struct resume_file_section {
    char name[STATE_NAME_LEN + 1];
    enum dtype dtype;
    uint64_t numel;
    off_t data_offset;
    uint32_t crc;
    bool in_order;     /* writer: every piece so far continued the last */
    uint64_t next;     /* writer: byte offset the next in-order piece starts at */
    uint32_t running;  /* writer: crc32c of the data up to next */
};

static void put_u32(unsigned char **p, uint32_t v) { memcpy(*p, &v, 4), *p += 4; }
static void put_u64(unsigned char **p, uint64_t v) { memcpy(*p, &v, 8), *p += 8; }
static uint32_t get_u32(const unsigned char **p) { uint32_t v; memcpy(&v, *p, 4), *p += 4; return v; }
static uint64_t get_u64(const unsigned char **p) { uint64_t v; memcpy(&v, *p, 8), *p += 8; return v; }

static uint64_t table_bytes(uint64_t n) { return n * TABLE_ENTRY_BYTES; }

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

/* n elements of section s from element `first` must all be finite. */
static int check_finite(const struct resume_file_section *s, size_t first, size_t n, const void *x,
                        const char *path, const char *what, char err[CKPT_ERR_LEN]) {
    size_t bad = dtype_first_nonfinite(x, s->dtype, n);
    if (bad == n) return 0;
    snprintf(err, CKPT_ERR_LEN, "%.300s%s: section '%s' element %zu is %s (non-finite)", path, what, s->name,
             first + bad, dtype_nonfinite_name(x, s->dtype, bad));
    return -1;
}

/* The header and table of a file with these sections, crc fields included
 * (the header's own over everything after it). buf: HEADER_BYTES +
 * table_bytes(n). */
static void encode_header(unsigned char *buf, const struct resume_meta *meta, const struct resume_file_section *t,
                          int n) {
    unsigned char *p = buf;
    put_u32(&p, RESUME_MAGIC), put_u32(&p, RESUME_VERSION), put_u32(&p, 0);
    put_u64(&p, meta->step), put_u64(&p, meta->seed), put_u64(&p, meta->data_epoch), put_u64(&p, meta->data_cursor);
    put_u64(&p, meta->skipped_steps);
    const struct model_shape *sh = &meta->shape;
    int32_t dims[] = {sh->L, sh->C, sh->NH, sh->T, sh->V, sh->Vp};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) put_u32(&p, (uint32_t)dims[i]);
    put_u32(&p, meta->fingerprint);
    memset(p, 0, DATA_PATTERN_LEN);
    memcpy(p, meta->data.pattern, strnlen(meta->data.pattern, DATA_PATTERN_LEN - 1)), p += DATA_PATTERN_LEN;
    put_u64(&p, meta->data.files), put_u64(&p, meta->data.bytes), put_u32(&p, meta->data.digest);
    put_u32(&p, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        memset(p, 0, STATE_NAME_LEN);
        memcpy(p, t[i].name, strlen(t[i].name)), p += STATE_NAME_LEN;
        put_u32(&p, t[i].dtype == DTYPE_BF16 ? DISK_BF16 : t[i].dtype == DTYPE_U8 ? DISK_U8 : DISK_FP32);
        put_u64(&p, t[i].numel);
        put_u32(&p, t[i].crc);
    }
    unsigned char *c = buf + 8;
    put_u32(&c, crc32c(0, buf + CRC_FROM, (size_t)(p - buf) - CRC_FROM));
}

/* crc32c of bytes [from, to) of f, read VERIFY_CHUNK at a time. */
static int stream_crc(FILE *f, uint64_t from, uint64_t to, const char *path, uint32_t *crc, char err[CKPT_ERR_LEN]) {
    unsigned char chunk[VERIFY_CHUNK];
    uint32_t c = 0;
    for (uint64_t at = from; at < to;) {
        size_t k = to - at < sizeof chunk ? (size_t)(to - at) : sizeof chunk;
        if (read_exact_at(f, (off_t)at, chunk, k, path, err)) return -1;
        c = crc32c(c, chunk, k);
        at += k;
    }
    *crc = c;
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
    w->meta = *meta;
    /* Lay out the file: header, table, then each section's data. */
    uint64_t pos = HEADER_BYTES + table_bytes((uint64_t)n);
    for (int i = 0; i < n; i++) {
        struct resume_file_section *s = &w->sections[i];
        snprintf(s->name, sizeof s->name, "%s", decls[i].name);
        s->dtype = decls[i].dtype, s->numel = decls[i].numel;
        uint64_t esz = dtype_size(s->dtype), limit = (uint64_t)INT64_MAX - pos;
        if (s->numel > limit / esz) {
            snprintf(err, CKPT_ERR_LEN, "%.300s: section '%s' of %llu elements does not fit a file", path, s->name,
                     (unsigned long long)s->numel);
            return writer_fail(w);
        }
        s->data_offset = (off_t)pos;
        s->in_order = true, s->next = pos, s->running = 0;
        pos += s->numel * esz;
    }
    if (atomic_open(&w->af, path, err)) return writer_fail(w);
    w->open = true;
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
    struct resume_file_section *s = &w->sections[section];
    if (check_range(s, first, n, w->af.path, err)) return writer_fail(w);
    if (check_finite(s, first, n, src, w->af.path, " not saved", err)) return writer_fail(w);
    size_t esz = dtype_size(s->dtype);
    off_t at = s->data_offset + (off_t)(first * esz);
    if (writer_io(w, atomic_write_at(&w->af, at, src, n * esz, err))) return -1;
    if (s->in_order && (uint64_t)at == s->next) {
        s->running = crc32c(s->running, src, n * esz);
        s->next += n * esz;
    } else if (n) {
        s->in_order = false; /* checksummed by reading back at commit */
    }
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
        struct resume_file_section *s = &w->sections[i];
        uint64_t lo = (uint64_t)s->data_offset, esz = dtype_size(s->dtype), hi = lo + s->numel * esz;
        struct range gap;
        if (range_set_first_gap(&w->written, lo, hi, &gap)) {
            snprintf(err, CKPT_ERR_LEN, "%.300s not saved: elements [%llu, %llu) of section '%s' were never written",
                     w->af.path, (unsigned long long)((gap.lo - lo) / esz), (unsigned long long)((gap.hi - lo) / esz),
                     s->name);
            return writer_fail(w);
        }
        if (s->in_order && s->next == hi) s->crc = s->running;
        else if (stream_crc(w->af.f, lo, hi, w->af.tmp_path, &s->crc, err)) return writer_fail(w);
    }
    size_t hb = HEADER_BYTES + (size_t)table_bytes((uint64_t)w->n);
    unsigned char *head = malloc(hb);
    if (!head) {
        snprintf(err, CKPT_ERR_LEN, "out of memory saving %.300s", w->af.path);
        return writer_fail(w);
    }
    encode_header(head, &w->meta, w->sections, w->n);
    int rc = atomic_write_at(&w->af, 0, head, hb, err);
    free(head);
    if (writer_io(w, rc)) return -1;
    rc = atomic_commit(&w->af, err);
    writer_release(w);
    return rc;
}

uint64_t resume_file_bytes(const struct state_decl *decls, int n) {
    uint64_t bytes = HEADER_BYTES;
    for (int i = 0; i < n; i++) bytes += TABLE_ENTRY_BYTES + (uint64_t)decls[i].numel * dtype_size(decls[i].dtype);
    return bytes;
}

/* ---- reader ---- */

static int compare_names(const void *a, const void *b) {
    return strcmp(((const struct resume_file_section *)a)->name, ((const struct resume_file_section *)b)->name);
}

/* The writer's rules on names hold in the file too: each has 1 to 31
 * characters, and no two are equal (resume_find could not tell them apart).
 * Sorting a copy keeps this O(n log n) on a file of many sections. */
static int check_file_names(const struct resume_file_section *t, int n, const char *path, char err[CKPT_ERR_LEN]) {
    for (int i = 0; i < n; i++) {
        size_t len = strlen(t[i].name);
        if (len == 0 || len == STATE_NAME_LEN) {
            snprintf(err, CKPT_ERR_LEN, "%.300s: section %d has a name of %zu characters (1 to %d allowed)", path,
                     i, len, STATE_NAME_LEN - 1);
            return -1;
        }
    }
    if (n < 2) return 0;
    struct resume_file_section *sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) {
        snprintf(err, CKPT_ERR_LEN, "out of memory reading %.300s", path);
        return -1;
    }
    memcpy(sorted, t, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, compare_names);
    int rc = 0;
    for (int i = 1; i < n && rc == 0; i++) {
        if (strcmp(sorted[i - 1].name, sorted[i].name) == 0) {
            snprintf(err, CKPT_ERR_LEN, "%.300s: section '%s' appears more than once", path, sorted[i].name);
            rc = -1;
        }
    }
    free(sorted);
    return rc;
}

/* Reads the header into meta and walks the section headers into table
 * (allocated here; *table may be NULL when the file has no sections). */

static int corrupt_header(const char *path, const char *why, char err[CKPT_ERR_LEN]) {
    snprintf(err, CKPT_ERR_LEN,
             "%.300s: the header is corrupt (%s): the step, seed, data position, data sources, shape or section "
             "table cannot be trusted",
             path, why);
    return -1;
}

/* Reads and checks the header and table into meta and table (allocated
 * here; *table may be NULL when the file has no sections). */
static int scan_file(FILE *f, const char *path, struct resume_meta *meta, struct resume_file_section **table,
                     int *count, char err[CKPT_ERR_LEN]) {
    off_t size = -1;
    if (fseeko(f, 0, SEEK_END) == 0) size = ftello(f);
    if (size < 0 || fseeko(f, 0, SEEK_SET) != 0) {
        snprintf(err, CKPT_ERR_LEN, "cannot seek in %.300s: %s", path, strerror(errno));
        return -1;
    }
    unsigned char fixed[HEADER_BYTES];
    if (size < 8 || read_exact(f, fixed, 8, path, err)) {
        if (size < 8) snprintf(err, CKPT_ERR_LEN, "%.300s is truncated: %lld bytes", path, (long long)size);
        return -1;
    }
    const unsigned char *p = fixed;
    uint32_t magic = get_u32(&p), version = get_u32(&p);
    if (magic != RESUME_MAGIC) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: not a resume state (magic 0x%08x, expected 0x%08x)", path,
                 (unsigned)magic, (unsigned)RESUME_MAGIC);
        return -1;
    }
    if (version != RESUME_VERSION && version != RESUME_VERSION_PATH_DIGEST) {
        snprintf(err, CKPT_ERR_LEN,
                 "%.300s: resume state version %u, this build reads versions %d and %d only%s", path,
                 (unsigned)version, RESUME_VERSION_PATH_DIGEST, RESUME_VERSION,
                 version < RESUME_VERSION ? " (older states carry no checksums; restart from a model file with "
                                            "--init_from, or resume with the build that wrote it)"
                                          : "");
        return -1;
    }
    if (read_exact_at(f, 8, fixed + 8, HEADER_BYTES - 8, path, err)) return -1;
    uint32_t n;
    memcpy(&n, fixed + HEADER_BYTES - 4, 4);
    /* Bound the count by what the file could hold before allocating for it:
     * a flipped count fails here or on the checksum. */
    if ((uint64_t)n > (uint64_t)(size - HEADER_BYTES) / TABLE_ENTRY_BYTES || n > INT32_MAX)
        return corrupt_header(path, "its section count does not fit the file; or the file is truncated", err);
    size_t hb = HEADER_BYTES + (size_t)table_bytes(n);
    unsigned char *head = malloc(hb);
    struct resume_file_section *t = n ? calloc(n, sizeof *t) : NULL;
    if (!head || (n && !t)) {
        snprintf(err, CKPT_ERR_LEN, "out of memory reading %.300s", path);
        goto fail;
    }
    memcpy(head, fixed, HEADER_BYTES);
    if (read_exact_at(f, HEADER_BYTES, head + HEADER_BYTES, hb - HEADER_BYTES, path, err)) goto fail;
    p = head + 8;
    uint32_t stored = get_u32(&p), computed = crc32c(0, head + CRC_FROM, hb - CRC_FROM);
    if (stored != computed) {
        char why[96];
        snprintf(why, sizeof why, "checksum 0x%08x stored, 0x%08x computed", (unsigned)stored, (unsigned)computed);
        corrupt_header(path, why, err);
        goto fail;
    }
    meta->step = get_u64(&p), meta->seed = get_u64(&p);
    meta->data_epoch = get_u64(&p), meta->data_cursor = get_u64(&p), meta->skipped_steps = get_u64(&p);
    int *dims[] = {&meta->shape.L, &meta->shape.C, &meta->shape.NH, &meta->shape.T, &meta->shape.V, &meta->shape.Vp};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) *dims[i] = (int32_t)get_u32(&p);
    meta->fingerprint = get_u32(&p);
    memcpy(meta->data.pattern, p, DATA_PATTERN_LEN), p += DATA_PATTERN_LEN;
    meta->data.pattern[DATA_PATTERN_LEN - 1] = '\0';
    meta->data.files = get_u64(&p), meta->data.bytes = get_u64(&p), meta->data.digest = get_u32(&p);
    meta->data.of_contents = version == RESUME_VERSION;
    p += 4; /* n, read above */
    off_t pos = (off_t)hb;
    for (uint32_t i = 0; i < n; i++) {
        memcpy(t[i].name, p, STATE_NAME_LEN), p += STATE_NAME_LEN; /* t[i].name[32] stays NUL */
        uint32_t code = get_u32(&p);
        t[i].numel = get_u64(&p);
        t[i].crc = get_u32(&p);
        if (code > DISK_U8) {
            snprintf(err, CKPT_ERR_LEN, "%.300s: section '%s' has unknown dtype %u", path, t[i].name, (unsigned)code);
            goto fail;
        }
        t[i].dtype = code == DISK_BF16 ? DTYPE_BF16 : code == DISK_U8 ? DTYPE_U8 : DTYPE_FP32;
        t[i].data_offset = pos;
        uint64_t room = pos <= size ? (uint64_t)(size - pos) : 0, esz = dtype_size(t[i].dtype);
        if (t[i].numel > room / esz) {
            snprintf(err, CKPT_ERR_LEN, "%.300s is truncated: section '%s' needs %llu elements, the file ends first",
                     path, t[i].name, (unsigned long long)t[i].numel);
            goto fail;
        }
        pos += (off_t)(t[i].numel * esz);
    }
    if (pos != size) {
        snprintf(err, CKPT_ERR_LEN, "%.300s has %lld bytes of trailing data after its sections", path,
                 (long long)(size - pos));
        goto fail;
    }
    if (check_file_names(t, (int)n, path, err)) goto fail;
    free(head);
    *table = t, *count = (int)n;
    return 0;
fail:
    free(head);
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
    if (path_check_input(path, "resume state", err) != 0) return -1; /* a FIFO would block fopen */
    if (!(r->f = fopen(path, "rb"))) {
        snprintf(err, CKPT_ERR_LEN, "cannot open %.300s: %s", path, strerror(errno));
        return -1;
    }
    struct resume_meta m = {0};
    if (scan_file(r->f, path, &m, &r->sections, &r->n, err)) {
        resume_close(r);
        return -1;
    }
    *meta = m;
    return 0;
}

bool resume_has(const struct resume_reader *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->sections[i].name, name) == 0) return true;
    return false;
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
        uint32_t crc;
        uint64_t lo = (uint64_t)s->data_offset;
        if (stream_crc(r->f, lo, lo + s->numel * dtype_size(s->dtype), r->path, &crc, err)) return -1;
        if (crc != s->crc) {
            snprintf(err, CKPT_ERR_LEN,
                     "%.300s: section '%s' is corrupt (checksum 0x%08x stored, 0x%08x computed over its %llu "
                     "elements)",
                     r->path, name, (unsigned)s->crc, (unsigned)crc, (unsigned long long)s->numel);
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
    if (read_exact_at(r->f, s->data_offset + (off_t)(first * esz), dst, n * esz, r->path, err)) return -1;
    return check_finite(s, first, n, dst, r->path, "", err);
}

void resume_close(struct resume_reader *r) {
    if (r->f) fclose(r->f);
    free(r->sections);
    r->f = NULL, r->sections = NULL, r->n = 0;
}
