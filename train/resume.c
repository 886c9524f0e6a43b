/* Resume states: our own format of named sections, so a later optimizer
 * adds sections rather than a format version. On disk (native byte order,
 * fixed-width fields written one by one, so struct padding never leaks in):
 *
 *   header   u32 magic "SHLB", u32 version,
 *            u64 step, seed, data_epoch, data_cursor,
 *            i32 L, C, NH, T, V, Vp, u32 fingerprint, u32 n_sections
 *   section  char name[32] (NUL-padded), u32 dtype (0 fp32, 1 bf16),
 *            u64 numel, then numel elements of raw data
 *
 * Loading scans the section headers first (seeking over the data), so the
 * caller's sections may come in any order and unknown ones are skipped. */
#include "checkpoint.h"
#include "fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

enum {
    RESUME_MAGIC = 0x53484C42, /* "SHLB" */
    RESUME_VERSION = 1,
    HEADER_BYTES = 4 + 4 + 4 * 8 + 6 * 4 + 4 + 4,
    SECTION_HEAD_BYTES = STATE_NAME_LEN + 4 + 8,
    DISK_FP32 = 0,
    DISK_BF16 = 1
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

static int check_sections(const struct state_section *s, int n, char err[CKPT_ERR_LEN]) {
    if (n < 0) {
        snprintf(err, CKPT_ERR_LEN, "%d sections given", n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (check_name(s[i].name, err)) return -1;
        if (s[i].dtype != DTYPE_FP32 && s[i].dtype != DTYPE_BF16) {
            snprintf(err, CKPT_ERR_LEN, "section '%s': unknown dtype %d", s[i].name, (int)s[i].dtype);
            return -1;
        }
        if (s[i].numel && !s[i].data) {
            snprintf(err, CKPT_ERR_LEN, "section '%s': no data for %zu elements", s[i].name, s[i].numel);
            return -1;
        }
        for (int j = 0; j < i; j++) {
            if (strcmp(s[i].name, s[j].name) == 0) {
                snprintf(err, CKPT_ERR_LEN, "section '%s' given twice", s[i].name);
                return -1;
            }
        }
    }
    return 0;
}

int resume_save(const char *path, const struct resume_meta *meta, const struct state_section *sections, int n,
                char err[CKPT_ERR_LEN]) {
    if (check_sections(sections, n, err)) return -1;
    unsigned char head[HEADER_BYTES], *p = head;
    put_u32(&p, RESUME_MAGIC), put_u32(&p, RESUME_VERSION);
    put_u64(&p, meta->step), put_u64(&p, meta->seed), put_u64(&p, meta->data_epoch), put_u64(&p, meta->data_cursor);
    const struct model_shape *s = &meta->shape;
    int32_t dims[] = {s->L, s->C, s->NH, s->T, s->V, s->Vp};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) put_u32(&p, (uint32_t)dims[i]);
    put_u32(&p, meta->fingerprint), put_u32(&p, (uint32_t)n);

    struct atomic_file af;
    if (atomic_open(&af, path, err)) return -1;
    /* atomic_write removes the temp file itself when it fails. */
    if (atomic_write(&af, head, sizeof head, err)) return -1;
    for (int i = 0; i < n; i++) {
        unsigned char sh[SECTION_HEAD_BYTES] = {0}, *q = sh;
        memcpy(q, sections[i].name, strlen(sections[i].name)), q += STATE_NAME_LEN;
        put_u32(&q, sections[i].dtype == DTYPE_BF16 ? DISK_BF16 : DISK_FP32);
        put_u64(&q, sections[i].numel);
        if (atomic_write(&af, sh, sizeof sh, err) ||
            atomic_write(&af, sections[i].data, sections[i].numel * dtype_size(sections[i].dtype), err))
            return -1;
    }
    return atomic_commit(&af, err);
}

/* One entry of the file's section table. */
struct file_section {
    char name[STATE_NAME_LEN + 1];
    enum dtype dtype;
    uint64_t numel;
    off_t data_offset;
};

/* Reads the header into meta and walks the section headers into table
 * (allocated here; *table may be NULL when the file has no sections). */
static int scan_file(FILE *f, const char *path, struct resume_meta *meta, struct file_section **table, uint32_t *count,
                     char err[CKPT_ERR_LEN]) {
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
    if (version != RESUME_VERSION) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: resume state version %u, this build reads version %d", path,
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
    if ((uint64_t)n > (uint64_t)(size - HEADER_BYTES) / SECTION_HEAD_BYTES) {
        snprintf(err, CKPT_ERR_LEN, "%.300s is truncated: %u sections announced in %lld bytes", path, (unsigned)n,
                 (long long)size);
        return -1;
    }
    struct file_section *t = n ? calloc(n, sizeof *t) : NULL;
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
        if (code != DISK_FP32 && code != DISK_BF16) {
            snprintf(err, CKPT_ERR_LEN, "%.300s: section '%s' has unknown dtype %u", path, t[i].name, (unsigned)code);
            goto fail;
        }
        t[i].dtype = code == DISK_BF16 ? DTYPE_BF16 : DTYPE_FP32;
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
    *table = t, *count = n;
    return 0;
fail:
    free(t);
    return -1;
}

int resume_load(const char *path, struct resume_meta *meta, struct state_section *sections, int n,
                char err[CKPT_ERR_LEN]) {
    if (check_sections(sections, n, err)) return -1;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, CKPT_ERR_LEN, "cannot open %.300s: %s", path, strerror(errno));
        return -1;
    }
    struct resume_meta m;
    struct file_section *table = NULL;
    uint32_t count = 0;
    int rc = -1;
    if (scan_file(f, path, &m, &table, &count, err)) goto done;
    for (int i = 0; i < n; i++) {
        struct state_section *s = &sections[i];
        const struct file_section *fs = NULL;
        for (uint32_t j = 0; j < count && !fs; j++)
            if (strcmp(table[j].name, s->name) == 0) fs = &table[j];
        if (!fs) {
            snprintf(err, CKPT_ERR_LEN, "%.300s: section '%s' is missing", path, s->name);
            goto done;
        }
        if (fs->dtype != s->dtype || fs->numel != (uint64_t)s->numel) {
            snprintf(err, CKPT_ERR_LEN, "%.300s: section '%s' is %llu %s elements in the file, %zu %s expected", path,
                     s->name, (unsigned long long)fs->numel, dtype_name(fs->dtype), s->numel, dtype_name(s->dtype));
            goto done;
        }
        if (fseeko(f, fs->data_offset, SEEK_SET) != 0) {
            snprintf(err, CKPT_ERR_LEN, "cannot seek in %.300s: %s", path, strerror(errno));
            goto done;
        }
        if (read_exact(f, s->data, s->numel * dtype_size(s->dtype), path, err)) goto done;
    }
    *meta = m;
    rc = 0;
done:
    free(table);
    fclose(f);
    return rc;
}
