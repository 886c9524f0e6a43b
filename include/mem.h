/* The tagged allocator: every long-lived buffer is allocated in a memory
 * space, under a category and a name, so the memory table can print
 * measured bytes beside theory bytes, line by line. One tracker per rank
 * lives in the run context. Header-only: it sits below every module that
 * allocates (model, optimizer, parallel, trainer).
 *
 * A failed allocation does not exit: mem_alloc returns NULL and the tracker
 * keeps the first failure (buffer, bytes, category). The caller finishes
 * its set of allocations, then asks mem_failed() and reports, so every rank
 * can agree on the failure and exit together instead of one rank dying
 * inside a collective. */
#ifndef SHARDLAB_MEM_H
#define SHARDLAB_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem_space.h"

enum mem_category {
    MEM_PARAMS,       /* working weights in param_dtype */
    MEM_MASTER,       /* fp32 master weights (bf16 params only) */
    MEM_GRADS,        /* gradients in grad_dtype */
    MEM_OPTIMIZER,    /* optimizer states (Adam m and v, ...) */
    MEM_ACTIVATIONS,  /* tensors saved by forward for backward */
    MEM_SCRATCH,      /* fp32 working space: widened weights, logits, d-activations */
    MEM_COMM,         /* collective buffers */
    MEM_NUM_CATEGORIES
};

/* Where a buffer lives (mem_space.h). The CPU build has host memory only; a
 * device build supplies the device space's allocate/free (struct
 * mem_space_ops). */

/* Bytes in a MiB (2^20), for sizes given or printed in MiB. */
#define MIB_BYTES 1048576.0

struct mem_space_ops {
    void *(*alloc)(size_t bytes);  /* zero-filled, 64-byte aligned; NULL on failure */
    void (*free)(void *ptr);
};

enum { MEM_MAX_RECORDS = 160, MEM_NAME_LEN = 48, MEM_ALIGN = 64 };

struct mem_record {
    char name[MEM_NAME_LEN];
    enum mem_category category;
    enum mem_space space;
    size_t bytes;
    void *ptr;
};

struct mem_tracker {
    size_t live[MEM_NUM_CATEGORIES];
    size_t peak[MEM_NUM_CATEGORIES];
    size_t live_total, peak_total;
    size_t live_space[MEM_NUM_SPACES], peak_space[MEM_NUM_SPACES]; /* host and device apart */
    int n_records;
    struct mem_record records[MEM_MAX_RECORDS];
    struct mem_space_ops device;   /* unset in the CPU build: MEM_DEVICE is an error */
    bool failed;                   /* the first failure, kept for the message */
    struct mem_record failure;
    const char *failure_why;
};

static inline const char *mem_category_name(enum mem_category c) {
    static const char *const names[MEM_NUM_CATEGORIES] = {
        [MEM_PARAMS] = "params",           [MEM_MASTER] = "master",
        [MEM_GRADS] = "grads",             [MEM_OPTIMIZER] = "optimizer",
        [MEM_ACTIVATIONS] = "activations", [MEM_SCRATCH] = "scratch",
        [MEM_COMM] = "comm",
    };
    return names[c];
}

static inline void *mem_host_alloc(size_t bytes) {
    size_t rounded = (bytes + MEM_ALIGN - 1) / MEM_ALIGN * MEM_ALIGN;
    if (rounded < bytes) return NULL; /* the rounding overflowed */
    void *p = aligned_alloc(MEM_ALIGN, rounded ? rounded : MEM_ALIGN);
    if (p) memset(p, 0, rounded ? rounded : MEM_ALIGN);
    return p;
}

static inline void mem_fail(struct mem_tracker *t, enum mem_space s, enum mem_category c, const char *name,
                            size_t bytes, const char *why) {
    if (t->failed) return;
    t->failed = true;
    t->failure = (struct mem_record){.category = c, .space = s, .bytes = bytes};
    snprintf(t->failure.name, sizeof t->failure.name, "%s", name);
    t->failure_why = why;
}

/* Zero-filled, 64-byte aligned; NULL (and a recorded failure) when the
 * space cannot give the bytes or the record table is full. */
static inline void *mem_alloc(struct mem_tracker *t, enum mem_space s, enum mem_category c, const char *name,
                              size_t bytes) {
    if (t->n_records == MEM_MAX_RECORDS) {
        mem_fail(t, s, c, name, bytes, "too many tracked buffers (raise MEM_MAX_RECORDS)");
        return NULL;
    }
    void *p = NULL;
    if (s == MEM_HOST) p = mem_host_alloc(bytes);
    else if (t->device.alloc) p = t->device.alloc(bytes);
    if (!p) {
        mem_fail(t, s, c, name, bytes, s == MEM_HOST || t->device.alloc ? "out of memory" : "no device in this build");
        return NULL;
    }
    struct mem_record *r = &t->records[t->n_records++];
    *r = (struct mem_record){.category = c, .space = s, .bytes = bytes, .ptr = p};
    snprintf(r->name, sizeof r->name, "%s", name);
    t->live[c] += bytes;
    t->live_total += bytes;
    t->live_space[s] += bytes;
    if (t->live_space[s] > t->peak_space[s]) t->peak_space[s] = t->live_space[s];
    if (t->live[c] > t->peak[c]) t->peak[c] = t->live[c];
    if (t->live_total > t->peak_total) t->peak_total = t->live_total;
    return p;
}

static inline bool mem_failed(const struct mem_tracker *t) { return t->failed; }

/* "out of memory allocating 'params' (123 bytes, params, host)" */
static inline void mem_failure_message(const struct mem_tracker *t, char *buf, size_t len) {
    const struct mem_record *f = &t->failure;
    snprintf(buf, len, "%s allocating '%s' (%zu bytes, %s, %s memory)", t->failure_why, f->name, f->bytes,
             mem_category_name(f->category), f->space == MEM_HOST ? "host" : "device");
}

static inline void mem_free(struct mem_tracker *t, void *ptr) {
    if (!ptr) return;
    for (int i = 0; i < t->n_records; i++) {
        struct mem_record *r = &t->records[i];
        if (r->ptr != ptr) continue;
        t->live[r->category] -= r->bytes;
        t->live_total -= r->bytes;
        t->live_space[r->space] -= r->bytes;
        if (r->space == MEM_HOST) free(ptr);
        else t->device.free(ptr);
        memmove(r, r + 1, (size_t)(t->n_records - i - 1) * sizeof *r);
        t->n_records--;
        return;
    }
    fprintf(stderr, "error: mem_free of an untracked pointer\n");
    abort();
}

/* Frees every buffer still recorded (end of run). */
static inline void mem_free_all(struct mem_tracker *t) {
    while (t->n_records > 0) mem_free(t, t->records[t->n_records - 1].ptr);
}

#endif
