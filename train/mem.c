#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const category_names[MEM_NUM_CATEGORIES] = {
    [MEM_PARAMS] = "params",           [MEM_MASTER] = "master",
    [MEM_GRADS] = "grads",             [MEM_OPTIMIZER] = "optimizer",
    [MEM_ACTIVATIONS] = "activations", [MEM_SCRATCH] = "scratch",
    [MEM_COMM] = "comm",
};

const char *mem_category_name(enum mem_category c) { return category_names[c]; }

void *mem_alloc(struct mem_tracker *t, enum mem_category c, const char *name, size_t bytes) {
    if (t->n_records == MEM_MAX_RECORDS) {
        fprintf(stderr, "error: more than %d tracked buffers (allocating '%s')\n", MEM_MAX_RECORDS, name);
        exit(1);
    }
    enum { ALIGN = 64 };
    size_t rounded = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    void *p = aligned_alloc(ALIGN, rounded ? rounded : ALIGN);
    if (!p) {
        fprintf(stderr, "error: out of memory allocating %zu bytes for '%s' (%s)\n", bytes, name,
                mem_category_name(c));
        exit(1);
    }
    memset(p, 0, rounded ? rounded : ALIGN);
    struct mem_record *r = &t->records[t->n_records++];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->category = c;
    r->bytes = bytes;
    r->ptr = p;
    t->live[c] += bytes;
    t->live_total += bytes;
    if (t->live[c] > t->peak[c]) t->peak[c] = t->live[c];
    if (t->live_total > t->peak_total) t->peak_total = t->live_total;
    return p;
}

void mem_free(struct mem_tracker *t, void *ptr) {
    if (!ptr) return;
    for (int i = 0; i < t->n_records; i++) {
        struct mem_record *r = &t->records[i];
        if (r->ptr != ptr) continue;
        t->live[r->category] -= r->bytes;
        t->live_total -= r->bytes;
        free(ptr);
        memmove(r, r + 1, (size_t)(t->n_records - i - 1) * sizeof *r);
        t->n_records--;
        return;
    }
    fprintf(stderr, "error: mem_free of an untracked pointer\n");
    abort();
}

void mem_free_all(struct mem_tracker *t) {
    while (t->n_records > 0) mem_free(t, t->records[t->n_records - 1].ptr);
}
